//! What nodes need to know about the EKS cluster they join, from `eks:DescribeCluster` as
//! Karpenter finds it: only the cluster's name is required of the user; the API server's
//! endpoint, its CA and the service CIDR are looked up (a setting given overrides).

use crate::user_data::ClusterInfo;
use crate::{AwsError, classify};

/// `eks:DescribeCluster` of the cluster `name`.
async fn described(
    config: &aws_config::SdkConfig,
    name: &str,
) -> Result<aws_sdk_eks::operation::describe_cluster::DescribeClusterOutput, AwsError> {
    crate::client!(aws_sdk_eks, config)
        .describe_cluster()
        .name(name)
        .send()
        .await
        .map_err(|e| classify("DescribeCluster", "eks:DescribeCluster", e))
}

/// The cluster `name`'s endpoint, CA bundle and service CIDR (IPv4, else IPv6).
pub async fn describe(config: &aws_config::SdkConfig, name: &str) -> Result<ClusterInfo, AwsError> {
    let out = described(config, name).await?;
    let cluster = out.cluster();
    let network = cluster.and_then(|c| c.kubernetes_network_config());
    Ok(ClusterInfo {
        name: name.to_string(),
        endpoint: cluster
            .and_then(|c| c.endpoint())
            .unwrap_or_default()
            .trim_end_matches('/')
            .to_string(),
        ca_bundle: cluster
            .and_then(|c| c.certificate_authority())
            .and_then(|ca| ca.data())
            .map(str::to_string),
        cidr: network
            .and_then(|n| n.service_ipv4_cidr().or(n.service_ipv6_cidr()))
            .map(str::to_string),
    })
}

/// The cluster `name`'s ARN (ARC's name for it).
pub async fn arn(config: &aws_config::SdkConfig, name: &str) -> Result<String, AwsError> {
    let out = described(config, name).await?;
    let arn = out.cluster().and_then(|c| c.arn());
    arn.map(str::to_string).ok_or_else(|| AwsError::Api {
        call: "DescribeCluster",
        message: format!("cluster {name} has no ARN"),
    })
}
