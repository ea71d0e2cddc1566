//! Budgets that pause, not kill: a session's `max_budget_usd`, a daily limit for the whole
//! daemon and one per token. What sessions spend is what their CLIs report (each result's
//! `total_cost_usd`, as the one projection reads it: a turn's cost is the step from the last
//! total). A session that reaches a limit is paused ([`crate::daemon`]): it takes no more
//! messages until a person raises the limit, or stops it.
//!
//! The daily limits and today's spend (UTC days) are kept in `DATA_DIR/budget.json`, written
//! whole and renamed over the old one at each turn that costs something; a session's own
//! limit is in its record.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Where the daemon keeps its daily limits and spend, and its daily limit.
#[derive(Debug, Clone, Default)]
pub struct BudgetConfig {
    /// `DATA_DIR/budget.json` (`None`: in memory only).
    pub file: Option<PathBuf>,
    /// The daemon's daily limit (`serve --daily-budget-usd`), replacing the file's.
    pub daily_usd: Option<f64>,
}

/// The largest budget file read.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The most tokens with a daily limit of their own.
pub const MAX_TOKEN_LIMITS: usize = 1000;

/// The daily limits and what was spent today.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Spend {
    /// The UTC day the spend is of (`2026-11-24`).
    pub day: String,
    /// The daemon's daily limit (US dollars); `None`: none.
    pub daily_usd: Option<f64>,
    /// What the daemon's sessions spent that day.
    pub spent_usd: f64,
    /// Daily limits of tokens, by name.
    pub token_daily_usd: BTreeMap<String, f64>,
    /// What turns each token started spent that day, by name.
    pub token_spent_usd: BTreeMap<String, f64>,
}

/// A change of the daily limits (`PATCH /api/budget`): a field given replaces the limit,
/// `null` removes it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitChange {
    /// The daemon's daily limit.
    #[serde(default, deserialize_with = "some_or_null")]
    pub daily_usd: Option<Option<f64>>,
    /// Tokens' daily limits, by name.
    #[serde(default)]
    pub token_daily_usd: BTreeMap<String, Option<f64>>,
}

/// For a field of type `Option<Option<T>>` with `#[serde(default)]`: missing is `None`,
/// `null` is `Some(None)`, a value `Some(Some(value))`.
pub fn some_or_null<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// A limit is a finite amount of dollars, zero or more.
pub fn check_limit(what: &str, usd: f64) -> Result<(), String> {
    if usd.is_finite() && (0.0..=1e9).contains(&usd) {
        Ok(())
    } else {
        Err(format!("{what} is a number of US dollars, 0 or more"))
    }
}

/// The token's name in what `tokens::Caller::who` recorded (`[BY, ]token NAME (CHANNEL)`, as a
/// message's sender is), if a named token made the request. Read from the end: a channel
/// (fixed, or a client's `x-switchboard-client`) has no parenthesis and a name no space, so
/// nothing a client writes in `BY` or the channel passes for another token.
pub fn token_of(who: &str) -> Option<&str> {
    let (head, _) = who.strip_suffix(')')?.rsplit_once(" (")?;
    let (_, name) = head.rsplit_once("token ")?;
    crate::text::is_name(name).then_some(name)
}

/// An amount as people read it: cents from a cent up, else to the millionth.
pub fn dollars(usd: f64) -> String {
    if usd == 0.0 || usd >= 0.01 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.6}")
    }
}

/// The UTC day of `ms` (Unix milliseconds), as `YYYY-MM-DD`.
pub fn day_of(ms: u64) -> String {
    let seconds = i64::try_from(ms / 1000).unwrap_or(i64::MAX);
    let date = time::OffsetDateTime::from_unix_timestamp(seconds)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
        .date();
    format!("{:04}-{:02}-{:02}", date.year(), u8::from(date.month()), date.day())
}

/// The daemon's daily limits and spend.
#[derive(Debug)]
pub struct Budgets {
    spend: Mutex<Spend>,
    /// The file's next text, for its one writer (the newest wins; `None`: in memory only).
    save: Option<tokio::sync::watch::Sender<String>>,
}

impl Budgets {
    /// Kept in memory only, with the daemon's daily limit `daily_usd`.
    pub fn in_memory(daily_usd: Option<f64>) -> Budgets {
        let spend =
            Spend { day: day_of(switchboard_store::now_ms()), daily_usd, ..Spend::default() };
        Budgets { spend: Mutex::new(spend), save: None }
    }

