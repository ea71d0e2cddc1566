//! The agents-ui relay's side of the daemon: sessions for CLIs that connect on their own, the
//! frontends' feed, the ingress slots, and a relay CLI's rotation to another Claude session.

use super::*;

impl Daemon {
    /// A session for a CLI that connected on its own (the agents-ui relay protocol's relay endpoint): no process is
    /// started; the session ends when its socket closes. Returns its record and the slot the
    /// connection must use.
    pub async fn attach_external(
        self: &Arc<Self>,
    ) -> Result<(SessionRecord, Arc<switchboard_transport::sdk_url::IngressSlot>), DaemonError>
    {
        self.check_serving()?;
        let _admitted = self.admit_run()?;
        self.relay_may_make_session().map_err(DaemonError::Busy)?;
        let id = uuid::Uuid::new_v4().to_string();
        let record = SessionRecord {
            title: Some("external CLI (relay)".into()),
            ..self.new_record(
                &id,
                Launch { transport: Some(TransportKind::Relay), ..Launch::default() },
            )
        };
        let policy = self.config.default_policy.clone().unwrap_or_default();
        let config_policy = policy.clone();
        // Where the CLI runs is not known yet: the session learns it from the CLI's lines
        // (its rules are resolved against that, not against the daemon's own cwd).
        let config = SessionConfig::new(PathBuf::new(), policy);
        let (link, slot) = switchboard_transport::sdk_url::external(&id);
        let (handle, events) = switchboard_session::spawn_session_on(config, link);
        self.store.create_session(&record).await?;
        self.tell_created(&record);
        self.audit_started(&id, false).await;
        let route = self.known_route(route_of(&config_policy, &record));
        self.run(record.clone(), handle, events, 0, None, route).await?;
        Ok((record, slot))
    }

    /// Whether a relay CLI may make one more session now (a connection, or a rotation to a
    /// Claude session its connection has not had): at most
    /// [`crate::relay_limits::RELAY_NEW_SESSIONS_PER_MINUTE`], daemon-wide.
    pub(super) fn relay_may_make_session(&self) -> Result<(), String> {
        let most = self
            .config
            .placement
            .relay_sessions_per_minute
            .unwrap_or(crate::relay_limits::RELAY_NEW_SESSIONS_PER_MINUTE);
        let mut births = self.relay_births.lock();
        if births.take(most) {
            Ok(())
        } else {
            Err(format!(
                "relay CLIs made {most} sessions in the last minute (RELAY_NEW_SESSIONS_PER_MINUTE); try again later"
            ))
        }
    }

    /// The relay's token for externally launched CLIs (`None`: no auth).
    pub fn ingress_token(&self) -> Option<&str> {
        self.config.ingress_token.as_deref()
    }

    /// Sends a line to every relay frontend, waiting while the slowest of them has
    /// [`RELAY_BUFFER`] lines it has not taken yet (no frontend loses a line; a frontend that
    /// stays stuck is dropped after [`STALL_LIMIT`]).
    pub async fn relay_publish(&self, line: &str) {
        // With no frontend listening the line goes nowhere: not even copied.
        if self.relay.receiver_count() == 0 {
            return;
        }
        let _ = self.relay.broadcast_direct(axum::extract::ws::Utf8Bytes::from(line)).await;
    }

    /// The relay feed for one frontend: every line published from now on.
    pub fn relay_subscribe(&self) -> async_broadcast::Receiver<axum::extract::ws::Utf8Bytes> {
        self.relay_frontends.activate_cloned()
    }

    /// Makes `id` the relay session frontends talk to (or none).
    pub fn set_relay_current(&self, id: Option<String>) {
        *self.relay_current.lock() = id;
    }

    /// The handle of the relay session frontends talk to.
    pub fn relay_handle(&self) -> Option<(String, SessionHandle)> {
        let current = self.relay_current.lock().clone();
        if let Some((id, handle)) =
            current.and_then(|id| self.handle(&id).ok().map(|handle| (id, handle)))
        {
            return Some((id, handle));
        }
        // The current one has ended: the newest one still running takes its place.
        self.relay_live()
            .into_iter()
            .max_by_key(|(created, ..)| *created)
            .map(|(_, id, _, handle)| (id, handle))
    }

    /// The running sessions relay frontends see (CLIs that connected at `/`, and sessions
    /// created with `relay`): their ids, Claude session ids and handles.
    pub fn relay_handles(&self) -> Vec<(String, Option<String>, SessionHandle)> {
        self.relay_live().into_iter().map(|(_, id, claude, handle)| (id, claude, handle)).collect()
    }

    /// [`Daemon::relay_handles`], with when each was created.
    pub(super) fn relay_live(&self) -> Vec<(u64, String, Option<String>, SessionHandle)> {
        let live: Vec<Arc<LiveSession>> = self.sessions.lock().values().cloned().collect();
        live.into_iter()
            .filter_map(|live| {
                let (relayed, created, id, claude_session_id) = {
                    let record = live.record.lock();
                    let relayed = record.launch.relayed();
                    (
                        relayed,
                        record.created_ms,
                        record.id.clone(),
                        record.claude_session_id.clone(),
                    )
                };
                let handle = live.handle()?;
                relayed.then_some((created, id, claude_session_id, handle))
            })
            .collect()
    }

