#!/usr/bin/env python3
"""moto's server for Kerf's AWS tests, on 127.0.0.1.

EKS publishes its optimized AMI ids as public SSM parameters under /aws/service/ (the AMI
aliases read them). moto ships none of these and refuses writes under /aws, so the tests
write the parameters they want to a JSON file ({"name": "value", ...}) and this launcher
loads them into every region's SSM backend before serving.

    moto-server.py --port PORT [--ssm-parameters FILE] [--refuse-spot FILE]
                   [--capacity-reservations FILE] [--instance-status FILE] [--calls FILE]
                   [--zonal-shifts FILE]

moto's EC2 Fleet launches an instance from a launch template's image, type, subnet, user data
and tags, but not from its security groups (moto reads neither `SecurityGroupIds` nor
`NetworkInterfaces[].Groups`: on-demand instances get no group, spot ones the VPC's
`default`), its instance profile or its metadata options. Real EC2 applies all three, and
Kerf's drift checks and the tests' launch checks read them back, so this launcher stands in
for that part: after a fleet launches, each instance gets its template's groups, profile and
metadata options (`complete_fleet_instances`).

moto launches whatever it is asked for. `--refuse-spot FILE` plays a spot shortage: while FILE
exists, a spot CreateFleet launches nothing and answers InsufficientInstanceCapacity for each
of its overrides, as EC2 does when no pool of the request has capacity; each refused request
is appended to FILE.log as a JSON line (time, overrides), so a test can tell when and how often.

moto has no capacity reservations. `--capacity-reservations FILE` stands in for EC2's: FILE is
a JSON list of reservations ({"id", "instanceType", "zone", "count", "type": "default" |
"capacity-block", "endDate": epoch seconds or null, "tags": {...}, "ownerId",
"instanceMatchCriteria"}), re-read at every call so a test can change them.
DescribeCapacityReservations answers with them (ids, and the state, owner-id, tag:K, tag-key and
instance-match-criteria filters; AvailableInstanceCount is the count less the instances
launched into it), and a fleet whose launch template targets a reservation
(CapacityReservationSpecification.CapacityReservationTarget) launches into it while it has
room, and answers ReservationCapacityExceeded when it has none, as EC2 does.

moto has no placement groups (CreatePlacementGroup answers 500). `placement_groups()` stands in
for EC2's, in memory: CreatePlacementGroup (GroupName, Strategy, PartitionCount, SpreadLevel)
makes an `available` group with a `pg-` id; DescribePlacementGroups answers by GroupNames or
GroupIds and the state, strategy and group-name filters, and refuses a name or id it does not
hold with InvalidPlacementGroup.Unknown, as EC2 does; DeletePlacementGroup removes one.

moto reports every instance's status checks as passed and ignores DescribeInstanceStatus's
filters. `--instance-status FILE` plays failed checks: FILE is a JSON object, instance id ->
{"instance": "impaired"|"ok", "system": "impaired"|"ok", "impairedSince": epoch seconds,
"events": ["instance-retirement", ...]}, re-read at every call. A call with filters
(instance-status.status, system-status.status, event.code) answers with the FILE's instances
that match them, as EC2 filters; a call without any answers as moto does.

moto has no ARC zonal shift. `--zonal-shifts FILE` stands in for the one call Kerf makes of it,
GetManagedResource (`GET /managedresources/<ARN>`): while FILE is missing, no resource is
managed and the call answers ResourceNotFoundException, as ARC does for a cluster not enabled
for zonal shift; while it holds a JSON list of shifts ({"awayFrom": zone id, "expiryTime": epoch
seconds, "appliedStatus": "APPLIED" | "NOT_APPLIED"}), re-read at every call, it answers with
them. The call is checked against IAM as `arc-zonal-shift:GetManagedResource`, as moto checks
its own.

moto enforces IAM once told to (`POST /moto-api/reset-auth` with the number of calls to let
through first): each call's access key must be an IAM user's or an assumed role's, and its
action must be allowed by that identity's policies. `--calls FILE` appends each call it checks
to FILE as a JSON line ({"key": access key id, "action": "ec2:CreateFleet", "allowed": bool}),
so a test can tell which permissions an identity used and which it was refused. moto matches a
policy's actions and conditions, not its resources: an EC2 call is checked against `*`. moto
recomputes each signature from the request as it parsed it, which for some of the Rust SDK's
requests differs from what was signed (EKS's REST paths; a form value with parentheses, as
DescribeSpotPriceHistory's `Linux/UNIX (Amazon VPC)`): with `--calls` signatures go unchecked;
the access key, its session token and the action are.
SQS's batch calls are checked for the single call's permission, as IAM does. A refusal is
worded in the call's own protocol, as AWS words it: moto answers every refusal in EC2's XML,
which an SDK reading a JSON protocol (SSM, SQS, EKS) or IAM's query protocol cannot parse;
those are answered as JSON (`AccessDeniedException`) and as IAM's `ErrorResponse`.
"""

