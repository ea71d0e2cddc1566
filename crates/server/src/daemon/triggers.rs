//! Triggers: a delivery to `POST /hooks/{name}` is checked (the trigger's HMAC signature),
//! noted once (a delivery id or a signed body seen before runs nothing), then routed: GitHub
//! feedback about a branch goes to the session whose worktree made it (sent, or the session
//! resumed with it); a delivery that starts the trigger's task starts a fresh session with the
//! prompt its template fills. While a usage window holds unattended work back, a task's run
//! waits in the trigger's queue and starts at the window's reset (the scheduler looks).

use super::*;
use crate::schedules::feedback;
use crate::schedules::trigger::{QueuedRun, Trigger, TriggerRun};

/// The largest delivery read.
pub const MAX_DELIVERY_BYTES: usize = 4 * 1024 * 1024;

/// How long a delivery's body may take to arrive.
pub const DELIVERY_WITHIN: Duration = Duration::from_secs(30);

/// What a delivery carries besides its body: its headers, as GitHub names them.
#[derive(Debug, Clone, Default)]
pub struct Delivery {
    /// `X-Hub-Signature-256`.
    pub signature: Option<String>,
    /// `X-GitHub-Delivery`.
    pub id: Option<String>,
    /// `X-GitHub-Event`.
    pub event: Option<String>,
}

/// What a delivery did, as `POST /hooks/{name}` answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivered {
    /// `started`, `feedback`, `queued`, `duplicate` or `ignored`.
    pub outcome: String,
    /// The session it started or reached.
    pub session: Option<String>,
    /// What was done, or why nothing was.
    pub detail: Option<String>,
}

impl Daemon {
    /// Trigger `name`, if there is one.
    pub fn trigger(&self, name: &str) -> Option<Trigger> {
        self.books.get().triggers.get(name).map(|entry| entry.trigger.clone())
    }

