//! Test kit: everything tests need to run Switchboard against Claude Code without a network.
//!
//! - [`FakeApi`]: a scripted fake of the Anthropic Messages API ([`Scenario`]; the
//!   `switchboard-fake-api` crate, re-exported), so the **real** CLI runs offline and tests
//!   can assert what it sent.
//! - [`real_cli`]: the pinned real CLIs that `scripts/install-clis.sh` installs.
//! - [`CliSandbox`]: a scratch HOME and working directory with the environment that points the
//!   CLI at the fake.
//! - `fake-claude` (a binary of this crate): a fake CLI that speaks the stdio protocol from a
//!   script, for failure paths the real CLI cannot be made to produce on demand.
//! - [`servers`]: a real PostgreSQL per test, for the fleet's tests.

pub mod otlp;
pub mod sandbox;
pub mod servers;
pub mod ws_proxy;

pub use sandbox::{
    cli_cache, fake_cli, git, git_repository, pinned_versions, processes_running, real_cli,
    real_cli_of, CliSandbox, CliVersion, Sleeper,
};
pub use scenario::{Block, Reply, Scenario, When};
pub use switchboard_fake_api::{scenario, server as fake_api};
pub use switchboard_fake_api::{FakeApi, RecordedRequest, RequestKind};
pub use ws_proxy::{Flow, Welcome, WsProxy};
