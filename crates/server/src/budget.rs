//! Budgets that pause, not kill: a session's `max_budget_usd`, a daily limit for the whole
//! daemon and one per token. What sessions spend is what their CLIs report (each result's
//! `total_cost_usd`, as the one projection reads it: a turn's cost is the step from the last
//! total). A session that reaches a limit is paused ([`crate::daemon`]): it takes no more
//! messages until a person raises the limit, or stops it.
//!
//! The daily limits and today's spend (UTC days) are kept in `DATA_DIR/budget.json`, written
//! whole and renamed over the old one at each turn that costs something; a session's own
//! limit is in its record. On a database several daemons share they are its shared `budget`
//! document instead ([`crate::shared`]): every node's turns count against one daily limit,
//! and a limit changed through one node holds on all.
//!
//! The file has one writer task, and the newest text wins. In a fleet a writer task adds what
//! this node's turns spent to the shared document; it is counted here until it is added.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::shared::SharedDoc;

use serde::{Deserialize, Serialize};

/// Where the daemon keeps its daily limits and spend, and its daily limit.
#[derive(Debug, Clone, Default)]
pub struct BudgetConfig {
    /// `DATA_DIR/budget.json` (`None`: in memory only).
    pub file: Option<PathBuf>,
    /// The fleet's shared documents, where several daemons share a database: the limits and
    /// spend are kept there (the file, where none is shared yet, becomes it).
    pub shared: Option<std::sync::Arc<dyn switchboard_store::Documents>>,
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
    /// Where they are kept, and this node's spend not written there yet.
    kept: Kept,
}

#[derive(Debug)]
enum Kept {
    /// In this process: in memory only, or also a file's (its one writer takes the newest
    /// text).
    Here { spend: Mutex<Spend>, save: Option<tokio::sync::watch::Sender<String>> },
    /// The fleet's `budget` document, and what this node's turns spent that its writer has not
    /// added to it yet (counted here meanwhile, so that a limit holds at once).
    Shared { doc: Arc<SharedDoc<Spend>>, unsent: Arc<Mutex<Spent>>, wake: Arc<tokio::sync::Notify> },
}

/// What turns spent, for the daemon and by token.
#[derive(Debug, Clone, Default)]
struct Spent {
    usd: f64,
    tokens: BTreeMap<String, f64>,
}

impl Spent {
    fn add(&mut self, token: Option<&str>, usd: f64) {
        self.usd += usd;
        if let Some(token) = token {
            *self.tokens.entry(token.to_owned()).or_default() += usd;
        }
    }

    fn to(&self, spend: &mut Spend) {
        spend.spent_usd += self.usd;
        for (token, usd) in &self.tokens {
            *spend.token_spent_usd.entry(token.clone()).or_default() += usd;
        }
    }

    fn less(&mut self, sent: &Spent) {
        self.usd -= sent.usd;
        for (token, usd) in &sent.tokens {
            if let Some(left) = self.tokens.get_mut(token) {
                *left -= usd;
                if left.abs() < 1e-12 {
                    self.tokens.remove(token);
                }
            }
        }
    }
}

/// `spend` as of today: a new day starts at zero.
fn roll(spend: &mut Spend) {
    let today = day_of(switchboard_store::now_ms());
    if spend.day != today {
        spend.day = today;
        spend.spent_usd = 0.0;
        spend.token_spent_usd.clear();
    }
}

fn read_file(file: &std::path::Path) -> Result<Spend, String> {
    let shown = file.display();
    match crate::files::read_bounded(file, MAX_FILE_BYTES) {
        Ok(text) => {
            serde_json::from_str(&text).map_err(|error| format!("{shown} is unreadable: {error}"))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Spend::default()),
        Err(error) => Err(format!("cannot read {shown}: {error}")),
    }
}

