//! The AWS prerequisites in `deploy/aws`: the CloudFormation stack and the controller's IAM
//! policy. cfn-lint (scripts/python-tools.sh) checks the template and, wrapped as an object it
//! can read, the policy (effects, condition operators, every action against AWS's list); the
//! template's copy of the policy must be the same document; and every EventBridge rule must
//! deliver messages Kerf's interruption parser acts on.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use kerf_aws::interruption::{self, Kind};
use serde_json::{Value, json};
use serde_yaml::Value as Yaml;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Concrete values for the placeholders, as a user would fill them in.
const ACCOUNT: &str = "111122223333";
const REGION: &str = "ap-northeast-2";
const CLUSTER: &str = "karpenter-demo";

/// The standalone policy with its `${VAR}` placeholders filled in.
fn standalone_policy() -> Value {
    let text = read("deploy/aws/controller-policy.json")
        .replace("${AWS_PARTITION}", "aws")
        .replace("${AWS_DEFAULT_REGION}", REGION)
        .replace("${AWS_ACCOUNT_ID}", ACCOUNT)
        .replace("${CLUSTER_NAME}", CLUSTER);
    assert!(
        !text.contains("${"),
        "an unknown placeholder is left: {text}"
    );
    serde_json::from_str(&text).expect("controller-policy.json is JSON")
}

fn template() -> Yaml {
    serde_yaml::from_str(&read("deploy/aws/cloudformation.yaml")).expect("the template is YAML")
}

/// The template's policy document (a `!Sub` string) as CloudFormation would render it.
fn template_policy(template: &Yaml) -> Value {
    let doc = &template["Resources"]["KarpenterControllerPolicy"]["Properties"]["PolicyDocument"];
    let Yaml::Tagged(sub) = doc else {
        panic!("the policy document is not a !Sub string: {doc:?}");
    };
    let text = sub.value.as_str().expect("a !Sub string");
    let text = text
        .replace(
            "${KarpenterInterruptionQueue.Arn}",
            &format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{CLUSTER}"),
        )
        .replace(
            "${KarpenterNodeRole.Arn}",
            &format!("arn:aws:iam::{ACCOUNT}:role/KarpenterNodeRole-{CLUSTER}"),
        )
        .replace("${AWS::Partition}", "aws")
        .replace("${AWS::Region}", REGION)
        .replace("${AWS::AccountId}", ACCOUNT)
        .replace("${ClusterName}", CLUSTER);
    assert!(
        !text.contains("${"),
        "an unknown substitution is left: {text}"
    );
    serde_json::from_str(&text).expect("the template's policy is JSON")
}

/// Runs cfn-lint on a file; its exit status and what it printed.
fn cfn_lint(path: &Path) -> (bool, String) {
    let tool = Command::new(root().join("scripts/python-tools.sh"))
        .args(["bin", "cfn-lint"])
        .output()
        .expect("run scripts/python-tools.sh");
    assert!(
        tool.status.success(),
        "{}",
        String::from_utf8_lossy(&tool.stderr)
    );
    let tool = String::from_utf8(tool.stdout).expect("a path");
    let out = Command::new(tool.trim())
        .arg(path)
        .output()
        .expect("run cfn-lint");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A template holding `policy` as an object, so that cfn-lint checks the policy itself.
fn lint_policy(policy: &Value, name: &str) -> (bool, String) {
    let template = json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Resources": {"Policy": {
            "Type": "AWS::IAM::ManagedPolicy",
            "Properties": {"PolicyDocument": policy},
        }},
    });
    let path = std::env::temp_dir().join(format!("kerf-{name}-{}.json", std::process::id()));
    std::fs::write(&path, template.to_string()).expect("write the policy template");
    let result = cfn_lint(&path);
    let _ = std::fs::remove_file(&path);
    result
}

#[test]
fn the_cloudformation_template_passes_cfn_lint() {
    let (ok, out) = cfn_lint(&root().join("deploy/aws/cloudformation.yaml"));
    assert!(ok, "cfn-lint found problems:\n{out}");
}

#[test]
fn the_controller_policy_passes_cfn_lint_and_a_misspelt_action_does_not() {
    let policy = standalone_policy();
    let (ok, out) = lint_policy(&policy, "policy");
    assert!(ok, "cfn-lint found problems in the policy:\n{out}");

    // the linter must be able to fail here: one action misspelt
    let mut planted = policy.clone();
    planted["Statement"][0]["Action"][0] = json!("ec2:RunInstance");
    let (ok, out) = lint_policy(&planted, "planted");
    assert!(!ok && out.contains("runinstance"), "{out}");
}