    /// The `--sdk-url` slot with this id, while its session accepts connections.
    pub fn ingress_slot(
        &self,
        slot_id: &str,
    ) -> Option<Arc<switchboard_transport::sdk_url::IngressSlot>> {
        let mut slots = self.ingress.lock();
        slots.retain(|_, slot| !slot.is_closed());
        slots.get(slot_id).cloned()
    }

    /// Every open `--sdk-url` slot (operators and tests).
    pub fn ingress_slots(&self) -> Vec<Arc<switchboard_transport::sdk_url::IngressSlot>> {
        self.ingress.lock().values().filter(|slot| !slot.is_closed()).cloned().collect()
    }

    /// The agents-ui relay protocol's rotation: the relay session `id` (whose last seq is `seq`) ends with a
    /// `rotated` event, and its CLI's handle moves to the session for `claude_session_id` —
    /// the one this connection had for it (`seen`) or a new one. Returns that session and its
    /// last seq.
    pub(super) async fn rotate(
        self: &Arc<Self>,
        id: &str,
        live: &Arc<LiveSession>,
        seq: u64,
        claude_session_id: &str,
        seen: &mut HashMap<String, String>,
    ) -> Result<(String, Arc<LiveSession>, u64, u64), DaemonError> {
        let writing = self.record_writes.lock().await;
        let mut old = current_record(live);
        if let Some(previous) = &old.claude_session_id {
            seen.insert(previous.clone(), id.to_owned());
        }
        let (next_id, existing) = match seen.get(claude_session_id) {
            Some(next_id) => (next_id.clone(), true),
            None => (uuid::Uuid::new_v4().to_string(), false),
        };
        // The old session ends, saying where its CLI went.
        let payload = json!({
            "event": "rotated", "claude_session_id": claude_session_id, "to": next_id,
        });
        let rotated = event_record(id, seq + 1, "switchboard", "rotated", payload.to_string());
        self.store.append(std::slice::from_ref(&rotated)).await?;
        if let Some(tail) = live.tail() {
            let _ = tail.send(Arc::new(rotated));
        }
        // Ended as soon as its log says so, whatever befalls the rest of the rotation.
        self.audit_ended(id, format!("its relay CLI moved on to session {next_id}")).await;
        super::view_checkpoints::run_ended(self, id, seq + 1);
        let state = std::mem::replace(&mut old.state, RecordState::Exited);
        old.updated_ms = now_ms();
        *live.record.lock() = old.clone();
        let handle = live.hand_over()?;
        // Written now, under the lock already held (not queued): the connection may come
        // back to this session at once, and then reads its record from the store.
        live.record_dirty.store(false, std::sync::atomic::Ordering::SeqCst);
        let old_stored = match self.store.update_session(&old).await {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(session = %id, %error, "cannot store the rotated session's record");
                false
            }
        };
        self.announce(&old);

        // The new one carries on.
        let now = now_ms();
        let (record, last) = if existing {
            let mut record = self
                .store
                .get_session(&next_id)
                .await?
                .ok_or_else(|| DaemonError::NotFound(next_id.clone()))?;
            record.state = state;
            record.updated_ms = now;
            self.store.update_session(&record).await?;
            let last = self.store.last_seq(&next_id).await?;
            self.audit_started(&next_id, true).await;
            (record, last)
        } else {
            let record = SessionRecord {
                archived: false,
                node: self.config.node.clone(),
                id: next_id.clone(),
                claude_session_id: Some(claude_session_id.to_owned()),
                state,
                cost_usd: 0.0,
                // A new session has spent nothing yet.
                spent_usd: 0.0,
                created_ms: now,
                updated_ms: now,
                ..old
            };
            self.store.create_session(&record).await?;
            self.tell_created(&record);
            self.audit_started(&next_id, false).await;
            (record, 0)
        };
        let (next, number) = self.go_live(record.clone(), handle)?;
        // The same CLI goes on: its next result's cost is a step from its last total (or from
        // zero, after the `/clear` that moved it on).
        let cost = live.projector.lock().cost();
        next.projector.lock().continue_with_cost(cost);
        drop(writing);
        {
            let mut current = self.relay_current.lock();
            if current.as_deref() == Some(id) {
                *current = Some(next_id.clone());
            }
        }
        if existing {
            self.record_changed(&next);
        }
        self.started.notify_waiters();
        if old_stored {
            self.forget_if_finished(id, live);
        }
        Ok((next_id, next, number, last))
    }
}

/// An after-store observer ([`super::observers`]): a relay session's CLI lines go to the
/// relay's frontends, which may make the pump wait for the slowest of them (none skips a line).
pub(super) struct RelayFrontends;

impl Observer for RelayFrontends {
    fn stored<'a>(&'a self, daemon: &'a Arc<Daemon>, s: &'a Stored<'a>) -> Option<Waiting<'a>> {
        if !s.relayed {
            return None;
        }
        Some(Box::pin(async move {
            for event in s.batch {
                if let SessionEvent::Line(line) = event {
                    if line.direction == LineDirection::FromCli {
                        daemon.relay_publish(&line.raw).await;
                    }
                }
            }
        }))
    }
}
