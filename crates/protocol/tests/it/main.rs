//! Integration tests of the protocol crate: the real CLI's transcripts, codec properties, and
//! the messages we build.

mod built;
mod codec_props;
mod drift;
mod fixtures;
