#!/usr/bin/env python3
"""Least privilege for the chart's RBAC, read from the API server's own audit log.

scripts/e2e-cluster.sh writes, when KERF_AUDIT_DIR is set, an audit log of every request the
chart's ServiceAccount (system:serviceaccount:kube-system:kerf) makes to each control plane a
test starts. scripts/test.sh sets it for the operator's tests, then runs this over all of them:

  scripts/rbac-audit.py DIR

It renders the chart's ClusterRole and Role (with every gate that grants more turned on) and
compares, per API group, resource and verb:
  - a call the API server refused as forbidden is a permission the chart lacks;
  - a permission no call used is one the chart should not grant, unless it is listed in
    UNUSED_BY_TESTS with the reason it is granted all the same.
Either fails the run, naming each permission.
"""
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The chart values that grant more than the defaults: each is rendered, and their union is
# what the tests may use.
GRANTING_VALUES = ["settings.featureGates.podDeletionCostManagement=true",
                   "settings.featureGates.capacityBuffer=true"]

# Permissions the chart grants that the tests' calls need not show (no test takes the path, or
# not in every run), each with why the chart still grants it.
UNUSED_BY_TESTS = {
    ("", "pods", "delete"):
        "a pod whose own terminationGracePeriodSeconds would outlast its node's "
        "terminationGracePeriod is deleted in time, as Karpenter's drain does; only the core's "
        "a_pod_whose_grace_period_would_outlast_the_node_is_deleted_in_time takes that path",
}


def python_with_yaml():
    """The pinned tools' interpreter (PyYAML comes with cfn-lint and moto)."""
    cfn = subprocess.run([os.path.join(ROOT, "scripts/python-tools.sh"), "bin", "cfn-lint"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return os.path.join(os.path.dirname(cfn), "python")


def granted():
    """(group, resource, verb) the chart's ClusterRole and Role grant, over GRANTING_VALUES."""
    helm = subprocess.run([os.path.join(ROOT, "scripts/e2e-cluster.sh"), "helm"],
                          capture_output=True, text=True, check=True).stdout.strip()
    out = set()
    for values in [None] + GRANTING_VALUES:
        args = [helm, "template", "kerf", os.path.join(ROOT, "charts/kerf"), "--namespace",
                "kube-system", "--set", "settings.clusterName=audit",
                "--show-only", "templates/clusterrole.yaml", "--show-only", "templates/role.yaml"]
        if values:
            args += ["--set", values]
        rendered = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        read = subprocess.run(
            [python_with_yaml(), "-c",
             "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(sys.stdin))))"],
            input=rendered, capture_output=True, text=True, check=True).stdout
        for doc in json.loads(read):
            if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
                continue
            for rule in doc.get("rules", []):
                for group in rule.get("apiGroups", []):
                    for resource in rule.get("resources", []):
                        for verb in rule.get("verbs", []):
                            out.add((group, resource, verb))
    return out


def used(directory):
    """(group, resource, verb) of every request in the audit logs, and those refused 403 and
    never allowed on that control plane: a refusal right after the chart's RBAC is applied,
    before the API server's authorizer has read it, is allowed on the next try."""
    calls, refused, files = set(), set(), 0
    for path in glob.glob(os.path.join(directory, "*.log")):
        files += 1
        allowed, denied = set(), set()
        with open(path) as f:
            for line in f:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                ref = event.get("objectRef") or {}
                if not ref.get("resource"):
                    continue  # discovery and health: not the chart's to grant
                resource = ref["resource"]
                if ref.get("subresource"):
                    resource += "/" + ref["subresource"]
                key = (ref.get("apiGroup", ""), resource, event.get("verb", ""))
                if (event.get("responseStatus") or {}).get("code") == 403:
                    denied.add(key)
                else:
                    allowed.add(key)
        calls |= allowed
        refused |= denied - allowed
    return calls, refused, files


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    calls, refused, files = used(sys.argv[1])
    if files == 0:
        print(f"rbac-audit: no audit log in {sys.argv[1]}", file=sys.stderr)
        return 1
    grants = granted()
    def shown(key):
        group, resource, verb = key
        return f"{group}/{resource} {verb}" if group else f"{resource} {verb}"

    problems = []
    for key in sorted(refused):
        problems.append("refused, the chart lacks it: " + shown(key))
    for key in sorted(grants - calls - set(UNUSED_BY_TESTS)):
        problems.append("granted, no call used it: " + shown(key))
    for key in sorted(set(UNUSED_BY_TESTS) - grants):
        problems.append("listed as needed but not granted: " + shown(key))
    print(f"rbac-audit: {files} control planes, {len(calls & grants)} of the chart's "
          f"{len(grants)} permissions used: " + ", ".join(shown(k) for k in sorted(calls)),
          flush=True)
    if problems:
        print("rbac-audit: " + "\nrbac-audit: ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
