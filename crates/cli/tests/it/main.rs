//! Integration tests of the `switchboard` binary.

mod claude;
mod decode;
mod demo;
mod fleet;
mod matrix;
mod run;
mod serve;
mod tidy;
