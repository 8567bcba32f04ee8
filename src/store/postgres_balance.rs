//! The balancer's decisions, apart from the database so that they can be tested alone: from
//! the routing table (`ojs_partitions ⋈ ojs_nodes`), the live nodes and what this node
//! holds, which partitions to try to take and which to ask the node to give up (see
//! `postgres_node.rs`, "The balancer").

use super::PartRoute;
use std::collections::{BTreeMap, BTreeSet};

/// A partition is not released by the balancer until this many ticks after this node took
/// it (so that a node joining or leaving does not make partitions ping-pong).
pub(super) const SETTLE_TICKS: u64 = 2;

/// What the balancer knows of a partition this node holds.
#[derive(Clone, Copy)]
pub(super) struct HeldInfo {
    /// The tick during which it was taken.
    pub(super) taken_tick: u64,
    /// The node was asked to give it up (once: until it is released).
    pub(super) release_asked: bool,
}

pub(super) struct View<'a> {
    pub(super) me: &'a str,
    pub(super) routes: &'a [PartRoute],
    /// Nodes whose heartbeat is within one lease TTL (this one counts even if missing).
    pub(super) live_nodes: &'a [String],
    pub(super) held: &'a BTreeMap<u32, HeldInfo>,
    pub(super) tick: u64,
    /// Partitions free or expired for more than two lease TTLs, as this node saw them.
    pub(super) long_unowned: &'a BTreeSet<u32>,
}

#[derive(Debug, PartialEq)]
pub(super) struct Plan {
    /// `ceil(P / live nodes)`.
    pub(super) share: usize,
    /// Taken whatever the share: unowned for too long (availability beats balance).
    pub(super) urgent: Vec<u32>,
    /// Free, expired or (stale) this node's, in the order to try them: from a
    /// node-specific offset on, so that nodes starting together try different rows first.
    pub(super) candidates: Vec<u32>,
    /// To ask the node to give up now.
    pub(super) release: Vec<u32>,
}

/// A stable hash of the node's id (FNV-1a), for its starting offset.
fn offset(me: &str, parts: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in me.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % parts.max(1) as u64) as usize
}

