//! The wire protocol: line framing (codec), command parsing and reply encoding.
//! Nothing here knows about job states or storage.

pub mod admin;
pub mod codec;
pub mod command;
pub mod cron;
pub mod faktory;
pub mod hello;
pub mod reply;
mod words;
pub mod workflow;

pub use codec::{Frame, LineCodec};
pub use command::{parse_command, Command, DeadCmd, QueueCmd};
pub use reply::Reply;
