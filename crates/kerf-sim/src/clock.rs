//! Simulated time as wall-clock text: the simulation starts at 2026-01-01T00:00:00Z, so log
//! lines read like Karpenter's and sort by time.

use std::time::Duration;

/// Days from 1970-01-01 to 2026-01-01.
const EPOCH_DAYS: i64 = 20454;

/// RFC 3339 with milliseconds (`2026-01-01T00:05:30.000Z`) for a simulated time.
pub fn rfc3339(t: Duration) -> String {
    let secs = t.as_secs() as i64;
    let (days, rest) = (
        secs.div_euclid(86_400) + EPOCH_DAYS,
        secs.rem_euclid(86_400),
    );
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        t.subsec_millis()
    )
}

/// Calendar date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
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
