//! `kerf instance-types`: list the catalog.

use std::process::ExitCode;

/// Arguments of `kerf instance-types`.
#[derive(clap::Args)]
pub struct Args {}

/// Prints the instance types.
pub fn run(_args: &Args) -> anyhow::Result<ExitCode> {
    Ok(ExitCode::SUCCESS)
}
