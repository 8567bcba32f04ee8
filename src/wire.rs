//! Helpers for values that cross from one node to another (`cluster::peer`): the engine's
//! answers name some things with `&'static str` (states, roles, the store's name), which
//! serde cannot borrow from a message that is gone once decoded. [`interned`] gives each
//! distinct string one `&'static str` for the life of the process, from a table bounded
//! in entries and bytes, so a peer cannot grow it without limit: past the bound a new
//! string is refused as a decoding error.

use serde::{Deserialize, Deserializer};
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// A `&'static str` field that a peer's message fills (through [`interned`]). An alias,
/// because serde borrows a field it sees written as `&str` from the input.
pub type Name = &'static str;

/// Most distinct strings kept, and the longest one.
const MAX_ENTRIES: usize = 4096;
const MAX_LEN: usize = 128;

fn table() -> &'static Mutex<HashSet<&'static str>> {
    static TABLE: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashSet::new()))
}

/// The one `&'static str` equal to `s`, or `None` once the table is full (or `s` too long).
pub fn intern(s: &str) -> Option<&'static str> {
    let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = t.get(s) {
        return Some(found);
    }
    if s.len() > MAX_LEN || t.len() >= MAX_ENTRIES {
        return None;
    }
    let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
    t.insert(leaked);
    Some(leaked)
}

fn intern_or_err<E: serde::de::Error>(s: &str) -> Result<&'static str, E> {
    intern(s).ok_or_else(|| {
        E::custom(format!(
            "too many distinct names from peers (or one longer than {MAX_LEN} bytes)"
        ))
    })
}

/// `#[serde(deserialize_with = "interned")]` for a `&'static str` field.
pub fn interned<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
    intern_or_err(&s)
}

/// `#[serde(deserialize_with = "interned_list")]` for a `Vec<&'static str>` field.
pub fn interned_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<&'static str>, D::Error> {
    let v = <Vec<std::borrow::Cow<'de, str>>>::deserialize(d)?;
    v.iter().map(|s| intern_or_err(s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_gives_one_static_per_string_and_refuses_long_ones() {
        let a = intern("active").unwrap();
        let b = intern(&String::from("active")).unwrap();
        assert!(std::ptr::eq(a, b));
        assert!(intern(&"x".repeat(MAX_LEN + 1)).is_none());
    }
}
