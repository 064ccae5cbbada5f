#!/usr/bin/env python3
"""moto's server for Kerf's AWS tests, on 127.0.0.1.

EKS publishes its optimized AMI ids as public SSM parameters under /aws/service/ (the AMI
aliases read them). moto ships none of these and refuses writes under /aws, so the tests
write the parameters they want to a JSON file ({"name": "value", ...}) and this launcher
loads them into every region's SSM backend before serving.

    moto-server.py --port PORT [--ssm-parameters FILE]
"""

import argparse
import datetime
import json
from collections import defaultdict

from moto.server import main as moto_main
from moto.ssm import models


def preload(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        parameters = json.load(f)
    original = models.ParameterDict.__init__

    def init(self, account_id: str, region_name: str) -> None:
        original(self, account_id, region_name)
        for name, value in parameters.items():
            defaultdict.__getitem__(self, name).append(
                models.Parameter(
                    account_id=account_id,
                    name=name,
                    value=value,
                    parameter_type="String",
                    description=None,
                    allowed_pattern=None,
                    keyid=None,
                    last_modified_date=datetime.datetime.now(datetime.timezone.utc),
                    version=1,
                    data_type="text",
                )
            )

    models.ParameterDict.__init__ = init


def run() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ssm-parameters")
    args = parser.parse_args()
    if args.ssm_parameters:
        preload(args.ssm_parameters)
    moto_main(["-H", "127.0.0.1", "-p", str(args.port)])


if __name__ == "__main__":
    run()
