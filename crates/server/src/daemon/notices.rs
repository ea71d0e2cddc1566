//! What a stored event tells the notifier: permission requests, questions, a turn's end
//! (a [`TurnEnd`] the projection read), and the warnings and escalations that come later.
//!
//! Requests and unasked exits are read from the events; a turn's end from the one
//! projection's `TurnEnded`, which knows an interrupt from a failure. Escalation and the
//! before-timeout warning are timers (`later`) holding the daemon weakly: when one fires, the
//! notice is queued only if the request still waits.

use super::*;

/// Queues a notice for each event of `batch` (stored after `before`) a person may want to
/// hear of: a permission request or a question (with its link), a turn's end (`turn_ends`,
/// the projection's reading of the batch; an interrupted turn is the person's own doing and
/// is not told), a CLI that ended unasked.
pub(super) fn notify(
    daemon: &Arc<Daemon>,
    notifier: &crate::notify::Notifier,
    id: &str,
    live: &LiveSession,
    batch: &[SessionEvent],
    turn_ends: &[TurnEnd],
    before: u64,
) {
    use crate::notify::Topic;
    let (title, cwd) = {
        let record = live.record.lock();
        (record.title.clone().unwrap_or_default(), record.cwd.clone())
    };
    let session = json!({"id": id, "title": title, "cwd": cwd});
    let name = if title.is_empty() { id.to_owned() } else { title.clone() };
    // What to tell, by its place in the batch: turns' ends as the projection read them, then
    // requests and unasked exits from the events themselves.
    // A turn that ended on a parked request is not done: the request is told of instead.
    let parked = live.projector.lock().view().pending_permissions.iter().any(is_parked);
    let mut notices: Vec<(usize, Told)> = turn_ends
        .iter()
        .filter(|turn| !turn.interrupted && !parked)
        .map(|turn| {
            let text = turn.result.clone().filter(|text| !text.is_empty());
            let text = text.unwrap_or_else(|| turn.subtype.clone()).chars().take(500).collect();
            let (topic, title) = if turn.failed {
                (Topic::SessionFailed, format!("Failed: {name}"))
            } else {
                (Topic::SessionFinished, format!("Done: {name}"))
            };
            let extra = json!({"result": {"subtype": turn.subtype, "is_error": turn.failed}});
            let key = format!("{id}:{}", before + 1 + turn.index as u64);
            (turn.index, Told { topic, key, title, text, request: None, extra })
        })
        .collect();
    for (index, (event, seq)) in batch.iter().zip(before + 1..).enumerate() {
        match event {
            SessionEvent::PermissionRequested(pending) => {
                // An MCP server's question (elicitation) is a question too.
                let elicitation = pending.tool_name == switchboard_session::ELICITATION_TOOL;
                let question = pending.tool_name == "AskUserQuestion" || elicitation;
                let topic = if question { Topic::Question } else { Topic::PermissionRequested };
                // Parked: told again, with links that last while it waits.
                let parked = pending.parked_at_ms.is_some();
                let title = if parked {
                    format!(
                        "Parked: {} waits for approval with no process, in {name}",
                        pending.tool_name
                    )
                } else if elicitation {
                    let server = pending.input["server"].as_str().unwrap_or("An MCP server");
                    format!("{} asks, in {name}", crate::text::collapsed(server))
                } else if question {
                    format!("Claude asks, in {name}")
                } else {
                    format!("{} wants approval, in {name}", pending.tool_name)
                };
                let (input, cut) = crate::notify::bounded_input(&pending.input);
                let expires_ms = pending.expires_ms();
                let extra = json!({
                    "request": {
                        "request_id": pending.request_id, "tool_name": pending.tool_name,
                        "input": input, "input_truncated": cut, "reason": pending.reason,
                        "started_by": pending.started_by, "asked_at_ms": pending.asked_at_ms,
                        "expires_ms": expires_ms,
                    },
                    "hints": pending.hints,
                    // One tap approves only what the notice shows whole, and nothing Claude
                    // Code says a person must look at in the session or must not approve with
                    // one stray touch.
                    "one_tap": !pending.hints.person_only
                        && !pending.hints.default_to_no
                        && crate::notify::one_tap(&pending.tool_name, &pending.input),
                });
                // The timers keep the request's ids, not its input (up to a line's size).
                let mut request = pending.clone();
                request.input = Value::Null;
                let told = Told {
                    topic,
                    key: if parked {
                        format!("{id}:{}:parked", pending.request_id)
                    } else {
                        format!("{id}:{}", pending.request_id)
                    },
                    title,
                    text: crate::notify::summary(&pending.tool_name, &pending.input),
                    request: Some(request),
                    extra,
                };
                notices.push((index, told));
            }
            SessionEvent::Exited { requested: false, code, description, .. }
                if *code != Some(0) =>
            {
                let told = Told {
                    topic: Topic::SessionFailed,
                    key: format!("{id}:{seq}"),
                    title: format!("Ended: {name}"),
                    text: description.clone(),
                    request: None,
                    extra: json!({"exit": {"code": code, "description": description}}),
                };
                notices.push((index, told));
            }
            _ => {}
        }
    }
    notices.sort_by_key(|(index, _)| *index);
    let route = live.route();
    for (_, told) in notices {
        tell(daemon, notifier, id, &session, &route, told);
    }
}

