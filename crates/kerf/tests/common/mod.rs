//! Helpers the CLI tests share: running `kerf` with manifests on standard input, and
//! manifests built from a few parameters.

#![allow(dead_code)] // each test crate uses its own share of these

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The repository's root, where the tests run `kerf`.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `kerf` with `args`, `yaml` on standard input.
pub fn kerf_stdin(yaml: &str, args: &[&str]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kerf");
    // kerf may refuse its arguments before it reads: a broken pipe is its answer, not ours
    let _ = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(yaml.as_bytes());
    child.wait_with_output().expect("kerf finishes")
}

pub const CLASS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
"#;

/// A NodePool `name` (weight 0 leaves it unset) with extra requirement and spec lines.
pub fn pool(name: &str, weight: i32, requirements: &str, extra: &str) -> String {
    let weight = if weight == 0 {
        String::new()
    } else {
        format!("weight: {weight}")
    };
    format!(
        r#"
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  {weight}
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
      - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}}
      - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
      - {{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a, us-east-1b, us-east-1c]}}
{requirements}{extra}
"#
    )
}

/// A Deployment `name` with `replicas` pods requesting `cpu`, plus pod spec lines.
pub fn deploy(name: &str, replicas: usize, cpu: &str, spec: &str) -> String {
    format!(
        r#"
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: c
        image: pause
        resources: {{requests: {{cpu: "{cpu}", memory: 256Mi}}}}
{spec}
"#
    )
}
