//! `kerf crds`: print the CRDs.

use std::process::ExitCode;

/// Writes the five CRDs to standard output as one YAML stream.
pub fn run() -> anyhow::Result<ExitCode> {
    crate::emit(&kerf_api::crds::to_yaml()?)?;
    Ok(ExitCode::SUCCESS)
}
