//! `ojsd cluster`: the nodes of the cluster the server belongs to and which partitions each
//! holds (CLUSTER; one node, the server itself, on an embedded store).

use super::table::Table;
use super::{connect, print_json, s, Conn, Res};
use serde_json::Value;

pub(super) fn cluster(conn: &Conn) -> Res {
    let mut c = connect(conn)?;
    let v = c.cluster()?;
    if conn.json {
        print_json(&v);
        return Ok(());
    }
    println!(
        "{} partition(s) on the {} store{}",
        s(&v["partitions"]),
        s(&v["store"]),
        match v["unowned"].as_array() {
            Some(u) if !u.is_empty() => format!(
                "; not held by any node: {}",
                u.iter().map(s).collect::<Vec<_>>().join(", ")
            ),
            _ => String::new(),
        }
    );
    let mut t = Table::new(&[
        "node",
        "role",
        "addr",
        "peer",
        "partitions",
        "epoch",
        "lease_until",
        "heartbeat_at",
    ]);
    for n in v["nodes"].as_array().into_iter().flatten() {
        let parts = n["partitions"]
            .as_array()
            .map(|p| p.iter().map(s).collect::<Vec<_>>().join(","))
            .unwrap_or_default();
        let id = if n["local"] == Value::Bool(true) {
            format!("{} (this one)", s(&n["id"]))
        } else {
            s(&n["id"])
        };
        t.row(vec![
            id,
            s(&n["role"]),
            s(&n["addr"]),
            s(&n["peer_addr"]),
            parts,
            s(&n["epoch"]),
            s(&n["lease_until"]),
            s(&n["heartbeat_at"]),
        ]);
    }
    t.print();
    Ok(())
}
