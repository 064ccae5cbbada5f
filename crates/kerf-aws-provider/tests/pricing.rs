//! Live prices: spot from moto's spot price history, on-demand from the Pricing API (which
//! moto does not serve: the SDK's mock interceptor answers with price list entries), and a
//! denied Pricing call named as the permission to grant.

mod support;

use aws_sdk_pricing::operation::get_products::GetProductsOutput;
use aws_smithy_mocks::{RuleMode, mock};
use kerf_aws_provider::pricing::PriceSource;
use support::{Moto, REGION};

const M5_LARGE: &str = r#"{"product":{"attributes":{"instanceType":"m5.large","regionCode":"ap-northeast-2","operatingSystem":"Linux"}},"terms":{"OnDemand":{"X.JRTCKXETXF":{"priceDimensions":{"X.JRTCKXETXF.6YS6EN2CT7":{"unit":"Hrs","pricePerUnit":{"USD":"0.1180000000"}}}}}}}"#;

fn pricing(rule: &aws_smithy_mocks::Rule) -> aws_sdk_pricing::Client {
    let config = aws_sdk_pricing::Config::builder()
        .behavior_version(aws_sdk_pricing::config::BehaviorVersion::latest())
        .region(aws_sdk_pricing::config::Region::new("ap-south-1"))
        .credentials_provider(aws_sdk_pricing::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .http_client(aws_smithy_mocks::create_mock_http_client())
        .interceptor(
            aws_smithy_mocks::MockResponseInterceptor::new()
                .rule_mode(RuleMode::MatchAny)
                .with_rule(rule),
        )
        .build();
    aws_sdk_pricing::Client::from_conf(config)
}

#[tokio::test]
async fn spot_and_on_demand_prices_are_read() {
    let moto = Moto::start("prices", &[]);
    let config = moto.config().await;
    let products = mock!(aws_sdk_pricing::Client::get_products)
        .match_requests(|r| {
            r.service_code() == Some("AmazonEC2")
                && r.filters()
                    .iter()
                    .any(|f| f.field() == "regionCode" && f.value() == REGION)
        })
        .then_output(|| {
            GetProductsOutput::builder()
                .price_list(M5_LARGE)
                .price_list("{\"product\":{}}")
                .build()
        });
    let source = PriceSource::with_clients(
        aws_sdk_ec2::Client::new(&config),
        pricing(&products),
        REGION,
    );
    let prices = source.prices().await.expect("prices");
    assert_eq!(prices.on_demand.len(), 1, "{:?}", prices.on_demand);
    assert_eq!(prices.on_demand.get("m5.large"), Some(&0.118));
    // moto quotes every offering of the region at the same price
    let spot = prices
        .spot
        .get(&("m5.large".to_string(), "ap-northeast-2a".to_string()))
        .copied();
    assert!(spot.is_some_and(|p| p > 0.0), "{spot:?}");
    assert!(prices.spot.keys().all(|(_, zone)| zone.starts_with(REGION)));
}

#[tokio::test]
async fn a_denied_pricing_call_names_the_permission() {
    let moto = Moto::start("prices-denied", &[]);
    let config = moto.config().await;
    let denied = mock!(aws_sdk_pricing::Client::get_products).then_error(|| {
        aws_sdk_pricing::operation::get_products::GetProductsError::generic(
            aws_sdk_pricing::error::ErrorMetadata::builder()
                .code("AccessDeniedException")
                .message("User is not authorized to perform: pricing:GetProducts")
                .build(),
        )
    });
    let source =
        PriceSource::with_clients(aws_sdk_ec2::Client::new(&config), pricing(&denied), REGION);
    let err = source.on_demand().await.expect_err("denied");
    assert!(
        err.to_string()
            .starts_with("pricing:GetProducts is not allowed for Kerf's role"),
        "{err}"
    );
}

#[tokio::test]
async fn an_endpoint_that_does_not_serve_pricing_is_one_short_line() {
    // moto serves no Pricing API: its answer is not an AWS error at all
    let moto = Moto::start("prices-unserved", &[]);
    let source = PriceSource::new(&moto.config().await);
    let said = source
        .on_demand()
        .await
        .expect_err("moto serves no Pricing API")
        .to_string();
    assert!(said.starts_with("GetProducts: no AWS answer ("), "{said}");
    assert!(!said.contains('\n'), "{said}");
    // the parser's own words may quote a brace; a Rust debug dump names its structs
    for debug in ["ServiceError", "Unhandled", "source:", "raw:", "Response {"] {
        assert!(!said.contains(debug), "a debug dump: {said}");
    }
}
