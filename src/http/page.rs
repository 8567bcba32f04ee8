//! Pagination of the binding's list routes (ojs-http-binding §17): `limit` (default 50, at
//! most the route's maximum), `offset`, or the opaque `cursor` a previous page's
//! `next_cursor` gave; every page answers `pagination` {`total`, `limit`, `offset`,
//! `has_more`, and `next_cursor` while there is more}.

use super::error::ApiError;
use serde_json::{json, Value};

pub const DEFAULT_LIMIT: usize = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageReq {
    pub limit: usize,
    pub offset: usize,
}

/// A cursor is the offset of the next page, written so that clients treat it as opaque.
pub fn cursor_of(offset: usize) -> String {
    format!("o{offset:x}")
}

fn decode(cursor: &str) -> Option<usize> {
    usize::from_str_radix(cursor.trim().strip_prefix('o')?, 16).ok()
}

/// The page a query asks for; other parameters are left to the route.
pub fn page_req(pairs: &[(String, String)], max: usize) -> Result<PageReq, ApiError> {
    let mut req = PageReq {
        limit: DEFAULT_LIMIT.min(max),
        offset: 0,
    };
    for (k, v) in pairs {
        match k.as_str() {
            "limit" => {
                req.limit = match v.trim().parse::<usize>() {
                    Ok(n) if n > 0 => n.min(max),
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "limit must be an integer from 1 to {max}, got {v:?}"
                        )))
                    }
                }
            }
            "offset" => {
                req.offset = v.trim().parse::<usize>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "offset must be a non-negative integer, got {v:?}"
                    ))
                })?
            }
            "cursor" => {
                req.offset = decode(v).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "cursor {v:?} is not one this server gave (use a page's next_cursor)"
                    ))
                })?
            }
            _ => {}
        }
    }
    Ok(req)
}

/// The `pagination` object of a page of `returned` items out of `total`.
pub fn pagination(total: usize, req: PageReq, returned: usize) -> Value {
    let next = req.offset.saturating_add(returned);
    let has_more = next < total;
    let mut p =
        json!({"total": total, "limit": req.limit, "offset": req.offset, "has_more": has_more});
    if has_more {
        p["next_cursor"] = json!(cursor_of(next));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn limits_offsets_and_cursors() {
        assert_eq!(
            page_req(&q(&[]), 200).unwrap(),
            PageReq {
                limit: 50,
                offset: 0
            }
        );
        assert_eq!(page_req(&q(&[("limit", "500")]), 200).unwrap().limit, 200);
        assert!(page_req(&q(&[("limit", "0")]), 200).is_err());
        assert!(page_req(&q(&[("offset", "-1")]), 200).is_err());
        let p = pagination(120, page_req(&q(&[("limit", "50")]), 200).unwrap(), 50);
        assert_eq!(p["has_more"], true);
        let cursor = p["next_cursor"].as_str().unwrap().to_string();
        let next = page_req(&q(&[("cursor", &cursor)]), 200).unwrap();
        assert_eq!(next.offset, 50);
        let last = pagination(
            120,
            PageReq {
                limit: 50,
                offset: 100,
            },
            20,
        );
        assert_eq!(last["has_more"], false);
        assert!(last.get("next_cursor").is_none());
        assert!(page_req(&q(&[("cursor", "eyJvZmYiOjUwfQ")]), 200).is_err());
    }
}
