//! Kerf's AWS cloud provider, on the AWS SDK for Rust: the cluster's endpoint, CA and service
//! CIDR (`cluster`), EC2NodeClass status (`node_class`: the
//! subnet, security group and AMI selector terms resolved against EC2 and SSM, the instance
//! profile from `instance_profile`), user data per AMI family (`user_data`), and launching,
//! listing and terminating instances with EC2 Fleet (`launch`), the region's instance types
//! (`instance_types`), the SQS interruption queue
//! (`interruption_queue`), EC2's status checks (`instance_status`), and live on-demand and spot prices (`pricing`). The selector queries
//! themselves are `kerf_aws::discovery`.
//!
//! Credentials, region and endpoint come from the SDK's standard chain, so `AWS_ENDPOINT_URL`
//! points every client at a local emulator.

pub mod authorization;
pub mod cluster;
mod fleet_batch;
pub mod instance_profile;
pub mod instance_status;
pub mod instance_types;
pub mod interruption_queue;
pub mod launch;
pub mod node_class;
pub mod pricing;
pub mod sdk_metrics;
pub mod user_data;
pub mod zonal_shift;

pub use node_class::{Discovery, Resolved};

use aws_sdk_ec2::config::SharedHttpClient;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_smithy_http_client::Builder;
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};

/// An HTTPS client on rustls with ring, the TLS stack kube uses: one binary, one TLS stack,
/// and no C library to build.
pub fn https_client() -> SharedHttpClient {
    Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// The SDK configuration from the standard chain (environment, profile, IRSA's web identity,
/// the EKS Pod Identity agent, instance metadata) over [`https_client`].
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(https_client())
        .load()
        .await
}

/// Why an AWS call failed, in the words a user can act on.
#[derive(Clone, Debug, thiserror::Error)]
pub enum AwsError {
    /// The controller's role lacks a permission.
    #[error(
        "{permission} is not allowed for Kerf's role: grant it as deploy/aws/controller-policy.json does ({message})"
    )]
    Unauthorized {
        /// The IAM action.
        permission: &'static str,
        /// What AWS said.
        message: String,
    },
    /// Any other failed call (the SDK has already retried throttling and transient errors).
    #[error("{call}: {message}")]
    Api {
        /// The API call.
        call: &'static str,
        /// What AWS said.
        message: String,
    },
}

/// An SDK error as an [`AwsError`]: a denied call names the IAM action it needs.
pub(crate) fn classify<E: ProvideErrorMetadata + std::error::Error>(
    call: &'static str,
    permission: &'static str,
    error: E,
) -> AwsError {
    match error.code() {
        Some("UnauthorizedOperation" | "AccessDeniedException" | "AccessDenied") => {
            AwsError::Unauthorized {
                permission,
                message: error.message().unwrap_or_default().to_string(),
            }
        }
        _ => AwsError::Api {
            call,
            message: one_line(&error),
        },
    }
}

/// The most a message from AWS is quoted at.
const MESSAGE_CHARS: usize = 200;

/// What an error says, on one line: the API's error code and message; or, for an answer that
/// carries no error code (an HTML page from a proxy, an endpoint that does not serve the API,
/// no connection at all), what went wrong at the bottom of the SDK's chain of causes — never
/// the SDK's debug account of it, never a whole response body.
pub(crate) fn one_line<E: ProvideErrorMetadata + std::error::Error>(error: &E) -> String {
    let text = match (error.code(), error.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_string(),
        (None, Some(message)) => message.to_string(),
        (None, None) => match root_cause(error) {
            Some(cause) => format!("no AWS answer ({cause})"),
            None => error.to_string(),
        },
    };
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > MESSAGE_CHARS {
        format!("{}…", line.chars().take(MESSAGE_CHARS).collect::<String>())
    } else {
        line
    }
}

/// The innermost cause's own words, if the error has causes.
fn root_cause(error: &dyn std::error::Error) -> Option<String> {
    let mut cause = error.source()?;
    while let Some(deeper) = cause.source() {
        cause = deeper;
    }
    Some(cause.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::error::ErrorMetadata;

    #[test]
    fn an_error_is_one_short_line_whatever_the_response_held() {
        let page = format!(
            "<html>\n<body>\n{}\n</body>\n</html>",
            "Not Found ".repeat(200)
        );
        let unparsed = ErrorMetadata::builder().message(page).build();
        let said = one_line(&unparsed);
        assert!(!said.contains('\n'), "{said}");
        assert!(said.chars().count() <= MESSAGE_CHARS + 1, "{said}");
        let coded = ErrorMetadata::builder()
            .code("Throttling")
            .message("Rate exceeded")
            .build();
        assert_eq!(one_line(&coded), "Throttling: Rate exceeded");
    }
}