import argparse
import datetime
import json
import os
import time
import uuid
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


def complete_fleet_instances() -> None:
    from moto.ec2.models.fleets import Fleet
    from moto.ec2.models.instances import MetadataOptions

    original = Fleet.__init__

    def init(self, ec2_backend, *args, **kwargs) -> None:
        original(self, ec2_backend, *args, **kwargs)
        launched = [(i["instance"], i["launch_spec"]) for i in self.on_demand_instances]
        launched += [(r.instance, r.launch_spec) for r in self.spot_requests]
        for instance, spec in launched:
            if spec is None or not spec.launch_template_spec:
                continue
            template = spec.launch_template_spec
            data = ec2_backend.get_launch_template(template["LaunchTemplateId"]).get_version(
                template["Version"]).data
            interfaces = data.get("NetworkInterfaces") or [{}]
            groups = data.get("SecurityGroupIds") or interfaces[0].get("Groups") or []
            if groups:
                ec2_backend.modify_instance_security_groups(instance.id, groups)
            profile = data.get("IamInstanceProfile") or {}
            if profile.get("Name") or profile.get("Arn"):
                ec2_backend.associate_iam_instance_profile(
                    instance_id=instance.id,
                    iam_instance_profile_name=profile.get("Name"),
                    iam_instance_profile_arn=profile.get("Arn"),
                )
            if data.get("MetadataOptions"):
                instance.metadata_options = MetadataOptions(data["MetadataOptions"])

    Fleet.__init__ = init


def refuse_spot(path: str) -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.responses.fleets import Fleets

    original = Fleets.create_fleet

    def create_fleet(self):
        target = self._get_param("TargetCapacitySpecification", {})
        if not os.path.exists(path) or target.get("DefaultTargetCapacityType") != "spot":
            return original(self)
        errors, refused = [], []
        for config in self._get_param("LaunchTemplateConfigs", []):
            spec = config.get("LaunchTemplateSpecification", {})
            for override in config.get("Overrides", []):
                subnet = override.get("SubnetId")
                zone = override.get("AvailabilityZone")
                if subnet and not zone:
                    zone = self.ec2_backend.get_subnet(subnet).availability_zone
                refused.append([override.get("InstanceType"), zone])
                errors.append({
                    "LaunchTemplateAndOverrides": {
                        "LaunchTemplateSpecification": spec,
                        "Overrides": {"InstanceType": override.get("InstanceType"),
                                      "SubnetId": subnet, "AvailabilityZone": zone},
                    },
                    "Lifecycle": "spot",
                    "ErrorCode": "InsufficientInstanceCapacity",
                    "ErrorMessage": "There is no Spot capacity available that matches your request.",
                })
        with open(path + ".log", "a", encoding="utf-8") as log:
            log.write(json.dumps({"time": time.time(), "overrides": refused}) + "\n")
        return ActionResult({"FleetId": f"fleet-{uuid.uuid4()}", "Instances": [], "Errors": errors})

    Fleets.create_fleet = create_fleet


