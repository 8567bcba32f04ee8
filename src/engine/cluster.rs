//! CLUSTER: which nodes serve which partitions. A store shared by several nodes
//! (PostgreSQL) answers from its tables on a thread of its own, and the reply goes straight
//! to the asker (a read: nothing to make durable); an embedded store's node is the whole
//! cluster, answered here.

use super::*;
use crate::store::{ClusterNode, ClusterState};

impl Engine {
    /// The answer at once (this node is the cluster), or `None` once `reply` is handed to
    /// the store's cluster view.
    pub(super) fn cluster(
        &self,
        reply: oneshot::Sender<Answered>,
    ) -> Option<(oneshot::Sender<Answered>, Answer)> {
        let Some(view) = self.store.cluster_view() else {
            return Some((reply, Answer::Cluster(Box::new(self.local_cluster()))));
        };
        view.read(Box::new(move |r| {
            let _ = reply.send(match r {
                Ok(state) => Ok(Answer::Cluster(Box::new(state))),
                Err(e) => {
                    let code = match e {
                        crate::store::StoreError::Unavailable(_) => ErrorCode::BackendUnavailable,
                        _ => ErrorCode::BackendError,
                    };
                    Err(OjsError::new(
                        code,
                        format!("cannot read the cluster's state: {e}"),
                    ))
                }
            });
        }));
        None
    }

    /// One node holding every partition (of which an embedded store has one).
    fn local_cluster(&self) -> ClusterState {
        let now = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        ClusterState {
            store: self.store.name(),
            partitions: 1,
            nodes: vec![ClusterNode {
                peer_addr: None,
                id: self.cfg.node_id.clone(),
                addr: self.cfg.node_addr.clone(),
                partitions: vec![0],
                epoch: None,
                lease_until: None,
                heartbeat_at: Some(now),
                role: "active",
                local: true,
            }],
            unowned: vec![],
        }
    }
}