impl Budgets {
    /// Kept in memory only, with the daemon's daily limit `daily_usd`.
    pub fn in_memory(daily_usd: Option<f64>) -> Budgets {
        let spend =
            Spend { day: day_of(switchboard_store::now_ms()), daily_usd, ..Spend::default() };
        Budgets { kept: Kept::Here { spend: Mutex::new(spend), save: None } }
    }

    /// Those `config` says: in its file (none if it does not exist), or in the fleet's shared
    /// document. Its `daily_usd`, when given (`serve --daily-budget-usd`), replaces the
    /// daemon's daily limit kept there. Starts the writer, a task that ends with the budgets
    /// (so: within a Tokio runtime).
    pub async fn open(config: &BudgetConfig) -> Result<Budgets, String> {
        match (&config.shared, &config.file) {
            (Some(shared), file) => {
                Budgets::shared(shared.clone(), file.clone(), config.daily_usd).await
            }
            (None, Some(file)) => Budgets::load(file.clone(), config.daily_usd),
            (None, None) => Ok(Budgets::in_memory(config.daily_usd)),
        }
    }

    /// Those kept in `file` (none if it does not exist); `daily_usd`, when given (`serve
    /// --daily-budget-usd`), replaces the daemon's daily limit kept there. Starts the file's
    /// writer, a task that ends with the budgets (so: within a Tokio runtime).
    pub fn load(file: PathBuf, daily_usd: Option<f64>) -> Result<Budgets, String> {
        let mut spend = read_file(&file)?;
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
        let budgets = Budgets { kept: Kept::Here { spend: Mutex::new(spend), save: Some(save) } };
        budgets.today();
        Ok(budgets)
    }

    /// Those of the fleet's shared `budget` document (where none is shared yet, this node's
    /// `file` becomes it); `daily_usd`, when given, replaces the daily limit kept there.
    async fn shared(
        store: Arc<dyn switchboard_store::Documents>,
        file: Option<PathBuf>,
        daily_usd: Option<f64>,
    ) -> Result<Budgets, String> {
        let doc = SharedDoc::open(store, "budget", || match &file {
            Some(file) => read_file(file),
            None => Ok(Spend::default()),
        })
        .await?;
        if let Some(daily) = daily_usd {
            doc.update(|spend| {
                spend.daily_usd = Some(daily);
                Ok(())
            })
            .await?;
        }
        doc.follow();
        let unsent = Arc::new(Mutex::new(Spent::default()));
        let wake = Arc::new(tokio::sync::Notify::new());
        // The writer: adds what this node's turns spent to the document (from the version it
        // reads, so that no node's spend is lost), and only then stops counting it here.
        let (weak, waiting, woken) = (Arc::downgrade(&doc), unsent.clone(), wake.clone());
        tokio::spawn(async move {
            loop {
                woken.notified().await;
                let Some(doc) = weak.upgrade() else { return };
                loop {
                    let sending = waiting.lock().clone();
                    if sending.usd == 0.0 && sending.tokens.is_empty() {
                        break;
                    }
                    let added = doc
                        .update(|spend| {
                            roll(spend);
                            sending.to(spend);
                            Ok(())
                        })
                        .await;
                    match added {
                        Ok(()) => waiting.lock().less(&sending),
                        Err(error) => {
                            tracing::warn!("today's spend is not shared yet: {error}");
                            tokio::time::sleep(crate::shared::REFRESH).await;
                        }
                    }
                }
            }
        });
        Ok(Budgets { kept: Kept::Shared { doc, unsent, wake } })
    }

    /// Today's spend and the limits (a new day starts at zero).
    pub fn today(&self) -> Spend {
        match &self.kept {
            Kept::Here { spend, .. } => {
                let mut spend = spend.lock();
                roll(&mut spend);
                spend.clone()
            }
            Kept::Shared { doc, unsent, .. } => {
                let mut spend = doc.get();
                roll(&mut spend);
                unsent.lock().to(&mut spend);
                spend
            }
        }
    }

