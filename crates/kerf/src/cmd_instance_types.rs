//! `kerf instance-types`: list the catalog, filtered by requirements, cheapest first by the
//! price `--sort` names.

use std::fmt::Write as _;
use std::process::ExitCode;

use kerf_api::NodeSelectorRequirementWithMinValues as Requirement;
use kerf_api::labels::{CAPACITY_TYPE, ZONE};
use kerf_aws::capacity::NodeSettings;
use kerf_aws::{InstanceType, PricedOffering, instance_types};
use serde_json::json;

/// Arguments of `kerf instance-types`.
#[derive(clap::Args)]
pub struct Args {
    /// AWS region whose zones offer the types (prices are us-east-1 list prices everywhere).
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Keep types whose labels satisfy KEY=OPERATOR:V1,V2 (repeatable; zone and capacity type filter offerings).
    #[arg(long = "requirement", short = 'r', value_parser = Requirement::parse_flag)]
    requirements: Vec<Requirement>,
    /// Which price orders the list, cheapest first.
    #[arg(long, value_enum, default_value_t = SortBy::OnDemand)]
    sort: SortBy,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// The price a type is ranked by.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SortBy {
    /// Its on-demand price.
    OnDemand,
    /// Its cheapest spot offering.
    Spot,
}

impl SortBy {
    fn capacity_type(self) -> &'static str {
        match self {
            SortBy::OnDemand => kerf_api::labels::CAPACITY_TYPE_ON_DEMAND,
            SortBy::Spot => kerf_api::labels::CAPACITY_TYPE_SPOT,
        }
    }

    /// How `offerings` (cheapest first) rank: by their capacity type's cheapest price; types
    /// without one after those with one, by their cheapest offering left.
    fn rank(self, offerings: &[PricedOffering]) -> (bool, f64) {
        let own = offerings
            .iter()
            .find(|o| o.capacity_type == self.capacity_type());
        let price = own
            .or(offerings.first())
            .map_or(f64::MAX, |o| o.price_per_hour);
        (own.is_none(), price)
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Table,
    Json,
}

/// Prints the matching types, cheapest first by the chosen price.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let types = instance_types(&args.region, &NodeSettings::default())?;
    let mut selected: Vec<(InstanceType, Vec<PricedOffering>)> = types
        .into_iter()
        .filter(|t| {
            args.requirements
                .iter()
                .filter(|r| r.key != ZONE && r.key != CAPACITY_TYPE)
                .all(|r| r.matches(t.labels.get(&r.key).map(String::as_str)))
        })
        .filter_map(|t| {
            let offerings: Vec<PricedOffering> = t
                .offerings
                .iter()
                .filter(|o| {
                    args.requirements.iter().all(|r| match r.key.as_str() {
                        ZONE => r.matches(Some(&o.zone)),
                        CAPACITY_TYPE => r.matches(Some(o.capacity_type)),
                        _ => true,
                    })
                })
                .cloned()
                .collect();
            (!offerings.is_empty()).then_some((t, offerings))
        })
        .collect();
    // offerings stay cheapest first; the filter may have removed a type's cheapest ones
    selected.sort_by(|(a, ao), (b, bo)| {
        let ((a_missing, a_price), (b_missing, b_price)) = (args.sort.rank(ao), args.sort.rank(bo));
        a_missing
            .cmp(&b_missing)
            .then(a_price.total_cmp(&b_price))
            .then_with(|| a.name().cmp(b.name()))
    });
    let text = match args.output {
        Format::Json => render_json(&args.region, &selected)?,
        Format::Table => {
            eprintln!(
                "{} instance types in {}, cheapest {} price first; prices are AWS us-east-1 on-demand list prices (USD/hour) and Kerf's simulated spot prices",
                selected.len(),
                args.region,
                args.sort.capacity_type()
            );
            render_table(&selected)
        }
    };
    crate::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn render_table(types: &[(InstanceType, Vec<PricedOffering>)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<18} {:>5} {:>9} {:>5} {:>9} {:>10} {:<6} {:>10} {:>10} {:>5}",
        "NAME",
        "CPU",
        "MEMORY",
        "PODS",
        "ALLOC-CPU",
        "ALLOC-MEM",
        "ARCH",
        "ON-DEMAND",
        "SPOT-FROM",
        "ZONES"
    );
    for (t, offerings) in types {
        let min = |ct: &str| {
            offerings
                .iter()
                .filter(|o| o.capacity_type == ct)
                .map(|o| o.price_per_hour)
                .min_by(f64::total_cmp)
                .map_or("-".to_string(), |p| format!("${p:.4}"))
        };
        let mut zones: Vec<&str> = offerings.iter().map(|o| o.zone.as_str()).collect();
        zones.sort_unstable();
        zones.dedup();
        let _ = writeln!(
            out,
            "{:<18} {:>5} {:>8}Mi {:>5} {:>8}m {:>8}Mi {:<6} {:>10} {:>10} {:>5}",
            t.name(),
            t.info.vcpu,
            t.capacity.memory_bytes >> 20,
            t.capacity.pods,
            t.allocatable.cpu_millis,
            t.allocatable.memory_bytes >> 20,
            t.info.arch,
            min("on-demand"),
            min("spot"),
            zones.len()
        );
    }
    out
}

fn render_json(
    region: &str,
    types: &[(InstanceType, Vec<PricedOffering>)],
) -> anyhow::Result<String> {
    let items: Vec<_> = types
        .iter()
        .map(|(t, offerings)| {
            json!({
                "name": t.name(),
                "capacity": t.capacity.to_resource_list(),
                "allocatable": t.allocatable.to_resource_list(),
                "labels": t.labels,
                "offerings": offerings.iter().map(|o| json!({
                    "zone": o.zone,
                    "capacity_type": o.capacity_type,
                    "price_per_hour": o.price_per_hour,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let out = json!({
        "region": region,
        "price_source": "AWS us-east-1 on-demand list prices (fitted model); spot prices simulated",
        "instance_types": items,
    });
    Ok(serde_json::to_string_pretty(&out)? + "\n")
}
