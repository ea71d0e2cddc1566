//! Integration tests of the `switchboard` binary.

mod decode;
mod run;
mod serve;
mod tidy;
