//! A scripted fake of the Anthropic Messages API that the real Claude Code CLI accepts.
//!
//! Point a CLI at it with `ANTHROPIC_BASE_URL` (and any `ANTHROPIC_API_KEY`) and it streams
//! the replies a [`Scenario`] scripts: text, thinking, tool calls, HTTP errors, held streams.
//! The CLI then runs for real: it calls its tools and asks its permissions. Switchboard uses it
//! for its own tests (through `switchboard-testkit`), for `switchboard demo`, and serves it to
//! users' integration tests as `switchboard fake-api --script FILE`.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use switchboard_fake_api::{FakeApi, Reply, Scenario};
//!
//! let api = FakeApi::start(Scenario::new().reply(Reply::text("Hello."))).await?;
//! println!("ANTHROPIC_BASE_URL={}", api.base_url());
//! # Ok(()) }
//! ```

pub mod scenario;
pub mod server;

pub use scenario::{Block, HttpError, Reply, Scenario, ToolUse, When};
pub use server::{FakeApi, RecordedRequest, RequestKind};
