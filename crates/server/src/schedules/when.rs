//! When a schedule is due: a cron expression (five fields, or six with seconds first, an
//! optional year last; `@daily` and the like) read in a time zone, or one moment. Times are
//! Unix milliseconds; a cron's fields are read as a clock on the wall of its time zone reads,
//! so `0 3 * * *` in `Europe/Paris` is 03:00 there in winter and in summer, a time the clock
//! skips (a spring-forward gap) runs at the first moment after it, and one it shows twice runs
//! once (`croner`, on `jiff`'s zones).

use std::str::FromStr;

use croner::Cron;
use jiff::tz::TimeZone;
use jiff::Timestamp;

/// The longest cron expression taken.
pub const MAX_CRON_CHARS: usize = 200;

/// A schedule's timing, read and checked.
#[derive(Debug, Clone)]
pub enum Timing {
    /// Every time the expression matches, in the zone.
    Cron {
        /// The expression.
        cron: Box<Cron>,
        /// The zone it is read in.
        zone: TimeZone,
    },
    /// Once, at this moment.
    Once {
        /// The moment (Unix milliseconds).
        at_ms: u64,
    },
}

impl Timing {
    /// The cron expression `cron` read in `time_zone` (an IANA name such as `Europe/Paris`,
    /// or `UTC`); an error names what is wrong.
    pub fn cron(cron: &str, time_zone: &str) -> Result<Timing, String> {
        if cron.chars().count() > MAX_CRON_CHARS {
            return Err(format!("the cron expression is longer than {MAX_CRON_CHARS} characters"));
        }
        let parsed = Cron::from_str(cron)
            .map_err(|error| format!("the cron expression {cron:?} is not one: {error}"))?;
        let zone = TimeZone::get(time_zone).map_err(|_| {
            format!(
                "the time zone {time_zone:?} is not one (an IANA name like Europe/Paris, or UTC)"
            )
        })?;
        let timing = Timing::Cron { cron: Box::new(parsed), zone };
        // An expression that never matches (the 30th of February) is refused now, not found
        // out at its first run.
        if timing.next_after(crate::schedules::now_ms()).is_none() {
            return Err(format!("the cron expression {cron:?} never matches"));
        }
        Ok(timing)
    }

    /// Once, at `at_ms`.
    pub fn once(at_ms: u64) -> Timing {
        Timing::Once { at_ms }
    }

    /// The first time it is due strictly after `after_ms`, if it ever is.
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        match self {
            Timing::Once { at_ms } => (*at_ms > after_ms).then_some(*at_ms),
            Timing::Cron { cron, zone } => {
                let start = zoned(after_ms, zone)?;
                let next = cron.find_next_occurrence(&start, false).ok()?;
                millis(next.timestamp())
            }
        }
    }

    /// The last time it was due at or before `at_ms`, if it ever was.
    pub fn last_at_or_before(&self, at_ms: u64) -> Option<u64> {
        match self {
            Timing::Once { at_ms: once } => (*once <= at_ms).then_some(*once),
            Timing::Cron { cron, zone } => {
                let start = zoned(at_ms, zone)?;
                let last = cron.find_previous_occurrence(&start, true).ok()?;
                millis(last.timestamp())
            }
        }
    }

    /// The next `count` times it is due after `after_ms`.
    pub fn upcoming(&self, after_ms: u64, count: usize) -> Vec<u64> {
        let mut times = Vec::with_capacity(count);
        let mut after = after_ms;
        while times.len() < count {
            let Some(next) = self.next_after(after) else { break };
            times.push(next);
            after = next;
        }
        times
    }
}

fn zoned(ms: u64, zone: &TimeZone) -> Option<jiff::Zoned> {
    let timestamp = Timestamp::from_millisecond(i64::try_from(ms).ok()?).ok()?;
    Some(timestamp.to_zoned(zone.clone()))
}

fn millis(timestamp: Timestamp) -> Option<u64> {
    u64::try_from(timestamp.as_millisecond()).ok()
}

/// `ms` as RFC 3339 in UTC, for people and for errors.
pub fn rfc3339(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .map(|timestamp| timestamp.to_string())
        .unwrap_or_else(|| format!("{ms} ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> u64 {
        millis(text.parse::<Timestamp>().unwrap()).unwrap()
    }

    #[test]
    fn a_cron_is_read_in_its_zone_through_daylight_saving() {
        let nightly = Timing::cron("0 3 * * *", "Europe/Paris").unwrap();
        // Winter: UTC+1.
        assert_eq!(
            nightly.next_after(at("2026-01-10T12:00:00Z")),
            Some(at("2026-01-11T02:00:00Z"))
        );
        // Summer: UTC+2.
        assert_eq!(
            nightly.next_after(at("2026-07-10T12:00:00Z")),
            Some(at("2026-07-11T01:00:00Z"))
        );
        // 02:30 does not exist on 29 March 2026 in Paris (02:00 -> 03:00): it runs once, at the
        // first moment after the gap.
        let gap = Timing::cron("30 2 * * *", "Europe/Paris").unwrap();
        let runs = gap.upcoming(at("2026-03-28T12:00:00Z"), 2);
        assert_eq!(runs[0], at("2026-03-29T01:00:00Z"), "{}", rfc3339(runs[0]));
        assert_eq!(runs[1], at("2026-03-30T00:30:00Z"));
        // 02:30 happens twice on 25 October 2026 (03:00 -> 02:00): it runs once that day.
        let twice = gap.upcoming(at("2026-10-24T12:00:00Z"), 2);
        assert!(twice[1] - twice[0] > 23 * 3_600_000, "{twice:?}");
    }

    #[test]
    fn seconds_are_optional_and_the_last_run_is_found() {
        let every_five = Timing::cron("*/5 * * * * *", "UTC").unwrap();
        let now = at("2026-11-30T06:00:02Z");
        assert_eq!(every_five.next_after(now), Some(at("2026-11-30T06:00:05Z")));
        assert_eq!(every_five.last_at_or_before(now), Some(at("2026-11-30T06:00:00Z")));
        assert_eq!(
            every_five.last_at_or_before(at("2026-11-30T06:00:05Z")),
            Some(at("2026-11-30T06:00:05Z")),
            "inclusive"
        );
        assert_eq!(every_five.upcoming(now, 3).len(), 3);
        let once = Timing::once(now);
        assert_eq!(once.next_after(now - 1), Some(now));
        assert_eq!(once.next_after(now), None);
        assert_eq!(once.last_at_or_before(now + 5), Some(now));
    }

    #[test]
    fn bad_timings_are_refused_by_name() {
        let error = Timing::cron("61 * * * *", "UTC").unwrap_err();
        assert!(error.contains("\"61 * * * *\" is not one"), "{error}");
        let error = Timing::cron("0 3 * * *", "Mars/Olympus").unwrap_err();
        assert!(error.contains("\"Mars/Olympus\" is not one"), "{error}");
        let error = Timing::cron("0 0 30 2 *", "UTC").unwrap_err();
        assert!(error.contains("never matches"), "{error}");
        let error = Timing::cron(&"1,".repeat(150), "UTC").unwrap_err();
        assert!(error.contains("longer than 200"), "{error}");
    }
}