/// A notice before its body is made.
pub(super) struct Told {
    pub(super) topic: crate::notify::Topic,
    pub(super) key: String,
    pub(super) title: String,
    pub(super) text: String,
    pub(super) request: Option<PendingPermission>,
    pub(super) extra: Value,
}

/// Queues `told` for the channels that hear of it at once; for a request, starts the timers of
/// the channels that hear of it later, and of the warning before it times out.
pub(super) fn tell(
    daemon: &Arc<Daemon>,
    notifier: &crate::notify::Notifier,
    id: &str,
    session: &Value,
    route: &switchboard_session::NotifyRoute,
    told: Told,
) {
    use crate::notify::{Notice, Topic};
    let Told { topic, key, title, text, request, extra } = told;
    let mut body = json!({
        "id": key, "event": topic.as_str(), "ts_ms": switchboard_store::now_ms(),
        "session": session, "title": title, "text": text,
    });
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    let notice = Notice { topic, key, body, request: request.clone() };
    let link = |channel: &str| {
        request.as_ref().and_then(|pending| daemon.approval_link(id, pending, channel))
    };
    notifier.queue(&notice, |channel| channel.hears(topic, route) == Some(None), link);
    let Some(pending) = request.as_ref().filter(|pending| pending.parked_at_ms.is_none()) else {
        return;
    };
    // Escalation: channels that hear of a request only if it still waits after a while (a
    // link of the chain after the request times out is never reached: no timer).
    let timeout = Duration::from_secs(pending.timeout_secs);
    let warn = pending.timeout_secs - (pending.timeout_secs / 2).min(60);
    let mut told = Vec::new();
    for channel in notifier.channels().iter() {
        match channel.hears(topic, route) {
            Some(None) => told.push(channel.name.clone()),
            Some(Some(after)) if pending.timeout_secs == 0 || after < timeout => {
                if after.as_secs() <= warn {
                    told.push(channel.name.clone());
                }
                let name = channel.name.clone();
                let pick = move |channel: &crate::notify::ChannelConfig| channel.name == name;
                later(daemon, id, pending, after, notice.clone(), pick);
            }
            _ => {}
        }
    }
    // Shortly before it times out, the channels told of it by then (not a later link of the
    // chain, nor a channel that came after it was asked).
    if pending.timeout_secs > 0 {
        let mut expiring = notice.clone();
        expiring.topic = Topic::RequestExpiring;
        expiring.key = format!("{}:expiring", notice.key);
        expiring.body["id"] = json!(expiring.key);
        expiring.body["event"] = json!(Topic::RequestExpiring.as_str());
        expiring.body["title"] =
            json!(format!("Expires soon: {}", notice.body["title"].as_str().unwrap_or("")));
        let told = move |channel: &crate::notify::ChannelConfig| told.contains(&channel.name);
        later(daemon, id, pending, Duration::from_secs(warn), expiring, told);
    }
}

/// Queues `notice` for the channels `pick` chooses `after` the request `pending` was asked,
/// if it still waits then.
pub(super) fn later(
    daemon: &Arc<Daemon>,
    id: &str,
    pending: &PendingPermission,
    after: Duration,
    notice: crate::notify::Notice,
    pick: impl Fn(&crate::notify::ChannelConfig) -> bool + Send + 'static,
) {
    let (daemon, id, pending) = (Arc::downgrade(daemon), id.to_owned(), pending.clone());
    let due =
        pending.asked_at_ms.saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX));
    let wait = Duration::from_millis(due.saturating_sub(switchboard_store::now_ms()));
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        let Some(daemon) = daemon.upgrade() else { return };
        let waiting = daemon
            .waiting_in(&id)
            .await
            .unwrap_or_default()
            .iter()
            // (A parked request does not expire, nor is it escalated again.)
            .any(|still| still.request_id == pending.request_id && still.parked_at_ms.is_none());
        if waiting {
            let mut notice = notice;
            notice.body["ts_ms"] = json!(switchboard_store::now_ms());
            let link = |channel: &str| daemon.approval_link(&id, &pending, channel);
            daemon.notifier.queue(&notice, pick, link);
        }
    });
}

/// An after-store observer ([`super::observers`]): what a person may want to hear of goes to
/// the notifier.
pub(super) struct Notices;

impl Observer for Notices {
    fn stored<'a>(&'a self, daemon: &'a Arc<Daemon>, s: &'a Stored<'a>) -> Option<Waiting<'a>> {
        if !daemon.notifier.is_idle() {
            notify(daemon, &daemon.notifier, s.id, s.live, s.batch, s.turn_ends, s.before);
        }
        None
    }
}
