//! Budgets that pause, not kill: a session's own (`max_budget_usd`), the daemon's daily one,
//! a token's, and its cap on the account's usage windows (`max_window_utilization`, unattended
//! work's: a window reported at or past the cap, or used up, pauses it until a person raises
//! the cap); what may still be sent, what a turn spent, the pause and its lifting.
//!
//! The pump adds up what a batch's results cost (the projection's `TurnEnded.cost_usd`, the
//! step from the last reported total; a session taken up from the store starts from its
//! record's cost) and charges the daemon and the token that sent the CLI its latest message;
//! then `check_budget` pauses the session if its own `max_budget_usd` (in its `Launch`) or a
//! daily limit is reached, or lets a paused one go on. A pause is the daemon's
//! (`LiveSession::paused`), not the session core's: the record's state reads `paused` while
//! the core's is not final, `send_message` refuses, and a raise (a `PATCH` of the session or
//! of `/api/budget`) checks again.

use super::*;

impl Daemon {
    /// Why the session `id` is paused, if it is.
    pub fn paused(&self, id: &str) -> Option<String> {
        self.live(id).and_then(|live| live.paused())
    }

    /// Today's spend and the daily limits.
    pub fn budget(&self) -> crate::budget::Spend {
        self.budgets.today()
    }

    /// Changes the daily limits; sessions they paused go on if no limit holds them any more
    /// (and sessions now over one pause).
    pub async fn change_budget(
        self: &Arc<Self>,
        change: &crate::budget::LimitChange,
    ) -> Result<crate::budget::Spend, DaemonError> {
        let spend = self.budgets.change(change).await.map_err(DaemonError::Invalid)?;
        let live: Vec<(String, Arc<LiveSession>)> =
            self.sessions.lock().iter().map(|(id, live)| (id.clone(), live.clone())).collect();
        for (id, live) in live {
            if live.handle().is_some() {
                self.check_budget(&id, &live);
            }
        }
        Ok(spend)
    }

    /// Whether `by` may send session `id` a message now: not while it is paused (checked
    /// again first: a daily limit ends with its day), nor past a daily limit of `by`'s.
    pub fn may_send(&self, id: &str, by: &str) -> Result<(), DaemonError> {
        if let Some(live) = self.live(id) {
            if live.paused().is_some() {
                self.lift_pause(id, &live);
            } else if let Some(why) = self.over_budget(&live) {
                // Over a limit it had not met yet (a resume's first message): it pauses now.
                let _checking = live.budget_check.lock();
                if !live.set_paused(Some(why)) {
                    live.record.lock().state = RecordState::Paused;
                    self.record_changed(&live);
                }
            }
            if let Some(why) = live.paused() {
                return Err(DaemonError::Budget(format!(
                    "session {id} is paused: {why}; raise its budget (PATCH /api/sessions/{id} with max_budget_usd) or the daily one (PATCH /api/budget), or stop it"
                )));
            }
        }
        self.daily_limit(Some(by))
    }

    /// A daily limit that refuses new work started by `by` (who asks), if one does.
    pub(super) fn daily_limit(&self, by: Option<&str>) -> Result<(), DaemonError> {
        match self.budgets.over(by.and_then(crate::budget::token_of)) {
            Some(why) => Err(DaemonError::Budget(format!(
                "{why}; an admin raises it (PATCH /api/budget), or it starts again tomorrow (UTC)"
            ))),
            None => Ok(()),
        }
    }

    /// What the session's turns cost (`usd`): today's spend, the daemon's and the token's
    /// that sent the CLI its latest message; then the session pauses if a limit is reached.
    pub(super) fn spend(self: &Arc<Self>, id: &str, live: &Arc<LiveSession>, usd: f64) {
        let sender = live.sender();
        self.budgets.charge(sender.as_deref().and_then(crate::budget::token_of), usd);
        // What the session spent in all, over every run and CLI (a CLI's own total may start
        // again from zero on a resume): kept in its record.
        live.record.lock().spent_usd += usd;
        self.record_changed(live);
        self.check_budget(id, live);
    }

