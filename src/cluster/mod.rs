//! Cluster mode above the engine (`--store postgres`, PROTOCOL.md §16): the cluster has
//! `P` partitions (`--partitions`), a queue belongs to one (`route.rs`), and each is held
//! by one node at a time, which runs an engine for it (`node.rs`, as the store's balancer
//! hands partitions over). Every node serves every client: the [`Router`] (`router.rs`,
//! `dispatch.rs`) runs a request on this node's engine for its partition or forwards it
//! over the peer protocol to the node holding it, and `spread.rs` / `merge.rs` serve what
//! concerns several partitions.
//!
//! - `proto.rs`: the peer messages, each a JSON value in a length-delimited frame, and
//!   their bounds; `link.rs`: a node's multiplexed connection to another (each request
//!   has an id, answers come back in any order); `serve.rs`: the `--peer-listen` side,
//!   which runs what peers send on the engine of the partition each request names, under
//!   this node's connection ids, and treats whatever a dropped peer connection carried as
//!   closed; `check.rs`: the bounds applied again to what a peer sends.
//! - `relay.rs`: hands the letters each held partition's engine wrote for other
//!   partitions (a workflow's jobs in their queues, and their ends coming back) to those
//!   partitions' engines.
//! - On one node (fjall, sled) the Router is the engine's handle itself.
//!
//! The engine knows nothing of this module.

pub mod check;
mod dispatch;
mod feed;
pub mod link;
mod merge;
pub mod node;
pub mod proto;
pub mod relay;
#[cfg(test)]
mod relay_tests;
pub mod route;
pub mod router;
pub mod serve;
mod spread;
#[cfg(test)]
mod spread_tests;

pub use router::{Holding, Locator, Role, Router};
pub use serve::{serve_peers, PeerServerConfig};