    /// Takes a delivery to trigger `name`.
    pub async fn deliver(
        self: &Arc<Self>,
        name: &str,
        delivery: &Delivery,
        body: &[u8],
    ) -> Result<Delivered, DaemonError> {
        let trigger =
            self.trigger(name).ok_or_else(|| DaemonError::Missing(format!("no trigger {name}")))?;
        // A delivery not signed with the trigger's secret is logged (it may be someone
        // probing) but not noted among the trigger's runs: only a signed one is.
        crate::schedules::signature::check(&trigger.secret, body, delivery.signature.as_deref())
            .map_err(|why| {
                tracing::warn!(trigger = %name, delivery = ?delivery.id, "a delivery was refused: {why}");
                DaemonError::Forbidden(why)
            })?;
        if trigger.paused {
            return Err(DaemonError::Conflict(format!("trigger {name} is paused")));
        }
        let mut keys =
            vec![format!("body:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(body)))];
        if let Some(id) = &delivery.id {
            keys.push(format!("id:{}", id.chars().take(200).collect::<String>()));
        }
        let first = self
            .books
            .change_trigger(name, |entry| Ok(entry.state.first_time(&keys)))
            .await
            .map_err(DaemonError::Internal)?
            .ok_or_else(|| DaemonError::Missing(format!("no trigger {name}")))?;
        if !first {
            tracing::info!(trigger = %name, delivery = ?delivery.id, "a delivery seen before: nothing runs");
            return Ok(Delivered {
                outcome: "duplicate".into(),
                session: None,
                detail: Some("this delivery was seen before; it runs once".into()),
            });
        }
        // A signed body that is not JSON is refused as a payload that does not fit is: with
        // a 400, logged, and noted.
        let delivered = match serde_json::from_slice::<Value>(body) {
            Ok(payload) => Box::pin(self.route(&trigger, delivery, body, &payload)).await,
            Err(error) => {
                Err(DaemonError::Invalid(format!("the delivery's body is not JSON: {error}")))
            }
        };
        let run = match &delivered {
            Ok(delivered) => TriggerRun {
                at_ms: self.clock_ms(),
                delivery: delivery.id.clone(),
                outcome: delivered.outcome.clone(),
                session: delivered.session.clone(),
                detail: delivered.detail.clone(),
            },
            Err(error) => {
                tracing::warn!(trigger = %name, delivery = ?delivery.id, %error, "a delivery was refused");
                // Refused for what it is (its payload), it stays seen; failed for the daemon's
                // own reason, it may be delivered again and run then.
                if !matches!(error, DaemonError::Invalid(_) | DaemonError::Forbidden(_)) {
                    let _ = self
                        .books
                        .change_trigger(name, |entry| {
                            entry.state.forget(&keys);
                            Ok(())
                        })
                        .await;
                }
                TriggerRun {
                    at_ms: self.clock_ms(),
                    delivery: delivery.id.clone(),
                    outcome: "refused".into(),
                    session: None,
                    detail: Some(error.to_string()),
                }
            }
        };
        let noted = self
            .books
            .change_trigger(name, |entry| {
                entry.state.ran(run.clone());
                Ok(())
            })
            .await;
        if let Err(error) = noted {
            tracing::warn!(trigger = %name, %error, "cannot note the delivery");
        }
        delivered
    }

    /// Sends the delivery where it goes: feedback to its branch's session, or the task.
    async fn route(
        self: &Arc<Self>,
        trigger: &Trigger,
        delivery: &Delivery,
        body: &[u8],
        payload: &Value,
    ) -> Result<Delivered, DaemonError> {
        let event = delivery.event.as_deref();
        if let (true, Some(event)) = (trigger.feedback, event) {
            if let Some(feedback) = feedback::read(event, body).map_err(DaemonError::Invalid)? {
                if let Some(record) = self.session_of_branch(&feedback.branch).await? {
                    if let Some(why) = foreign(trigger, &record, &feedback).await {
                        tracing::warn!(trigger = %trigger.name, session = %record.id, "feedback not sent: {why}");
                        return Ok(Delivered {
                            outcome: "ignored".into(),
                            session: None,
                            detail: Some(why),
                        });
                    }
                    return Box::pin(self.send_feedback(trigger, &record, &feedback)).await;
                }
                if !trigger.starts_on(Some(event)) {
                    return Ok(Delivered {
                        outcome: "ignored".into(),
                        session: None,
                        detail: Some(format!("no session made branch {}", feedback.branch)),
                    });
                }
            }
        }
        if !trigger.starts_on(event) {
            return Ok(Delivered {
                outcome: "ignored".into(),
                session: None,
                detail: Some(match event {
                    Some(event) => format!("this trigger does nothing on {event} events"),
                    None => "this trigger does nothing on this delivery".into(),
                }),
            });
        }
        let prompt =
            trigger.template().and_then(|template| template.fill(payload)).map_err(|why| {
                DaemonError::Invalid(format!(
                    "the payload does not fit the trigger's prompt: {why}"
                ))
            })?;
        let run = QueuedRun { prompt, delivery: delivery.id.clone(), at_ms: self.clock_ms() };
        let windows = self.usage.report().windows;
        let now = self.clock_ms();
        if let Some(hold) =
            crate::schedules::plan::window_hold(&windows, trigger.max_window_utilization, now)
        {
            let queued = self
                .books
                .queue_trigger_run(&trigger.name, &run, &hold)
                .await
                .map_err(DaemonError::Busy)?;
            if !queued {
                return Err(DaemonError::Missing(format!("no trigger {}", trigger.name)));
            }
            let when = hold.until_ms.map(crate::schedules::when::rfc3339);
            return Ok(Delivered {
                outcome: "queued".into(),
                session: None,
                detail: Some(match when {
                    Some(when) => format!("{}; it starts at {when}", hold.why),
                    None => hold.why,
                }),
            });
        }
        let record = Box::pin(self.create(trigger_request(trigger, &run))).await?;
        tracing::info!(trigger = %trigger.name, session = %record.id, "a delivery started a session");
        Ok(Delivered { outcome: "started".into(), session: Some(record.id), detail: None })
    }

    /// Starts the trigger runs whose hold has lifted (the scheduler calls it).
    pub(super) async fn start_queued_triggers(self: &Arc<Self>) {
        let now = self.clock_ms();
        let windows = self.usage.report().windows;
        for (name, entry) in self.books.get().triggers {
            if entry.state.queued.is_empty() || entry.trigger.paused {
                continue;
            }
            let cap = entry.trigger.max_window_utilization;
            if crate::schedules::plan::window_hold(&windows, cap, now).is_some() {
                continue;
            }
            // Taken from the book first (compare and set): in a fleet one node starts it.
            let taken =
                self.books.change_trigger(&name, |entry| Ok(entry.state.take_queued())).await;
            let Ok(Some(Some(run))) = taken else { continue };
            let started = Box::pin(self.create(trigger_request(&entry.trigger, &run))).await;
            let note = match started {
                Ok(record) => TriggerRun {
                    at_ms: now,
                    delivery: run.delivery.clone(),
                    outcome: "started".into(),
                    session: Some(record.id),
                    detail: Some("queued until the usage window allowed it".into()),
                },
                // The daemon's own reason (as many sessions as it runs): back at the head of the
                // queue, to start at a later look.
                Err(error)
                    if !matches!(error, DaemonError::Invalid(_) | DaemonError::Forbidden(_)) =>
                {
                    tracing::info!(trigger = %name, %error, "a queued run waits again");
                    let _ = self
                        .books
                        .change_trigger(&name, |entry| {
                            entry.state.requeue(run.clone());
                            Ok(())
                        })
                        .await;
                    continue;
                }
                Err(error) => TriggerRun {
                    at_ms: now,
                    delivery: run.delivery.clone(),
                    outcome: "failed".into(),
                    session: None,
                    detail: Some(error.to_string()),
                },
            };
            let _ = self
                .books
                .change_trigger(&name, |entry| {
                    entry.state.ran(note.clone());
                    Ok(())
                })
                .await;
        }
    }

    /// The newest session whose worktree made `branch`.
    async fn session_of_branch(&self, branch: &str) -> Result<Option<SessionRecord>, DaemonError> {
        let records = self.store.list_sessions().await?;
        Ok(records
            .into_iter()
            .filter(|record| {
                record.launch.worktree.as_ref().is_some_and(|worktree| worktree.branch == branch)
            })
            .max_by_key(|record| record.created_ms))
    }

    /// Tells session `record` of `feedback`: a message if it runs, else it is resumed first.
    async fn send_feedback(
        self: &Arc<Self>,
        trigger: &Trigger,
        record: &SessionRecord,
        feedback: &feedback::Feedback,
    ) -> Result<Delivered, DaemonError> {
        let id = record.id.clone();
        let running = self.live_record(&id).is_some_and(|live| !live.state.is_final())
            || (!record.state.is_final()
                && record.node != self.config.node
                && !self.node_lost(record));
        let mut resumed = false;
        if !running {
            match Box::pin(self.resume(&id)).await {
                Ok(_) => resumed = true,
                // Another delivery resumed it first: it runs.
                Err(DaemonError::AlreadyRunning(_)) => {}
                Err(error) => return Err(error),
            }
        }
        let message = crate::prompt::user_message(Value::String(feedback.text.clone()))
            .map_err(DaemonError::Invalid)?;
        let by = switchboard_session::Sender::new(
            format!("trigger {}, {}", trigger.name, trigger.created_by),
            Some(switchboard_session::TurnOrigin::Trigger),
        );
        self.send_message(&id, message, by).await?;
        tracing::info!(trigger = %trigger.name, session = %id, kind = feedback.kind, resumed, "feedback sent");
        Ok(Delivered {
            outcome: "feedback".into(),
            session: Some(id),
            detail: Some(format!(
                "{} on branch {}{}",
                feedback.kind,
                feedback.branch,
                if resumed { "; the session was resumed" } else { "" }
            )),
        })
    }
}

/// Why `feedback` must not reach session `record`, if it must not: its commit is not on the
/// session's branch in the session's repository (a fork's branch of the same name, or a commit
/// this session never made), or the trigger was made under a ceiling the session is not under.
async fn foreign(
    trigger: &Trigger,
    record: &SessionRecord,
    feedback: &feedback::Feedback,
) -> Option<String> {
    let ceiling = |origin: &Option<switchboard_store::Origin>| {
        origin.as_ref().and_then(|origin| origin.ceiling.clone())
    };
    let bound = ceiling(&trigger.origin);
    if bound.is_some() && bound != ceiling(&record.launch.origin) {
        return Some(format!(
            "the trigger was made under a ceiling, and the session that made branch {} is not under it",
            feedback.branch
        ));
    }
    let worktree = record.launch.worktree.as_ref()?;
    let Some(sha) = &feedback.sha else {
        return Some(format!("the event names no commit on branch {}", feedback.branch));
    };
    let args = ["merge-base", "--is-ancestor", sha.as_str(), worktree.branch.as_str()];
    match crate::git::git(&worktree.repo, &args).await {
        Ok(_) => None,
        Err(_) => Some(format!(
            "commit {} is not on branch {} here (a fork's branch of the same name, or not this session's work)",
            &sha[..12.min(sha.len())],
            feedback.branch
        )),
    }
}

/// The create request of a trigger's run: its task with the filled prompt, linked to it,
/// started as its creator.
fn trigger_request(trigger: &Trigger, run: &QueuedRun) -> CreateSession {
    let mut request = trigger.task.clone().unwrap_or_else(|| CreateSession::new("/"));
    request.prompt = Some(run.prompt.clone());
    request.launch.run = Some(switchboard_store::RunOf {
        kind: switchboard_store::RunKind::Trigger,
        name: trigger.name.clone(),
        due_ms: None,
        delivery: run.delivery.clone(),
    });
    if trigger.max_window_utilization.is_some() {
        request.launch.max_window_utilization = trigger.max_window_utilization;
    }
    request.origin = trigger.origin.clone().map(|origin| switchboard_store::Origin {
        face: switchboard_store::Face::Trigger,
        ..origin
    });
    request.started_by = Some(switchboard_session::Sender::new(
        format!("trigger {}, {}", trigger.name, trigger.created_by),
        Some(switchboard_session::TurnOrigin::Trigger),
    ));
    request
}
