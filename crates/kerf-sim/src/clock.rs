//! Simulated time as wall-clock text: the simulation starts at 2026-01-01T00:00:00Z, so log
//! lines read like Karpenter's and sort by time.

use std::time::Duration;

/// Seconds from 1970-01-01 to 2026-01-01.
pub const EPOCH_UNIX: u64 = 20_454 * 86_400;

/// RFC 3339 with milliseconds (`2026-01-01T00:05:30.000Z`) for a simulated time.
pub fn rfc3339(t: Duration) -> String {
    kerf_core::clock::rfc3339(t + Duration::from_secs(EPOCH_UNIX))
}

/// `1h02m03s`-style text for a duration, for summaries.
pub fn short(t: Duration) -> String {
    let s = t.as_secs();
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, min, sec) => format!("{min}m{sec:02}s"),
        (h, min, sec) => format!("{h}h{min:02}m{sec:02}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_time_reads_as_dates() {
        assert_eq!(rfc3339(Duration::ZERO), "2026-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(Duration::from_millis(90_061_500)),
            "2026-01-02T01:01:01.500Z"
        );
        assert_eq!(
            rfc3339(Duration::from_secs(59 * 86_400)),
            "2026-03-01T00:00:00.000Z"
        );
        assert_eq!(short(Duration::from_secs(3723)), "1h02m03s");
        assert_eq!(short(Duration::from_secs(65)), "1m05s");
    }
}
