//! Cluster mode above the engine: routing a front end's requests to the engine of the node
//! that holds the partition, and the peer protocol that carries them (PROTOCOL.md §15).
//!
//! - [`Router`] (`router.rs`) is what every front end holds: the `EngineHandle` surface.
//!   On one node (fjall, sled) it is the engine's handle itself; with `--store postgres`
//!   it runs requests on this node's engine once the node holds the partition, and
//!   forwards them to the holder until then.
//! - `check.rs`: the bounds the holder applies again to what a peer sends.
//! - `proto.rs`: the messages, each a JSON value in a length-delimited frame, and their
//!   bounds; `link.rs`: a node's connection to the holder (one, multiplexed: each request
//!   has an id and replies come back in any order); `serve.rs`: the holder's side
//!   (`--peer-listen`), which runs what peers send on its own engine under its own
//!   connection ids, and treats whatever a dropped peer connection carried as closed.
//!
//! The engine knows nothing of this module.

pub mod check;
mod dispatch;
pub mod link;
mod merge;
pub mod node;
pub mod proto;
pub mod route;
pub mod router;
pub mod serve;
mod spread;
#[cfg(test)]
mod spread_tests;

pub use router::{Holding, Locator, Role, Router};
pub use serve::{serve_peers, PeerServerConfig};
