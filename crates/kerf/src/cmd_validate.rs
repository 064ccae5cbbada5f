//! `kerf validate FILE...`: check manifests, one line per problem.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use kerf_api::manifest::{Checked, check_document, field_line, read_documents};

/// Arguments of `kerf validate`.
#[derive(clap::Args)]
pub struct Args {
    /// Manifest files (multi-document YAML); `-` reads standard input.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

/// Prints `FILE:LINE: Kind/name: path: message` per problem (the line of the field, or of
/// the document); exit 1 if any document is invalid or a file holds none, 2 if a file cannot
/// be read or parsed.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mut out = String::new();
    let mut invalid = false;
    let mut unreadable = false;
    for file in &args.files {
        let shown = file.display();
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(file)
        };
        let text = match text {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{shown}: cannot read: {e}");
                unreadable = true;
                continue;
            }
        };
        let docs = match read_documents(&text) {
            Ok(d) => d,
            Err(e) => {
                eprintln!(
                    "{shown}:{}:{}: cannot parse YAML: {}",
                    e.line, e.column, e.message
                );
                unreadable = true;
                continue;
            }
        };
        if docs.is_empty() {
            let _ = writeln!(out, "{shown}: no YAML documents");
            invalid = true;
        }
        for doc in &docs {
            let what = format!("{}/{}", doc.kind(), doc.name());
            match check_document(doc) {
                Checked::Valid(_) => {
                    let _ = writeln!(out, "{shown}:{}: {what}: valid", doc.line);
                }
                Checked::Invalid(problems) => {
                    invalid = true;
                    for p in problems {
                        let line = field_line(&text, doc.line, &p.path);
                        let _ = writeln!(out, "{shown}:{line}: {what}: {}: {}", p.path, p.message);
                    }
                }
                Checked::Other if doc.kind().is_empty() => {
                    eprintln!("{shown}:{}: skipped (no kind)", doc.line);
                }
                Checked::Other => eprintln!(
                    "{shown}:{}: {what}: skipped ({} {} is not a Karpenter kind)",
                    doc.line,
                    doc.api_version(),
                    doc.kind()
                ),
            }
        }
    }
    crate::emit(&out)?;
    Ok(if unreadable {
        ExitCode::from(2)
    } else if invalid {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