#[test]
fn the_templates_policy_is_the_standalone_policy() {
    let (ours, theirs) = (template_policy(&template()), standalone_policy());
    let statements = |p: &Value| p["Statement"].as_array().cloned().unwrap_or_default();
    let sid = |s: &Value| s["Sid"].as_str().unwrap_or("?").to_string();
    let (a, b) = (statements(&ours), statements(&theirs));
    assert_eq!(
        a.iter().map(sid).collect::<Vec<_>>(),
        b.iter().map(sid).collect::<Vec<_>>(),
        "the statements differ (cloudformation.yaml, then controller-policy.json)"
    );
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "statement {} differs", sid(x));
    }
    assert_eq!(ours, theirs);
}

#[test]
fn the_policy_keeps_karpenters_statement_ids_and_scopes_writes_to_the_cluster() {
    let policy = standalone_policy();
    let statements = policy["Statement"].as_array().expect("statements");
    let sids: Vec<&str> = statements
        .iter()
        .map(|s| s["Sid"].as_str().expect("every statement has a Sid"))
        .collect();
    let unique: BTreeSet<&str> = sids.iter().copied().collect();
    assert_eq!(unique.len(), sids.len(), "a Sid is repeated: {sids:?}");
    for sid in [
        "AllowScopedEC2InstanceActionsWithTags",
        "AllowScopedResourceCreationTagging",
        "AllowScopedDeletion",
        "AllowRegionalReadActions",
        "AllowInterruptionQueueActions",
        "AllowPassingInstanceRole",
        "AllowAPIServerEndpointDiscovery",
    ] {
        assert!(unique.contains(sid), "{sid} is missing");
    }
    // what creates, tags or deletes must be conditioned on the cluster's ownership tag
    let owned = format!("kubernetes.io/cluster/{CLUSTER}");
    for s in statements {
        let actions: Vec<&str> = match &s["Action"] {
            Value::String(a) => vec![a.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            other => panic!("Action {other}"),
        };
        let writes = actions.iter().any(|a| {
            [
                "ec2:CreateFleet",
                "ec2:CreateLaunchTemplate",
                "ec2:TerminateInstances",
                "ec2:DeleteLaunchTemplate",
                "iam:CreateInstanceProfile",
                "iam:DeleteInstanceProfile",
            ]
            .contains(a)
        });
        if writes && s["Sid"] != "AllowScopedEC2InstanceAccessActions" {
            assert!(
                s["Condition"].to_string().contains(&owned),
                "{} writes without the {owned} condition",
                s["Sid"]
            );
        }
    }
}

/// An event of this source and detail type, as EventBridge puts it on the queue.
fn sample_event(source: &str, detail_type: &str) -> String {
    let detail = match detail_type {
        "AWS Health Event" => json!({
            "service": "EC2",
            "eventTypeCategory": "scheduledChange",
            "affectedEntities": [{"entityValue": "i-0123456789abcdef0"}],
        }),
        "EC2 Instance State-change Notification" => {
            json!({"instance-id": "i-0123456789abcdef0", "state": "stopping"})
        }
        _ => json!({"instance-id": "i-0123456789abcdef0", "instance-action": "terminate"}),
    };
    json!({
        "version": "0", "id": "5d5f1b4c-0000-0000-0000-000000000000",
        "source": source, "detail-type": detail_type, "account": ACCOUNT,
        "time": "2026-11-25T00:00:00Z", "region": REGION,
        "resources": [format!("arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0")],
        "detail": detail,
    })
    .to_string()
}

#[test]
fn every_eventbridge_rule_feeds_the_queue_messages_kerf_acts_on() {
    let template = template();
    let resources = template["Resources"].as_mapping().expect("resources");
    let mut kinds = BTreeSet::new();
    for (name, resource) in resources {
        if resource["Type"] != "AWS::Events::Rule" {
            continue;
        }
        let name = name.as_str().unwrap_or("?");
        let props = &resource["Properties"];
        let target = &props["Targets"][0]["Arn"];
        let Yaml::Tagged(get_att) = target else {
            panic!("{name}: the target is not !GetAtt");
        };
        assert_eq!(
            get_att.value.as_str(),
            Some("KarpenterInterruptionQueue.Arn"),
            "{name} must target the interruption queue"
        );
        let source = props["EventPattern"]["source"][0].as_str().expect("source");
        let detail_type = props["EventPattern"]["detail-type"][0]
            .as_str()
            .expect("detail-type");
        let message = interruption::parse(&sample_event(source, detail_type))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_ne!(
            message.kind,
            Kind::NoOp,
            "{name}: Kerf ignores {detail_type}"
        );
        kinds.insert(format!("{:?}", message.kind));
    }
    // and every kind Kerf acts on has a rule
    let all: BTreeSet<String> = [
        Kind::SpotInterruption,
        Kind::ScheduledChange,
        Kind::InstanceStopped,
        Kind::RebalanceRecommendation,
        Kind::CapacityReservationInterruption,
    ]
    .iter()
    .map(|k| format!("{k:?}"))
    .collect();
    assert_eq!(kinds, all);
}