    /// Adds `usd` spent by a turn `token` started (if a token did) to today's spend.
    pub fn charge(&self, token: Option<&str>, usd: f64) {
        if !(usd.is_finite() && usd > 0.0) {
            return;
        }
        match &self.kept {
            Kept::Here { spend, save } => {
                let mut spend = spend.lock();
                roll(&mut spend);
                let mut spent = Spent::default();
                spent.add(token, usd);
                spent.to(&mut spend);
                if let (Some(save), Ok(text)) = (save, serde_json::to_string_pretty(&*spend)) {
                    save.send_replace(text);
                }
            }
            Kept::Shared { unsent, wake, .. } => {
                unsent.lock().add(token, usd);
                wake.notify_one();
            }
        }
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
    pub async fn change(&self, change: &LimitChange) -> Result<Spend, String> {
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
        let apply = |spend: &mut Spend| {
            roll(spend);
            if let Some(daily) = change.daily_usd {
                spend.daily_usd = daily;
            }
            for (name, limit) in &change.token_daily_usd {
                match limit {
                    Some(limit) => spend.token_daily_usd.insert(name.clone(), *limit),
                    None => spend.token_daily_usd.remove(name),
                };
            }
            if spend.token_daily_usd.len() > MAX_TOKEN_LIMITS {
                return Err(format!("at most {MAX_TOKEN_LIMITS} tokens have daily budgets"));
            }
            Ok(())
        };
        match &self.kept {
            Kept::Here { spend, save } => {
                let mut spend = spend.lock();
                let mut next = spend.clone();
                apply(&mut next)?;
                *spend = next.clone();
                if let (Some(save), Ok(text)) = (save, serde_json::to_string_pretty(&next)) {
                    save.send_replace(text);
                }
            }
            Kept::Shared { doc, .. } => doc.update(apply).await?,
        }
        Ok(self.today())
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
        budgets.change(&change).await.unwrap();
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
        assert!(again.change(&bad).await.is_err());
        let removed: LimitChange = serde_json::from_str(r#"{"daily_usd": null}"#).unwrap();
        assert_eq!(again.change(&removed).await.unwrap().daily_usd, None);
        let kept: LimitChange = serde_json::from_str("{}").unwrap();
        assert_eq!(kept.daily_usd, None, "missing is not null");
    }

    #[tokio::test]
    async fn every_nodes_turns_count_against_one_shared_limit() {
        let store: Arc<dyn switchboard_store::Documents> =
            Arc::new(switchboard_store::MemoryStore::new());
        let config = BudgetConfig { file: None, shared: Some(store.clone()), daily_usd: Some(1.0) };
        let a = Budgets::open(&config).await.unwrap();
        let b = Budgets::open(&BudgetConfig { daily_usd: None, ..config.clone() }).await.unwrap();
        a.charge(Some("ci"), 0.6);
        assert!((a.today().spent_usd - 0.6).abs() < 1e-9, "counted at once where it was spent");
        b.charge(None, 0.5);
        assert_eq!(b.over(None), None, "b has not read a's spend yet");
        let Kept::Shared { doc, .. } = &b.kept else { panic!("shared") };
        // Within a deadline, b reads what a's writer added: 1.1 spent of 1.0.
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while b.over(None).is_none() {
                doc.refresh().await.unwrap();
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("b counts a's spend");
        assert!(b.over(None).unwrap().contains("($1.10 today)"), "{:?}", b.over(None));
        assert!((b.today().token_spent_usd["ci"] - 0.6).abs() < 1e-9);
        // A limit raised through b holds on a.
        let raised = LimitChange { daily_usd: Some(Some(5.0)), ..LimitChange::default() };
        b.change(&raised).await.unwrap();
        let Kept::Shared { doc, .. } = &a.kept else { panic!("shared") };
        doc.refresh().await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while a.today().daily_usd != Some(5.0) || (a.today().spent_usd - 1.1).abs() > 1e-9 {
                doc.refresh().await.unwrap();
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("a reads b's limit and b's spend");
        assert_eq!(a.over(None), None);
    }
}
