//! The region's instance types read from moto's DescribeInstanceTypes and
//! DescribeInstanceTypeOfferings, checked against what `scripts/gen-catalog.py` (Python, apart
//! from this code: it also writes the embedded catalog) makes of moto's own data files, and a
//! denied call named as the permission to grant.

mod support;

use std::collections::BTreeMap;
use std::process::Command;

use aws_smithy_mocks::{RuleMode, mock};
use kerf_aws::InstanceTypeInfo;
use kerf_aws_provider::instance_types::InstanceTypeSource;
use support::{Moto, REGION, python, root};

/// What moto's data files hold for the region, as the catalog generator reads them.
#[derive(serde::Deserialize)]
struct Expected {
    types: Vec<InstanceTypeInfo>,
    zones: BTreeMap<String, Vec<String>>,
}

#[tokio::test]
async fn the_region_reads_as_moto_describes_it() {
    let out = Command::new(python())
        .arg(root().join("scripts/gen-catalog.py"))
        .args(["--region", REGION])
        .output()
        .expect("run gen-catalog.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Expected = serde_json::from_slice(&out.stdout).expect("its JSON");
    let moto = Moto::start("instance-types", &[]);
    let read = InstanceTypeSource::new(&moto.config().await)
        .describe()
        .await
        .expect("describe");
    assert!(read.types.len() > 500, "{} types", read.types.len());
    assert!(read.types.windows(2).all(|w| w[0].name < w[1].name));
    assert!(
        read.types.iter().all(|t| !t.name.starts_with("mac")),
        "mac instances are left out"
    );
    let by_name: BTreeMap<&str, &InstanceTypeInfo> = expected
        .types
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    for t in &read.types {
        assert_eq!(Some(&t), by_name.get(t.name.as_str()), "{}", t.name);
    }
    // GPU, Neuron, local NVMe, bare metal and arm64 types are among them
    for name in [
        "g5.xlarge",
        "inf2.xlarge",
        "i3.large",
        "m5.metal",
        "m6g.large",
    ] {
        assert!(read.types.iter().any(|t| t.name == name), "{name}");
    }
    assert_eq!(read.zones, expected.zones);
}

#[tokio::test]
async fn a_denied_describe_names_the_permission() {
    let denied = mock!(aws_sdk_ec2::Client::describe_instance_types).then_error(|| {
        aws_sdk_ec2::operation::describe_instance_types::DescribeInstanceTypesError::generic(
            aws_sdk_ec2::error::ErrorMetadata::builder()
                .code("UnauthorizedOperation")
                .message("You are not authorized to perform this operation.")
                .build(),
        )
    });
    let config = aws_sdk_ec2::Config::builder()
        .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
        .region(aws_sdk_ec2::config::Region::new(REGION))
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .http_client(aws_smithy_mocks::create_mock_http_client())
        .interceptor(
            aws_smithy_mocks::MockResponseInterceptor::new()
                .rule_mode(RuleMode::MatchAny)
                .with_rule(&denied),
        )
        .build();
    let err = InstanceTypeSource::with_client(aws_sdk_ec2::Client::from_conf(config))
        .describe()
        .await
        .expect_err("denied");
    let text = err.to_string();
    assert!(
        text.starts_with("ec2:DescribeInstanceTypes is not allowed for Kerf's role"),
        "{text}"
    );
}
