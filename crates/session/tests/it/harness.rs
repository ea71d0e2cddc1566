//! A session under test: the fake API, a sandbox, the session, and its event log.

use std::time::Duration;

use switchboard_protocol::{Message, ResultMessage};
use switchboard_session::{
    spawn_session, LineDirection, PendingPermission, Policy, SessionConfig, SessionEvent,
    SessionEvents, SessionHandle,
};
use switchboard_testkit::{real_cli, CliSandbox, CliVersion, FakeApi, Scenario};

/// How long any one wait may take before the test fails (generous: CI has 2 cores).
pub(crate) const WAIT: Duration = Duration::from_secs(90);

pub(crate) struct Harness {
    pub(crate) api: FakeApi,
    pub(crate) sandbox: CliSandbox,
    pub(crate) handle: SessionHandle,
    events: SessionEvents,
    /// Every event seen so far.
    pub(crate) log: Vec<SessionEvent>,
    /// How far `until` has looked.
    cursor: usize,
}

/// Changes the session's config before it starts.
pub(crate) type Configure = Box<dyn FnOnce(&mut SessionConfig, &CliSandbox)>;

pub(crate) struct Options {
    pub(crate) policy: String,
    pub(crate) configure: Configure,
    /// Reuse a sandbox (its HOME holds earlier sessions' transcripts, for resume).
    pub(crate) sandbox: Option<CliSandbox>,
}

impl Default for Options {
    fn default() -> Self {
        Options { policy: String::new(), configure: Box::new(|_, _| {}), sandbox: None }
    }
}

impl Harness {
    pub(crate) async fn start(version: CliVersion, scenario: Scenario, policy: &str) -> Harness {
        Self::start_with(
            version,
            scenario,
            Options { policy: policy.to_owned(), ..Options::default() },
        )
        .await
    }

    pub(crate) async fn start_with(
        version: CliVersion,
        scenario: Scenario,
        options: Options,
    ) -> Harness {
        let api = FakeApi::start(scenario).await.unwrap();
        let sandbox = options.sandbox.unwrap_or_else(|| CliSandbox::new().unwrap());
        let mut config =
            SessionConfig::new(sandbox.workdir(), Policy::from_toml(&options.policy).unwrap());
        config.cli.program = Some(real_cli(version));
        config.cli.clear_env = true;
        config.cli.env = sandbox.env(&api.base_url());
        config.control_timeout = Duration::from_secs(30);
        (options.configure)(&mut config, &sandbox);
        let (handle, events) = spawn_session(config).unwrap();
        Harness { api, sandbox, handle, events, log: Vec::new(), cursor: 0 }
    }

    /// A harness around a session started elsewhere (on a warm CLI, say).
    pub(crate) fn around(
        api: FakeApi,
        sandbox: CliSandbox,
        handle: SessionHandle,
        events: SessionEvents,
    ) -> Harness {
        Harness { api, sandbox, handle, events, log: Vec::new(), cursor: 0 }
    }

    /// Waits for the next event (after those already looked at) that satisfies `predicate`.
    pub(crate) async fn until(
        &mut self,
        what: &str,
        predicate: impl Fn(&SessionEvent) -> bool,
    ) -> SessionEvent {
        // One deadline for the whole wait, not one per event: a session that keeps talking
        // without ever doing what is waited for fails too.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            while self.cursor < self.log.len() {
                let event = &self.log[self.cursor];
                self.cursor += 1;
                if predicate(event) {
                    return event.clone();
                }
            }
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(event)) => self.log.push(event),
                Ok(None) => panic!(
                    "the session ended while waiting for {what}; events:\n{}",
                    self.describe()
                ),
                Err(_) => panic!("timed out waiting for {what}; events:\n{}", self.describe()),
            }
        }
    }

    /// Waits for the next result.
    pub(crate) async fn until_result(&mut self) -> ResultMessage {
        let event = self
            .until("a result", |event| matches!(from_cli(event), Some(Message::Result(_))))
            .await;
        match from_cli(&event) {
            Some(Message::Result(result)) => (**result).clone(),
            _ => unreachable!(),
        }
    }

    /// Waits for the next permission request that needs a person.
    pub(crate) async fn until_permission(&mut self) -> PendingPermission {
        match self
            .until("a permission request", |event| {
                matches!(event, SessionEvent::PermissionRequested(_))
            })
            .await
        {
            SessionEvent::PermissionRequested(pending) => pending,
            _ => unreachable!(),
        }
    }

    /// Shuts the session down and collects the remaining events.
    pub(crate) async fn finish(&mut self) {
        self.handle.shutdown(Duration::from_secs(5)).await.unwrap();
        while let Ok(Some(event)) = tokio::time::timeout(WAIT, self.events.recv()).await {
            self.log.push(event);
        }
        self.check_the_projection_reads_back();
    }

    /// What clients are sent of this session (every update of its projection, and its view)
    /// reads back as the same typed values: the CLI client and other programs deserialize
    /// what the daemon serializes.
    fn check_the_projection_reads_back(&self) {
        let mut projector = switchboard_session::Projector::new();
        for event in &self.log {
            for update in projector.updates(event) {
                let text = serde_json::to_string(&update).unwrap();
                let back: switchboard_session::projection::Update =
                    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{error}: {text}"));
                assert_eq!(back, update, "{text}");
            }
        }
        let view = projector.view();
        let text = serde_json::to_string(view).unwrap();
        let back: switchboard_session::projection::View = serde_json::from_str(&text).unwrap();
        assert_eq!(&back, view, "{text}");
    }

    /// How many events satisfy `predicate`.
    pub(crate) fn count(&self, predicate: impl Fn(&SessionEvent) -> bool) -> usize {
        self.log.iter().filter(|event| predicate(event)).count()
    }

    pub(crate) fn describe(&self) -> String {
        self.log
            .iter()
            .map(|event| match event {
                SessionEvent::Line(line) => {
                    format!("  {:?} {}", line.direction, truncate(&line.raw, 300))
                }
                other => format!("  {}", truncate(&other.to_json().to_string(), 300)),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn truncate(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

/// The message of a line event from the CLI.
pub(crate) fn from_cli(event: &SessionEvent) -> Option<&Message> {
    match event {
        SessionEvent::Line(line) if line.direction == LineDirection::FromCli => Some(&line.message),
        _ => None,
    }
}

/// Declares one test per CLI version: `both!(name, |version| async move { ... })`.
#[macro_export]
macro_rules! both {
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn v2_1_330() {
                ($body)(switchboard_testkit::CliVersion::V2_1_330).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn v2_1_37() {
                ($body)(switchboard_testkit::CliVersion::V2_1_37).await;
            }
        }
    };
}
