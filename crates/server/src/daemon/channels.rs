//! Where a session's notices go and how a person answers them: channels and routes checked
//! against the notify file, one-tap approval links, and a test push.

use super::*;

impl Daemon {
    /// Whether `name` is a channel a route may name: the notify file's, or `web-push`.
    pub(super) fn known_channel(&self, name: &str) -> bool {
        name == crate::notify::WEB_PUSH
            || self.notifier.channels().iter().any(|channel| {
                channel.name == name && channel.kind != crate::notify::ChannelKind::WebPush
            })
    }

    /// `route` without the names that are not channels (each said in the log).
    pub(super) fn known_route(
        &self,
        mut route: switchboard_session::NotifyRoute,
    ) -> switchboard_session::NotifyRoute {
        let known = |name: &String| {
            let known = self.known_channel(name);
            if !known {
                tracing::warn!(channel = %name, "a route names a channel that is no more: left out");
            }
            known
        };
        if let Some(channels) = &mut route.channels {
            channels.retain(known);
        }
        route.escalate.retain(|step| known(&step.channel));
        route
    }

    /// A route names only channels there are: the notify file's, or `web-push`.
    pub(super) fn check_route(
        &self,
        route: &switchboard_session::NotifyRoute,
    ) -> Result<(), DaemonError> {
        route.check().map_err(DaemonError::Invalid)?;
        let known = |name: &str| self.known_channel(name);
        let named =
            route.channels.iter().flatten().chain(route.escalate.iter().map(|step| &step.channel));
        for name in named {
            if !known(name) {
                return Err(DaemonError::Invalid(format!(
                    "notify: there is no channel {name:?} (the notify file's channels, or {:?} for the browsers subscribed to Web Push)",
                    crate::notify::WEB_PUSH
                )));
            }
        }
        Ok(())
    }

    /// Sends a test notice to the push subscription `id`; whether there is one.
    pub fn push_test(&self, id: &str) -> bool {
        let Some(subscription) =
            self.notifier.push_subscriptions().into_iter().find(|found| found.id == id)
        else {
            return false;
        };
        let key = format!("test:{}", switchboard_transport::random::random_hex(8));
        let notice = crate::notify::Notice {
            topic: crate::notify::Topic::Test,
            key: key.clone(),
            body: json!({
                "id": key, "event": "test", "ts_ms": switchboard_store::now_ms(),
                "session": {"id": null}, "title": "Switchboard",
                "text": format!("Notifications reach {}.", if subscription.name.is_empty() { "this device" } else { subscription.name.as_str() }),
            }),
            request: None,
        };
        let channel = subscription.channel();
        self.notifier.queue(&notice, |candidate| candidate.name == channel, |_| None);
        true
    }

    /// What signs approval links.
    pub fn link_key(&self) -> &crate::links::LinkKey {
        &self.link_key
    }

    /// The one-tap link to `pending` (a request of session `id`) for `channel`: a full URL
    /// with the daemon's public address, else its path. It expires when the request would
    /// time out. `None` where the ids are too long for a link (see [`crate::links::LinkKey::sign`]).
    pub fn approval_link(
        &self,
        id: &str,
        pending: &PendingPermission,
        channel: &str,
    ) -> Option<String> {
        let claim = crate::links::LinkClaim {
            session: id.to_owned(),
            request: pending.request_id.clone(),
            expires_ms: pending.expires_ms(),
            channel: channel.to_owned(),
        };
        let base = self.config.links.public_url.as_deref().unwrap_or("");
        Some(format!("{base}/a/{}", self.link_key.sign(&claim)?))
    }
}
