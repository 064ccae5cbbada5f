//! Time as text: RFC 3339 with milliseconds, as Karpenter's log lines and Kubernetes
//! timestamps print it, from a duration since the Unix epoch (no clock is read here).

use std::time::Duration;

/// `2026-01-01T00:05:30.000Z` for a time since 1970-01-01T00:00:00Z.
pub fn rfc3339(since_unix: Duration) -> String {
    let secs = since_unix.as_secs() as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since_unix.subsec_millis()
    )
}

/// `2026-01-01T00:05:30Z`: whole seconds, as the API server writes a `metav1.Time`.
pub fn kubernetes_time(since_unix: Duration) -> String {
    let text = rfc3339(Duration::from_secs(since_unix.as_secs()));
    format!("{}Z", text.trim_end_matches(".000Z"))
}

/// `2026-01-01 00:05:30 +0000 UTC`: whole seconds as Go prints a `time.Time` in UTC (`%v`).
pub fn go_time(since_unix: Duration) -> String {
    let text = kubernetes_time(since_unix);
    format!(
        "{} +0000 UTC",
        text.trim_end_matches('Z').replacen('T', " ", 1)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_around_leap_days_and_epochs() {
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(Duration::from_millis(20_454 * 86_400_000 + 330_250)),
            "2026-01-01T00:05:30.250Z"
        );
        // 2024-02-29 is day 19782
        assert_eq!(
            rfc3339(Duration::from_secs(19_782 * 86_400 + 86_399)),
            "2024-02-29T23:59:59.000Z"
        );
        assert_eq!(
            kubernetes_time(Duration::from_millis(20_454 * 86_400_000 + 330_250)),
            "2026-01-01T00:05:30Z"
        );
    }
}
