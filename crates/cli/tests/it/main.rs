//! Integration tests of the `switchboard` binary.

mod acp;
mod audit;
mod claude;
mod decode;
mod demo;
mod fleet;
mod hooks;
mod install;
mod matrix;
mod pair;
mod parked;
mod policy;
mod run;
mod schedule;
mod search;
mod serve;
mod soak;
mod tidy;
mod traces;
mod unsettled;

/// An HTTP client whose every request has a deadline: a daemon that stops answering fails the
/// test in minutes rather than hanging it.
pub(crate) fn http_client() -> reqwest::Client {
    reqwest::Client::builder().timeout(std::time::Duration::from_secs(120)).build().unwrap()
}
