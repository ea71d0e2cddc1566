//! Sessions against the real Claude Code CLI (2.1.330 and 2.1.37) talking to the scripted fake
//! Anthropic API, and against `fake-claude` for failure paths.

mod fake;
mod harness;
mod real;
mod warm;
