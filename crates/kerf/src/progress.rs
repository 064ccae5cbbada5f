//! Progress bars on a terminal for work that takes more than a moment (simulations, swarm
//! runs, benchmarks): drawn on standard error only when it is a terminal and the output is
//! not JSON for a program to read, and cleared when the work ends.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar, or nothing when progress is not shown.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar over `total` steps, named `what`; none unless standard error is a terminal
    /// and `quiet` is false.
    pub fn new(total: u64, what: &str, quiet: bool) -> Progress {
        if quiet || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::new(total);
        let style = ProgressStyle::with_template(
            "  {prefix} [{bar:30}] {percent:>3}%  {msg}  ({elapsed}, {eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("#>.");
        bar.set_style(style);
        bar.set_prefix(what.to_string());
        Progress(Some(bar))
    }

    /// Moves the bar to `position`, with `message` beside it.
    pub fn set(&self, position: u64, message: impl Into<String>) {
        if let Some(bar) = &self.0 {
            bar.set_position(position);
            bar.set_message(message.into());
        }
    }

    /// Runs `print` with the bar out of the way, so its lines are not drawn over.
    pub fn suspend<T>(&self, print: impl FnOnce() -> T) -> T {
        match &self.0 {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    /// Clears the bar: the work is over.
    pub fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