def capacity_reservations(path: str) -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.models.fleets import Fleet
    from moto.ec2.responses import EC2Response
    from moto.ec2.responses.fleets import Fleets

    inside: dict[str, set[str]] = defaultdict(set)  # reservation id -> instance ids

    def held() -> list[dict]:
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def room(r: dict) -> int:
        return max(0, r["count"] - len(inside[r["id"]]))

    def prune(backend) -> None:
        # a terminated instance gives its place back
        for ids in inside.values():
            for instance_id in list(ids):
                try:
                    state = backend.get_instance(instance_id).state
                except Exception:  # moto forgets terminated instances after a while
                    state = "terminated"
                if state in ("terminated", "shutting-down"):
                    ids.discard(instance_id)

    def target(backend, config) -> str | None:
        spec = config.get("LaunchTemplateSpecification", {})
        template_id = spec.get("LaunchTemplateId")
        if not template_id:
            return None
        data = backend.get_launch_template(template_id).get_version(
            spec.get("Version", "$Latest")).data
        crs = data.get("CapacityReservationSpecification") or {}
        return (crs.get("CapacityReservationTarget") or {}).get("CapacityReservationId")

    def describe_capacity_reservations(self):
        ids = self._get_param("CapacityReservationIds", [])
        filters = self._filters_from_querystring()
        prune(self.ec2_backend)
        out = []
        for r in held():
            if ids and r["id"] not in ids:
                continue
            fields = {
                "state": ["active"],
                "owner-id": [r.get("ownerId", "123456789012")],
                "instance-match-criteria": [r.get("instanceMatchCriteria", "targeted")],
            }
            fields.update({f"tag:{k}": [v] for k, v in r.get("tags", {}).items()})
            keys = list(r.get("tags", {}))
            if any(name == "tag-key" and not set(values) & set(keys)
                   or name != "tag-key" and not set(values) & set(fields.get(name, []))
                   for name, values in filters.items()):
                continue
            entry = {
                "CapacityReservationId": r["id"],
                "OwnerId": r.get("ownerId", "123456789012"),
                "InstanceType": r["instanceType"],
                "AvailabilityZone": r["zone"],
                "TotalInstanceCount": r["count"],
                "AvailableInstanceCount": room(r),
                "State": "active",
                "InstanceMatchCriteria": r.get("instanceMatchCriteria", "targeted"),
                "ReservationType": r.get("type", "default"),
                "Tags": [{"Key": k, "Value": v} for k, v in r.get("tags", {}).items()],
            }
            if r.get("endDate"):
                entry["EndDate"] = datetime.datetime.fromtimestamp(
                    r["endDate"], datetime.timezone.utc)
            out.append(entry)
        return ActionResult({"CapacityReservations": out})

    EC2Response.describe_capacity_reservations = describe_capacity_reservations

    original_create = Fleets.create_fleet

    def create_fleet(self):
        by_id = {r["id"]: r for r in held()}
        prune(self.ec2_backend)
        errors = []
        for config in self._get_param("LaunchTemplateConfigs", []):
            reservation = by_id.get(target(self.ec2_backend, config) or "")
            if reservation is None or room(reservation) > 0:
                continue
            for override in config.get("Overrides", []):
                errors.append({
                    "LaunchTemplateAndOverrides": {
                        "LaunchTemplateSpecification": config.get("LaunchTemplateSpecification"),
                        "Overrides": {"InstanceType": override.get("InstanceType"),
                                      "SubnetId": override.get("SubnetId")},
                    },
                    "Lifecycle": "on-demand",
                    "ErrorCode": "ReservationCapacityExceeded",
                    "ErrorMessage": "Insufficient capacity in the capacity reservation.",
                })
        if errors:
            return ActionResult({"FleetId": f"fleet-{uuid.uuid4()}", "Instances": [],
                                 "Errors": errors})
        return original_create(self)

    Fleets.create_fleet = create_fleet

    original_init = Fleet.__init__

    def init(self, ec2_backend, *args, **kwargs) -> None:
        original_init(self, ec2_backend, *args, **kwargs)
        for i in self.on_demand_instances:
            spec = i["launch_spec"]
            if spec is None or not spec.launch_template_spec:
                continue
            config = {"LaunchTemplateSpecification": spec.launch_template_spec}
            reservation = target(ec2_backend, config)
            if reservation:
                inside[reservation].add(i["instance"].id)

    Fleet.__init__ = init