    /// The limit the session is over, if any: its own `max_budget_usd`, the daemon's daily
    /// one, or that of the token that sent its latest message.
    pub(super) fn over_budget(&self, live: &LiveSession) -> Option<String> {
        let (cost, max, cap) = {
            let record = live.record.lock();
            (record.spent_usd, record.launch.max_budget_usd, record.launch.max_window_utilization)
        };
        if let Some(cap) = cap {
            let windows = self.usage.report().windows;
            if let Some(hold) =
                crate::schedules::plan::window_hold(&windows, Some(cap), self.clock_ms())
            {
                return Some(format!(
                    "{}; raise or clear its cap (PATCH /api/sessions/ID with max_window_utilization)",
                    hold.why
                ));
            }
        }
        if let Some(max) = max.filter(|max| cost >= *max) {
            return Some(format!(
                "its budget of {} is spent ({})",
                crate::budget::dollars(max),
                crate::budget::dollars(cost)
            ));
        }
        let sender = live.sender();
        self.budgets.over(sender.as_deref().and_then(crate::budget::token_of))
    }

    /// Lets a paused session go on if no limit holds it any more.
    pub(super) fn lift_pause(&self, id: &str, live: &Arc<LiveSession>) {
        let _checking = live.budget_check.lock();
        self.lift_checked(id, live);
    }

    /// [`Daemon::lift_pause`], its session's budget lock held.
    pub(super) fn lift_checked(&self, id: &str, live: &Arc<LiveSession>) {
        if live.paused().is_none() || self.over_budget(live).is_some() {
            return;
        }
        live.set_paused(None);
        tracing::info!(session = %id, "goes on: its budget allows it");
        let state = live.handle().map(|handle| handle.snapshot().state);
        if let Some(state) = state {
            live.record.lock().state = record_state(state, false);
        }
        self.record_changed(live);
    }

    /// Pauses the session if a limit is reached (interrupting a turn that runs, telling the
    /// channels), or lets a paused one go on once none is.
    pub(super) fn check_budget(self: &Arc<Self>, id: &str, live: &Arc<LiveSession>) {
        let _checking = live.budget_check.lock();
        let Some(why) = self.over_budget(live) else {
            return self.lift_checked(id, live);
        };
        let was_paused = live.set_paused(Some(why.clone()));
        // A turn running while paused (a subagent's result crossed the limit, or a message
        // the CLI had queued began) stops here.
        let state = live.handle().map(|handle| handle.snapshot().state);
        if matches!(state, Some(SessionState::Working | SessionState::AwaitingPermission)) {
            if let Some(handle) = live.handle() {
                tokio::spawn(async move {
                    let _ = handle.interrupt().await;
                });
            }
        }
        if !was_paused {
            tracing::info!(session = %id, "paused: {why}");
            {
                let mut record = live.record.lock();
                if !record.state.is_final() {
                    record.state = RecordState::Paused;
                }
            }
            self.record_changed(live);
            self.tell_budget(id, live, &why);
        }
    }

    /// Tells the channels a session paused at a budget.
    pub(super) fn tell_budget(self: &Arc<Self>, id: &str, live: &LiveSession, why: &str) {
        if self.notifier.is_idle() {
            return;
        }
        let (title, cwd) = {
            let record = live.record.lock();
            (record.title.clone().unwrap_or_default(), record.cwd.clone())
        };
        let name = if title.is_empty() { id.to_owned() } else { title.clone() };
        let told = Told {
            topic: crate::notify::Topic::BudgetReached,
            key: format!("{id}:budget:{}", now_ms()),
            title: format!("Paused (budget): {name}"),
            text: format!("Paused: {why}. Raise the budget to go on, or stop the session."),
            request: None,
            extra: json!({"budget": {"reason": why}}),
        };
        let session = json!({"id": id, "title": title, "cwd": cwd});
        tell(self, &self.notifier, id, &session, &live.route(), told);
    }
}

/// An after-store observer ([`super::observers`]): what turns cost is charged, and a turn
/// begun while paused is stopped.
pub(super) struct Budgets;

impl Observer for Budgets {
    fn stored<'a>(&'a self, daemon: &'a Arc<Daemon>, s: &'a Stored<'a>) -> Option<Waiting<'a>> {
        if s.spent > 0.0 {
            daemon.spend(s.id, s.live, s.spent);
        } else if s
            .batch
            .iter()
            .any(|event| matches!(event, SessionEvent::State { to: SessionState::Working, .. }))
            && s.live.paused().is_some()
        {
            // (The batch first: it is at hand, where the pause is behind a lock of its own.)
            // A turn began while paused (one the CLI had queued): it stops.
            daemon.check_budget(s.id, s.live);
        }
        None
    }
}