    /// Those kept in `file` (none if it does not exist); `daily_usd`, when given (`serve
    /// --daily-budget-usd`), replaces the daemon's daily limit kept there. Starts the file's
    /// writer, a task that ends with the budgets (so: within a Tokio runtime).
    pub fn load(file: PathBuf, daily_usd: Option<f64>) -> Result<Budgets, String> {
        let shown = file.display();
        let mut spend: Spend = match crate::files::read_bounded(&file, MAX_FILE_BYTES) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|error| format!("{shown} is unreadable: {error}"))?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Spend::default(),
            Err(error) => return Err(format!("cannot read {shown}: {error}")),
        };
        if let Some(daily) = daily_usd {
            spend.daily_usd = Some(daily);
        }
        let (save, mut saved) = tokio::sync::watch::channel(String::new());
        tokio::spawn(async move {
            while saved.changed().await.is_ok() {
                let text = saved.borrow_and_update().clone();
                let file = file.clone();
                let written = tokio::task::spawn_blocking(move || {
                    crate::files::replace_private(&file, &text)
                        .map_err(|error| format!("cannot write {}: {error}", file.display()))
                })
                .await;
                if let Ok(Err(error)) = written {
                    tracing::warn!("today's spend is not kept: {error}");
                }
            }
        });
        let budgets = Budgets { spend: Mutex::new(spend), save: Some(save) };
        budgets.today();
        Ok(budgets)
    }

    /// Hands `spend` to the file's writer.
    fn save(&self, spend: &Spend) {
        if let (Some(save), Ok(text)) = (&self.save, serde_json::to_string_pretty(spend)) {
            save.send_replace(text);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Spend> {
        self.spend.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Today's spend and the limits (a new day starts at zero).
    pub fn today(&self) -> Spend {
        let mut spend = self.lock();
        let today = day_of(switchboard_store::now_ms());
        if spend.day != today {
            spend.day = today;
            spend.spent_usd = 0.0;
            spend.token_spent_usd.clear();
        }
        spend.clone()
    }

    /// Adds `usd` spent by a turn `token` started (if a token did) to today's spend.
    pub fn charge(&self, token: Option<&str>, usd: f64) {
        if !(usd.is_finite() && usd > 0.0) {
            return;
        }
        self.today();
        let mut spend = self.lock();
        spend.spent_usd += usd;
        if let Some(token) = token {
            *spend.token_spent_usd.entry(token.to_owned()).or_default() += usd;
        }
        self.save(&spend);
    }

    /// Which daily limit a turn `token` starts is over, if one is: a sentence that says which,
    /// and what was spent.
    pub fn over(&self, token: Option<&str>) -> Option<String> {
        let spend = self.today();
        if let Some(limit) = spend.daily_usd.filter(|limit| spend.spent_usd >= *limit) {
            return Some(format!(
                "the daemon's daily budget of {} is spent ({} today)",
                dollars(limit),
                dollars(spend.spent_usd)
            ));
        }
        let token = token?;
        let limit = *spend.token_daily_usd.get(token)?;
        let spent = spend.token_spent_usd.get(token).copied().unwrap_or(0.0);
        (spent >= limit).then(|| {
            format!(
                "token {token}'s daily budget of {} is spent ({} today)",
                dollars(limit),
                dollars(spent)
            )
        })
    }

    /// Changes the daily limits; today's spend and limits after.
    pub fn change(&self, change: &LimitChange) -> Result<Spend, String> {
        if let Some(Some(daily)) = change.daily_usd {
            check_limit("daily_usd", daily)?;
        }
        for (name, limit) in &change.token_daily_usd {
            if let Some(limit) = limit {
                check_limit(&format!("token_daily_usd.{name}"), *limit)?;
            }
            if !crate::text::is_name(name) {
                return Err("token_daily_usd: names are token names".into());
            }
        }
        self.today();
        let mut spend = self.lock();
        let mut next = spend.clone();
        if let Some(daily) = change.daily_usd {
            next.daily_usd = daily;
        }
        for (name, limit) in &change.token_daily_usd {
            match limit {
                Some(limit) => next.token_daily_usd.insert(name.clone(), *limit),
                None => next.token_daily_usd.remove(name),
            };
        }
        if next.token_daily_usd.len() > MAX_TOKEN_LIMITS {
            return Err(format!("at most {MAX_TOKEN_LIMITS} tokens have daily budgets"));
        }
        *spend = next.clone();
        self.save(&next);
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_utc_dates() {
        assert_eq!(day_of(0), "1970-01-01");
        assert_eq!(day_of(1_795_000_000_000), "2026-11-18");
        assert_eq!(day_of(1_795_046_399_999), "2026-11-18");
        assert_eq!(day_of(1_795_046_400_000), "2026-11-19", "a new day at midnight UTC");
    }

    #[tokio::test]
    async fn limits_are_reached_by_the_daemon_and_by_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("budget.json");
        let budgets = Budgets::load(file.clone(), Some(1.0)).unwrap();
        assert_eq!(budgets.over(Some("ci")), None);
        let change = LimitChange {
            token_daily_usd: BTreeMap::from([("ci".to_owned(), Some(0.25))]),
            ..LimitChange::default()
        };
        budgets.change(&change).unwrap();
        budgets.charge(Some("ci"), 0.3);
        assert!(budgets.over(Some("ci")).unwrap().contains("token ci's daily budget of $0.25"));
        assert_eq!(budgets.over(Some("other")), None, "another token's turns go on");
        budgets.charge(None, 0.8);
        assert!(budgets.over(None).unwrap().contains("the daemon's daily budget of $1.00"));
        // Kept across a restart (once its writer wrote it); a flag replaces the daemon's limit.
        drop(budgets);
        let kept = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                if text.contains("1.1") {
                    return;
                }
                tokio::task::yield_now().await;
            }
        });
        assert!(kept.await.is_ok(), "the spend reached its file");
        let again = Budgets::load(file, Some(5.0)).unwrap();
        let today = again.today();
        assert_eq!((today.daily_usd, today.token_daily_usd.get("ci")), (Some(5.0), Some(&0.25)));
        assert!((today.spent_usd - 1.1).abs() < 1e-9, "{today:?}");
        assert!((today.token_spent_usd["ci"] - 0.3).abs() < 1e-9, "{today:?}");
        let bad = LimitChange { daily_usd: Some(Some(f64::NAN)), ..LimitChange::default() };
        assert!(again.change(&bad).is_err());
        let removed: LimitChange = serde_json::from_str(r#"{"daily_usd": null}"#).unwrap();
        assert_eq!(again.change(&removed).unwrap().daily_usd, None);
        let kept: LimitChange = serde_json::from_str("{}").unwrap();
        assert_eq!(kept.daily_usd, None, "missing is not null");
    }
}
