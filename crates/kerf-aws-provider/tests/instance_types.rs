//! The region's instance types read from moto's DescribeInstanceTypes and
//! DescribeInstanceTypeOfferings, checked against what `scripts/gen-catalog.py` (Python, apart
//! from this code: it also writes the embedded catalog) makes of moto's own data files, a
//! throttled call retried by the SDK configuration the operator runs with, and a
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

#[tokio::test]
async fn a_throttled_call_is_retried_by_the_sdks_standard_retries() {
    use aws_sdk_ec2::operation::describe_instance_type_offerings::DescribeInstanceTypeOfferingsOutput;
    use aws_sdk_ec2::operation::describe_instance_types::{
        DescribeInstanceTypesError, DescribeInstanceTypesOutput,
    };
    let throttled = mock!(aws_sdk_ec2::Client::describe_instance_types)
        .sequence()
        .error(|| {
            DescribeInstanceTypesError::generic(
                aws_sdk_ec2::error::ErrorMetadata::builder()
                    .code("RequestLimitExceeded")
                    .message("Request limit exceeded.")
                    .build(),
            )
        })
        .times(2)
        .output(|| {
            DescribeInstanceTypesOutput::builder()
                .instance_types(m5_large())
                .build()
        })
        .build();
    let offerings =
        mock!(aws_sdk_ec2::Client::describe_instance_type_offerings).then_output(|| {
            DescribeInstanceTypeOfferingsOutput::builder()
                .instance_type_offerings(
                    aws_sdk_ec2::types::InstanceTypeOffering::builder()
                        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
                        .location(format!("{REGION}a"))
                        .build(),
                )
                .build()
        });
    // the configuration the operator runs with (aws_config's defaults), over the mock
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(REGION))
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .http_client(aws_smithy_mocks::create_mock_http_client())
        .load()
        .await;
    let ec2 = aws_sdk_ec2::Client::from_conf(
        aws_sdk_ec2::config::Builder::from(&config)
            .interceptor(
                aws_smithy_mocks::MockResponseInterceptor::new()
                    .rule_mode(RuleMode::MatchAny)
                    .with_rule(&throttled)
                    .with_rule(&offerings),
            )
            .build(),
    );
    let read = InstanceTypeSource::with_client(ec2)
        .describe()
        .await
        .expect("retried past the throttling");
    assert_eq!(throttled.num_calls(), 3);
    assert_eq!(read.types.len(), 1);
    assert_eq!(read.zones_offering("m5.large"), [format!("{REGION}a")]);
}

/// m5.large as DescribeInstanceTypes answers, with what capacity needs.
fn m5_large() -> aws_sdk_ec2::types::InstanceTypeInfo {
    use aws_sdk_ec2::types::{
        ArchitectureType, InstanceType, MemoryInfo, NetworkInfo, ProcessorInfo, UsageClassType,
        VCpuInfo,
    };
    aws_sdk_ec2::types::InstanceTypeInfo::builder()
        .instance_type(InstanceType::M5Large)
        .processor_info(
            ProcessorInfo::builder()
                .supported_architectures(ArchitectureType::X8664)
                .build(),
        )
        .v_cpu_info(VCpuInfo::builder().default_v_cpus(2).build())
        .memory_info(MemoryInfo::builder().size_in_mib(8192).build())
        .network_info(
            NetworkInfo::builder()
                .maximum_network_interfaces(3)
                .ipv4_addresses_per_interface(10)
                .build(),
        )
        .supported_usage_classes(UsageClassType::Spot)
        .build()
}