pub(super) fn plan(v: &View) -> Plan {
    let parts = v.routes.len();
    let mut live: BTreeSet<&str> = v.live_nodes.iter().map(String::as_str).collect();
    live.insert(v.me);
    let share = parts.div_ceil(live.len());
    let floor = parts / live.len();
    let start = offset(v.me, parts);
    let mut candidates = Vec::new();
    let mut urgent = Vec::new();
    for i in 0..parts {
        let r = &v.routes[(start + i) % parts];
        let mine = r.owner.as_deref() == Some(v.me);
        if v.held.contains_key(&r.part) || (r.live && !mine) {
            continue;
        }
        if v.long_unowned.contains(&r.part) {
            urgent.push(r.part);
        } else {
            candidates.push(r.part);
        }
    }
    // Give up partitions while another live node holds fewer than `floor`, and no free
    // partition is there for it to take: the node holding the most (the smallest id among
    // equals, so that one node moves per tick) releases down towards `floor`. So 2/2/0 of
    // four partitions on three nodes becomes 1/2/1, never a node left idle.
    let mut release = Vec::new();
    let held = v.held.len();
    if held > floor {
        let mut counts: BTreeMap<&str, usize> = live.iter().map(|n| (*n, 0)).collect();
        for r in v.routes.iter().filter(|r| r.live) {
            if let Some(c) = r.owner.as_deref().and_then(|o| counts.get_mut(o)) {
                *c += 1;
            }
        }
        counts.insert(v.me, held);
        let free = v.routes.iter().filter(|r| !r.live).count();
        let deficit: usize = counts
            .iter()
            .filter(|(n, _)| **n != v.me)
            .map(|(_, c)| floor.saturating_sub(*c))
            .sum::<usize>()
            .saturating_sub(free);
        let top = counts.values().copied().max().unwrap_or(0);
        let first_top = counts.iter().find(|(_, c)| **c == top).map(|(n, _)| *n);
        let asked = v.held.values().filter(|h| h.release_asked).count();
        let more = (held - floor).min(deficit).saturating_sub(asked);
        if first_top == Some(v.me) && more > 0 {
            release = v
                .held
                .iter()
                .rev()
                .filter(|(_, h)| !h.release_asked && v.tick >= h.taken_tick + SETTLE_TICKS)
                .map(|(p, _)| *p)
                .take(more)
                .collect();
        }
    }
    Plan {
        share,
        urgent,
        candidates,
        release,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(part: u32, owner: Option<&str>, live: bool) -> PartRoute {
        PartRoute {
            part,
            owner: owner.map(str::to_string),
            epoch: 1,
            live,
            peer_addr: None,
            client_addr: None,
        }
    }

    fn held(parts: &[u32], tick: u64) -> BTreeMap<u32, HeldInfo> {
        parts
            .iter()
            .map(|p| {
                let h = HeldInfo {
                    taken_tick: tick,
                    release_asked: false,
                };
                (*p, h)
            })
            .collect()
    }

    #[test]
    fn a_lone_node_takes_everything_and_a_new_one_gets_the_surplus() {
        let routes: Vec<_> = (0..4).map(|p| route(p, None, false)).collect();
        let none = BTreeMap::new();
        let nodes = vec!["a".to_string()];
        let empty = BTreeSet::new();
        let v = View {
            me: "a",
            routes: &routes,
            live_nodes: &nodes,
            held: &none,
            tick: 1,
            long_unowned: &empty,
        };
        let p = plan(&v);
        assert_eq!(p.share, 4);
        let mut c = p.candidates.clone();
        c.sort();
        assert_eq!(c, vec![0, 1, 2, 3]);
        assert!(p.release.is_empty() && p.urgent.is_empty());

        // "b" joins and holds nothing: "a" gives up its two highest, once they settled.
        let routes: Vec<_> = (0..4).map(|p| route(p, Some("a"), true)).collect();
        let nodes = vec!["a".to_string(), "b".to_string()];
        let mut mine = held(&[0, 1, 2, 3], 1);
        let mut v = View {
            me: "a",
            routes: &routes,
            live_nodes: &nodes,
            held: &mine,
            tick: 2,
            long_unowned: &empty,
        };
        assert!(plan(&v).release.is_empty(), "taken a tick ago: not yet");
        v.tick = 3;
        let p = plan(&v);
        assert_eq!((p.share, p.release.clone()), (2, vec![3, 2]));
        assert!(p.candidates.is_empty());
        // Asked once: not again while they are still held.
        mine.get_mut(&3).unwrap().release_asked = true;
        mine.get_mut(&2).unwrap().release_asked = true;
        let v = View {
            me: "a",
            routes: &routes,
            live_nodes: &nodes,
            held: &mine,
            tick: 4,
            long_unowned: &empty,
        };
        assert!(plan(&v).release.is_empty());
        // And "b" sees what it may take.
        let routes: Vec<_> = (0..4)
            .map(|p| route(p, (p < 2).then_some("a"), p < 2))
            .collect();
        let v = View {
            me: "b",
            routes: &routes,
            live_nodes: &nodes,
            held: &none,
            tick: 1,
            long_unowned: &empty,
        };
        let mut c = plan(&v).candidates;
        c.sort();
        assert_eq!(c, vec![2, 3]);
    }

    #[test]
    fn two_two_nothing_of_four_on_three_nodes_leaves_no_node_idle() {
        // a: 0, 1; b: 2, 3; c: nothing. share 2, floor 1: c is short of its floor.
        let routes: Vec<_> = (0..4)
            .map(|p| route(p, Some(if p < 2 { "a" } else { "b" }), true))
            .collect();
        let nodes: Vec<String> = ["a", "b", "c"].iter().map(|n| n.to_string()).collect();
        let empty = BTreeSet::new();
        let plan_of = |me: &'static str, parts: &[u32]| {
            let mine = held(parts, 0);
            plan(&View {
                me,
                routes: &routes,
                live_nodes: &nodes,
                held: &mine,
                tick: 10,
                long_unowned: &empty,
            })
        };
        // One of the two (the first id among those holding most) gives one up.
        assert_eq!(plan_of("a", &[0, 1]).release, vec![1]);
        assert!(plan_of("b", &[2, 3]).release.is_empty());
        // Once a free partition is there for c, nobody else releases.
        let routes: Vec<_> = (0..4)
            .map(|p| match p {
                0 => route(p, Some("a"), true),
                1 => route(p, None, false),
                _ => route(p, Some("b"), true),
            })
            .collect();
        let mine = held(&[2, 3], 0);
        let p = plan(&View {
            me: "b",
            routes: &routes,
            live_nodes: &nodes,
            held: &mine,
            tick: 10,
            long_unowned: &empty,
        });
        assert!(p.release.is_empty());
    }

    #[test]
    fn nothing_is_released_unless_a_live_node_is_short() {
        // 5 partitions over 2 nodes: share 3, floor 2; a: 3, b: 2 is balanced.
        let routes: Vec<_> = (0..5)
            .map(|p| route(p, Some(if p < 3 { "a" } else { "b" }), true))
            .collect();
        let nodes = vec!["a".to_string(), "b".to_string()];
        let mine = held(&[0, 1, 2], 0);
        let empty = BTreeSet::new();
        let v = View {
            me: "a",
            routes: &routes,
            live_nodes: &nodes,
            held: &mine,
            tick: 10,
            long_unowned: &empty,
        };
        let p = plan(&v);
        assert_eq!(p.share, 3);
        assert!(p.release.is_empty() && p.candidates.is_empty());
    }

    #[test]
    fn long_unowned_partitions_are_urgent_and_own_stale_ones_are_candidates() {
        let routes = vec![
            route(0, Some("a"), true),
            route(1, Some("b"), false),
            route(2, Some("b"), true),
            route(3, Some("a"), true),
        ];
        let nodes = vec!["a".to_string(), "b".to_string()];
        let mine = held(&[0], 0);
        let long: BTreeSet<u32> = [1].into();
        let v = View {
            me: "a",
            routes: &routes,
            live_nodes: &nodes,
            held: &mine,
            tick: 10,
            long_unowned: &long,
        };
        let p = plan(&v);
        assert_eq!(p.urgent, vec![1]);
        assert_eq!(
            p.candidates,
            vec![3],
            "its own live lease that no store holds"
        );
    }
}
