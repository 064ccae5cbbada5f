//! Standard five-field cron schedules, as disruption budgets use them (always UTC).
//!
//! Fields: minute, hour, day of month, month, day of week; each a `*`, a value, a range
//! `a-b`, a step `*/n` or `a-b/n`, or a comma list of those. The `@yearly`, `@annually`,
//! `@monthly`, `@weekly`, `@daily`, `@midnight` and `@hourly` shorthands are accepted.
//! `?` stands for `*`. A range that runs backwards (`19-8`) and a day of week 7 are errors, as
//! in Karpenter's cron reader (robfig/cron), under which such a budget allows no disruption.

use std::time::Duration;

/// A parsed cron schedule: one bit set per allowed value of each field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronSchedule {
    minutes: u64,
    hours: u32,
    days_of_month: u32,
    months: u16,
    days_of_week: u8,
    day_of_month_any: bool,
    day_of_week_any: bool,
}

/// Why a cron schedule is invalid; the text says which field and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CronError(pub String);

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        name: "day of month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: &[
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ],
    },
    Field {
        name: "day of week",
        min: 0,
        max: 6,
        names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
    },
];

impl Field {
    fn value(&self, text: &str) -> Result<u32, CronError> {
        let lower = text.to_ascii_lowercase();
        if let Some(i) = self.names.iter().position(|n| *n == lower) {
            return Ok(self.min + i as u32);
        }
        let v: u32 = text
            .parse()
            .map_err(|_| CronError(format!("{} field: {text:?} is not a number", self.name)))?;
        if v < self.min || v > self.max {
            return Err(CronError(format!(
                "{} field: {v} is out of range {}-{}",
                self.name, self.min, self.max
            )));
        }
        Ok(v)
    }

    fn parse(&self, text: &str) -> Result<(u64, bool), CronError> {
        let mut bits = 0u64;
        let mut any = false;
        for part in text.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, s)) => {
                    let step: u32 = s.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                        CronError(format!(
                            "{} field: step {s:?} must be a positive number",
                            self.name
                        ))
                    })?;
                    (r, step)
                }
                None => (part, 1),
            };
            let (lo, hi) = if range == "*" || range == "?" {
                // a whole-range part stepping by one makes the field "any" (robfig's star bit)
                any |= step == 1;
                (self.min, self.max)
            } else if let Some((a, b)) = range.split_once('-') {
                let (lo, hi) = (self.value(a)?, self.value(b)?);
                if lo > hi {
                    return Err(CronError(format!(
                        "{} field: range {range} runs backwards; split it into {a}-{},{}-{b}",
                        self.name, self.max, self.min
                    )));
                }
                (lo, hi)
            } else {
                let v = self.value(range)?;
                (v, if part.contains('/') { self.max } else { v })
            };
            let mut v = lo;
            while v <= hi {
                bits |= 1 << v;
                v += step;
            }
        }
        Ok((bits, any))
    }
}

impl CronSchedule {
    /// Parses a five-field expression or an `@` shorthand.
    pub fn parse(text: &str) -> Result<CronSchedule, CronError> {
        let expanded = match text.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(CronError(format!("unknown shorthand {other:?}")));
            }
            other => other,
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(CronError(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), got {}",
                parts.len()
            )));
        }
        let mut parsed = [(0u64, false); 5];
        for (i, (field, part)) in FIELDS.iter().zip(&parts).enumerate() {
            parsed[i] = field.parse(part)?;
        }
        Ok(CronSchedule {
            minutes: parsed[0].0,
            hours: parsed[1].0 as u32,
            days_of_month: parsed[2].0 as u32,
            months: parsed[3].0 as u16,
            days_of_week: parsed[4].0 as u8,
            day_of_month_any: parsed[2].1,
            day_of_week_any: parsed[4].1,
        })
    }

    /// Whether the schedule fires at the minute starting at `unix_seconds` (UTC).
    pub fn fires_at(&self, unix_seconds: u64) -> bool {
        let t = CivilTime::from_unix(unix_seconds);
        let dom = self.days_of_month & (1 << t.day) != 0;
        let dow = self.days_of_week & (1 << t.weekday) != 0;
        let day = match (self.day_of_month_any, self.day_of_week_any) {
            (true, true) => true,
            (true, false) => dow,
            (false, true) => dom,
            (false, false) => dom || dow,
        };
        self.minutes & (1 << t.minute) != 0
            && self.hours & (1 << t.hour) != 0
            && self.months & (1 << t.month) != 0
            && day
    }

    /// Whether the schedule ever fires: not when every day of month it names is past the
    /// end of every month it names (`0 0 30 2 *`) and the day of week does not widen it.
    pub fn ever_fires(&self) -> bool {
        // the longest each month gets (February in a leap year)
        const DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        // only a restricted day of month under an unrestricted day of week must fall on a
        // real date: otherwise a weekday it names comes in every month
        if self.day_of_month_any || !self.day_of_week_any {
            return true;
        }
        (1..=12u32).any(|m| {
            self.months & (1 << m) != 0
                && (1..=DAYS[m as usize - 1]).any(|d| self.days_of_month & (1 << d) != 0)
        })
    }

    /// Whether `unix_seconds` lies inside a window that opened when the schedule fired and
    /// lasts `duration`; this is how a budget with `schedule` and `duration` is active.
    pub fn active_at(&self, unix_seconds: u64, duration: Duration) -> bool {
        self.window_end(unix_seconds, duration).is_some()
    }

    /// When the window `unix_seconds` lies in closes (the latest-closing one, if windows
    /// overlap); `None` outside every window.
    pub fn window_end(&self, unix_seconds: u64, duration: Duration) -> Option<u64> {
        let now_minute = unix_seconds - unix_seconds % 60;
        let window_minutes = duration.as_secs().div_ceil(60);
        (0..window_minutes)
            .map(|back| now_minute.saturating_sub(back * 60))
            .find(|m| m + duration.as_secs() > unix_seconds && self.fires_at(*m))
            .map(|m| m + duration.as_secs())
    }

    /// When a budget active at `unix_seconds` stops being active: the end of its window,
    /// or of the windows that open before each one closes (checked up to `limit` windows).
    pub fn active_until(&self, unix_seconds: u64, duration: Duration, limit: usize) -> Option<u64> {
        let mut end = self.window_end(unix_seconds, duration)?;
        for _ in 0..limit {
            match self.window_end(end, duration) {
                Some(later) if later > end => end = later,
                _ => break,
            }
        }
        Some(end)
    }
}