def placement_groups() -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response

    groups: dict[str, dict] = {}  # by name

    def create_placement_group(self):
        name = self._get_param("GroupName")
        if name in groups:
            raise EC2ClientError("InvalidPlacementGroup.Duplicate",
                                 f"The Placement Group '{name}' already exists.")
        group = {
            "GroupName": name,
            "GroupId": f"pg-{uuid.uuid4().hex[:17]}",
            "State": "available",
            "Strategy": self._get_param("Strategy", "cluster"),
        }
        if group["Strategy"] == "partition":
            group["PartitionCount"] = int(self._get_param("PartitionCount", 2))
        if self._get_param("SpreadLevel"):
            group["SpreadLevel"] = self._get_param("SpreadLevel")
        groups[name] = group
        return ActionResult({"PlacementGroup": group})

    def describe_placement_groups(self):
        names = self._get_param("GroupNames", [])
        ids = self._get_param("GroupIds", [])
        filters = self._filters_from_querystring()
        known_ids = {g["GroupId"] for g in groups.values()}
        for missing in [n for n in names if n not in groups] + [i for i in ids if i not in known_ids]:
            raise EC2ClientError("InvalidPlacementGroup.Unknown",
                                 f"The Placement Group '{missing}' is unknown.")
        out = []
        for g in groups.values():
            if (names and g["GroupName"] not in names) or (ids and g["GroupId"] not in ids):
                continue
            fields = {"state": g["State"], "strategy": g["Strategy"], "group-name": g["GroupName"]}
            if any(fields.get(name) not in values for name, values in filters.items()):
                continue
            out.append(g)
        return ActionResult({"PlacementGroups": out})

    def delete_placement_group(self):
        groups.pop(self._get_param("GroupName"), None)
        return ActionResult({})

    EC2Response.create_placement_group = create_placement_group
    EC2Response.describe_placement_groups = describe_placement_groups
    EC2Response.delete_placement_group = delete_placement_group


def instance_status(path: str) -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.responses import EC2Response

    original = EC2Response.describe_instance_status

    def describe_instance_status(self):
        filters = self._filters_from_querystring()
        if not filters:
            return original(self)
        with open(path, encoding="utf-8") as f:
            held = json.load(f)
        out = []
        for instance_id, s in held.items():
            since = datetime.datetime.fromtimestamp(s.get("impairedSince", 0), datetime.timezone.utc)

            def summary(state: str) -> dict:
                failed = state == "impaired"
                detail = {"Name": "reachability", "Status": "failed" if failed else "passed"}
                if failed:
                    detail["ImpairedSince"] = since
                return {"Status": state, "Details": [detail]}

            fields = {
                "instance-status.status": s.get("instance", "ok"),
                "system-status.status": s.get("system", "ok"),
            }
            codes = s.get("events", [])
            if not all(fields[name] in values if name in fields
                       else name == "event.code" and set(codes) & set(values)
                       for name, values in filters.items()):
                continue
            instance = self.ec2_backend.get_instance(instance_id)
            out.append({
                "InstanceId": instance_id,
                "AvailabilityZone": instance.placement,
                "InstanceState": {"Code": 16, "Name": "running"},
                "InstanceStatus": summary(fields["instance-status.status"]),
                "SystemStatus": summary(fields["system-status.status"]),
                "Events": [{"Code": c, "Description": c, "NotBefore": since} for c in codes],
            })
        return ActionResult({"InstanceStatuses": out})

    EC2Response.describe_instance_status = describe_instance_status


# IAM has no permission of its own for SQS's batch calls: each needs the single call's (AWS's
# Service Authorization Reference), where moto asks for the batch call's name
SQS_BATCHES = {
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}


def record_calls(path: str) -> None:
    from moto.iam.access_control import IAMRequest

    original = IAMRequest.check_action_permitted

    def check(self, resource: str) -> None:
        self._action = SQS_BATCHES.get(self._action, self._action)
        allowed = False
        try:
            original(self, resource)
            allowed = True
        finally:
            with open(path, "a", encoding="utf-8") as f:
                scope = self._headers["Authorization"].split("Credential=", 1)[1]
                f.write(json.dumps({"key": scope.split("/", 1)[0],
                                    "action": self._action, "allowed": allowed}) + "\n")

    IAMRequest.check_action_permitted = check
    IAMRequest.check_signature = lambda self: None


