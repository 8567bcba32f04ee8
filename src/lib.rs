//! ojsd: a durable background-job broker implementing the Open Job Spec over a
//! Faktory-style line protocol. Data flows one way: socket → codec → command → engine
//! (channel) → store commit → reply.

pub mod auth;
pub mod cli;
pub mod cluster;
pub mod config_file;
pub mod cron;
pub mod engine;
pub mod error;
pub mod events;
pub mod http;
pub mod job;
pub mod json;
pub mod listen;
pub mod protocol;
pub mod server;
pub mod store;
pub mod time;
pub mod tls;
pub mod wire;
pub mod workflow;

#[cfg(test)]
mod engine_extremes_tests;