/// UTC calendar fields of a Unix time.
struct CivilTime {
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    weekday: u32,
}

impl CivilTime {
    fn from_unix(secs: u64) -> CivilTime {
        let days = (secs / 86_400) as i64;
        let rem = secs % 86_400;
        // Howard Hinnant's civil-from-days
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        CivilTime {
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            weekday: ((days + 4).rem_euclid(7)) as u32, // 1970-01-01 was a Thursday
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2025-03-03 (a Monday) 00:00 UTC
    const MONDAY: u64 = 1_740_960_000;

    #[test]
    fn parses_fields_and_shorthands() {
        let s = CronSchedule::parse("0 9-18 * * 1-5").unwrap();
        assert!(s.fires_at(MONDAY + 9 * 3600));
        assert!(!s.fires_at(MONDAY + 9 * 3600 + 60));
        assert!(!s.fires_at(MONDAY - 86_400 + 9 * 3600)); // Sunday
        assert!(CronSchedule::parse("@daily").unwrap().fires_at(MONDAY));
        assert!(
            CronSchedule::parse("*/15 * * jan-dec sun,mon")
                .unwrap()
                .fires_at(MONDAY + 900)
        );
    }

    #[test]
    fn a_date_no_month_has_never_fires() {
        assert!(!CronSchedule::parse("0 0 30 2 *").unwrap().ever_fires());
        assert!(!CronSchedule::parse("0 0 31 4,6 *").unwrap().ever_fires());
        assert!(CronSchedule::parse("0 0 29 2 *").unwrap().ever_fires());
        // a weekday named beside the date fires on that weekday
        assert!(CronSchedule::parse("0 0 30 2 1").unwrap().ever_fires());
        assert!(CronSchedule::parse("0 0 31 2,3 *").unwrap().ever_fires());
    }

    #[test]
    fn backwards_range_is_an_error_with_a_split_hint() {
        let err = CronSchedule::parse("0 19-8 * * *").unwrap_err();
        assert!(err.0.contains("runs backwards"), "{err}");
        assert!(err.0.contains("19-23,0-8"), "{err}");
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "* * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "*/0 * * * *",
            "@often",
            "x * * * *",
            "0 0 * * 7",
            "0 0 * * 5-7",
        ] {
            assert!(CronSchedule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_active_window_says_when_it_closes_and_overlapping_windows_chain() {
        let business = CronSchedule::parse("0 9 * * 1-5").unwrap();
        let eight_hours = Duration::from_secs(8 * 3600);
        let ten = MONDAY + 10 * 3600;
        assert_eq!(
            business.active_until(ten, eight_hours, 100),
            Some(MONDAY + 17 * 3600)
        );
        assert_eq!(
            business.active_until(MONDAY + 17 * 3600, eight_hours, 100),
            None
        );
        // a window every half hour, each an hour long: active until the last one checked
        let overlapping = CronSchedule::parse("*/30 * * * *").unwrap();
        let hour = Duration::from_secs(3600);
        assert_eq!(overlapping.window_end(ten, hour), Some(ten + 3600));
        assert_eq!(overlapping.active_until(ten, hour, 3), Some(ten + 4 * 3600));
    }

    #[test]
    fn window_activity() {
        let s = CronSchedule::parse("0 9 * * *").unwrap();
        let nine = MONDAY + 9 * 3600;
        let eight_hours = Duration::from_secs(8 * 3600);
        assert!(s.active_at(nine, eight_hours));
        assert!(s.active_at(nine + 8 * 3600 - 1, eight_hours));
        assert!(!s.active_at(nine + 8 * 3600, eight_hours));
        assert!(!s.active_at(nine - 1, eight_hours));
    }
}
