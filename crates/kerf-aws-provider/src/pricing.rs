//! Live prices, as Karpenter refreshes them: on-demand from the Pricing API (Linux, shared
//! tenancy, no pre-installed software, used capacity, in the region), spot from EC2's spot
//! price history (the newest price of each instance type in each zone). Whoever cannot reach
//! them (an isolated region, a denied call) keeps the embedded price model.

use std::collections::HashMap;

use aws_sdk_ec2::primitives::DateTime;
use aws_sdk_pricing::types::{Filter as PricingFilter, FilterType};

use crate::{AwsError, classify};

/// Prices by instance type (on-demand) and by instance type and zone (spot), dollars an hour.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prices {
    /// On-demand, by instance type.
    pub on_demand: HashMap<String, f64>,
    /// Spot, by instance type and zone.
    pub spot: HashMap<(String, String), f64>,
}

/// Reads prices from AWS.
#[derive(Clone, Debug)]
pub struct PriceSource {
    ec2: aws_sdk_ec2::Client,
    pricing: aws_sdk_pricing::Client,
    region: String,
}

/// The Pricing API's endpoint region for `region`: it answers only in a few regions.
pub fn pricing_region(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("ap-") {
        "ap-south-1"
    } else if region.starts_with("eu-") || region.starts_with("me-") || region.starts_with("af-") {
        "eu-central-1"
    } else {
        "us-east-1"
    }
}

/// An instance type's hourly on-demand price from one Pricing API price list entry (a JSON
/// document); `None` for an entry that is not one.
pub fn parse_price_list(entry: &str) -> Option<(String, f64)> {
    let v: serde_json::Value = serde_json::from_str(entry).ok()?;
    let instance_type = v["product"]["attributes"]["instanceType"].as_str()?;
    let price = v["terms"]["OnDemand"]
        .as_object()?
        .values()
        .flat_map(|term| term["priceDimensions"].as_object().into_iter().flatten())
        .filter_map(|(_, d)| d["pricePerUnit"]["USD"].as_str()?.parse::<f64>().ok())
        .find(|p| *p > 0.0)?;
    Some((instance_type.to_string(), price))
}

impl PriceSource {
    /// Clients for `config`'s region.
    pub fn new(config: &aws_config::SdkConfig) -> PriceSource {
        let region = config.region().map(|r| r.to_string()).unwrap_or_default();
        let pricing_config = aws_sdk_pricing::config::Builder::from(config)
            .region(aws_sdk_pricing::config::Region::new(pricing_region(
                &region,
            )))
            .interceptor(crate::sdk_metrics::Counting)
            .build();
        PriceSource {
            ec2: crate::client!(aws_sdk_ec2, config),
            pricing: aws_sdk_pricing::Client::from_conf(pricing_config),
            region,
        }
    }

    /// Over given clients (tests answer them with chosen responses).
    pub fn with_clients(
        ec2: aws_sdk_ec2::Client,
        pricing: aws_sdk_pricing::Client,
        region: &str,
    ) -> PriceSource {
        PriceSource {
            ec2,
            pricing,
            region: region.to_string(),
        }
    }

    /// On-demand prices of every instance type in the region.
    pub async fn on_demand(&self) -> Result<HashMap<String, f64>, AwsError> {
        let filter = |field: &str, value: &str| {
            PricingFilter::builder()
                .r#type(FilterType::TermMatch)
                .field(field)
                .value(value)
                .build()
                .ok()
        };
        let filters: Vec<PricingFilter> = [
            ("regionCode", self.region.as_str()),
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("capacitystatus", "Used"),
            ("licenseModel", "No License required"),
        ]
        .into_iter()
        .filter_map(|(f, v)| filter(f, v))
        .collect();
        let entries: Vec<String> = self
            .pricing
            .get_products()
            .service_code("AmazonEC2")
            .set_filters(Some(filters))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| classify("GetProducts", "pricing:GetProducts", e))?;
        Ok(entries.iter().filter_map(|e| parse_price_list(e)).collect())
    }

    /// The newest spot price of each instance type in each zone.
    pub async fn spot(&self) -> Result<HashMap<(String, String), f64>, AwsError> {
        let history: Vec<_> = self
            .ec2
            .describe_spot_price_history()
            .product_descriptions("Linux/UNIX")
            .product_descriptions("Linux/UNIX (Amazon VPC)")
            .start_time(DateTime::from(std::time::SystemTime::now()))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| {
                classify(
                    "DescribeSpotPriceHistory",
                    "ec2:DescribeSpotPriceHistory",
                    e,
                )
            })?;
        let mut newest: HashMap<(String, String), (i64, f64)> = HashMap::new();
        for entry in history {
            let (Some(t), Some(zone), Some(price)) = (
                entry.instance_type(),
                entry.availability_zone(),
                entry.spot_price().and_then(|p| p.parse::<f64>().ok()),
            ) else {
                continue;
            };
            let at = entry.timestamp().map_or(0, |t| t.secs());
            let key = (t.as_str().to_string(), zone.to_string());
            if newest.get(&key).is_none_or(|(seen, _)| at >= *seen) {
                newest.insert(key, (at, price));
            }
        }
        Ok(newest.into_iter().map(|(k, (_, p))| (k, p)).collect())
    }

    /// Both, or the first error.
    pub async fn prices(&self) -> Result<Prices, AwsError> {
        Ok(Prices {
            on_demand: self.on_demand().await?,
            spot: self.spot().await?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_price_list_entry_gives_the_hourly_usd_price() {
        let entry = r#"{"product":{"attributes":{"instanceType":"m5.large","regionCode":"ap-northeast-2"}},"terms":{"OnDemand":{"X.JRTCKXETXF":{"priceDimensions":{"X.JRTCKXETXF.6YS6EN2CT7":{"unit":"Hrs","pricePerUnit":{"USD":"0.1180000000"}}}}}}}"#;
        assert_eq!(parse_price_list(entry), Some(("m5.large".into(), 0.118)));
        assert_eq!(parse_price_list("{}"), None);
        assert_eq!(parse_price_list("not json"), None);
        let free = entry.replace("0.1180000000", "0.0000000000");
        assert_eq!(parse_price_list(&free), None);
    }

    #[test]
    fn the_pricing_api_is_asked_in_its_nearest_region() {
        assert_eq!(pricing_region("ap-northeast-2"), "ap-south-1");
        assert_eq!(pricing_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_region("us-west-2"), "us-east-1");
        assert_eq!(pricing_region("cn-north-1"), "cn-northwest-1");
    }
}