def json_refusals() -> None:
    from moto.core.exceptions import AccessDeniedError, JsonRESTError
    from moto.iam.access_control import IAMRequest

    original = IAMRequest.check_action_permitted

    def check(self, resource: str) -> None:
        try:
            original(self, resource)
        except AccessDeniedError as e:
            headers = {k.lower(): v for k, v in self._headers.items()}
            json_protocol = ("x-amz-target" in headers
                             or headers.get("content-type", "").startswith("application/x-amz-json")
                             or self._action.startswith("eks:"))
            if self._action.startswith("iam:"):
                # the query protocol's own shape, which IAM answers and its SDKs read
                from xml.sax.saxutils import escape
                e.description = (
                    '<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/">'
                    "<Error><Type>Sender</Type><Code>AccessDenied</Code>"
                    f"<Message>{escape(e.message)}</Message></Error>"
                    f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>")
                raise
            if not json_protocol:
                raise
            refused = JsonRESTError("AccessDeniedException", e.message)
            refused.code = 403
            raise refused from e

    IAMRequest.check_action_permitted = check


def zonal_shifts(path: str) -> None:
    from urllib.parse import unquote

    from moto import settings
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.iam.access_control import IAMRequest
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    from werkzeug.exceptions import HTTPException

    original = DomainDispatcherApplication.__call__
    prefix = "/managedresources/"

    def answer(start_response, status: str, body: dict, error: str | None = None):
        headers = [("Content-Type", "application/json")]
        if error:
            headers.append(("x-amzn-ErrorType", error))
        start_response(status, headers)
        return [json.dumps(body).encode()]

    def call(self, environ, start_response):
        raw = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "GET" or not raw.startswith(prefix):
            return original(self, environ, start_response)
        arn = unquote(raw[len(prefix):])
        headers = {k[5:].replace("_", "-").title(): v
                   for k, v in environ.items() if k.startswith("HTTP_")}
        if ActionAuthenticatorMixin.request_count >= settings.INITIAL_NO_AUTH_ACTION_COUNT:
            try:
                IAMRequest(account_id=DEFAULT_ACCOUNT_ID, method="GET", path=raw, data={},
                           body=b"", headers=headers,
                           action="GetManagedResource").check_action_permitted("*")
            except HTTPException as e:
                message = getattr(e, "message", None) or str(e)
                return answer(start_response, "403 Forbidden",
                              {"message": message}, "AccessDeniedException")
        else:
            ActionAuthenticatorMixin.request_count += 1
        try:
            with open(path, encoding="utf-8") as f:
                shifts = json.load(f)
        except FileNotFoundError:
            return answer(start_response, "404 Not Found",
                          {"message": f"Resource {arn} not found"}, "ResourceNotFoundException")
        now = int(time.time())
        listed = [{
            "awayFrom": s["awayFrom"],
            "expiryTime": s.get("expiryTime", now + 3600),
            "appliedStatus": s.get("appliedStatus", "APPLIED"),
            "zonalShiftId": s.get("zonalShiftId", str(uuid.uuid5(uuid.NAMESPACE_URL, s["awayFrom"]))),
            "resourceIdentifier": arn,
            "startTime": s.get("startTime", now),
            "comment": s.get("comment", "kerf tests"),
        } for s in shifts]
        return answer(start_response, "200 OK", {
            "arn": arn, "name": arn.rsplit("/", 1)[-1], "appliedWeights": {},
            "zonalShifts": listed, "autoshifts": [], "zonalAutoshiftStatus": "DISABLED",
        })

    DomainDispatcherApplication.__call__ = call


def run() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ssm-parameters")
    parser.add_argument("--refuse-spot")
    parser.add_argument("--capacity-reservations")
    parser.add_argument("--instance-status")
    parser.add_argument("--calls")
    parser.add_argument("--zonal-shifts")
    args = parser.parse_args()
    complete_fleet_instances()
    placement_groups()
    if args.ssm_parameters:
        preload(args.ssm_parameters)
    if args.refuse_spot:
        refuse_spot(args.refuse_spot)
    if args.capacity_reservations:
        capacity_reservations(args.capacity_reservations)
    if args.instance_status:
        instance_status(args.instance_status)
    if args.calls:
        record_calls(args.calls)
    if args.zonal_shifts:
        zonal_shifts(args.zonal_shifts)
    json_refusals()
    moto_main(["-H", "127.0.0.1", "-p", str(args.port)])


if __name__ == "__main__":
    run()
