//! The web dashboard: static assets embedded in the binary (`src/http/dashboard/`), served
//! at `/` and `/dashboard/*` without a build step. The page itself holds no data, so it is
//! served without the password; everything it shows comes from the API routes it calls
//! (admin, events over SSE), which do require it when the server has one: the page asks for
//! the password and sends it as a Bearer token.
//!
//! CSRF: the dashboard's actions carry the token in a header (never a cookie), and
//! [`csrf_guard`] refuses state-changing requests that a cross-site page could make a
//! browser send without a CORS preflight (a form post), so another site cannot act
//! through an operator's browser even on a server without a password.

use axum::body::Body;
use axum::extract::{Path, Request};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// One embedded file: its bytes, content type and a validator for conditional requests.
struct Asset {
    name: &'static str,
    body: &'static [u8],
    content_type: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        body: include_bytes!("dashboard/index.html"),
        content_type: "text/html; charset=utf-8",
    },
    Asset {
        name: "app.js",
        body: include_bytes!("dashboard/app.js"),
        content_type: "text/javascript; charset=utf-8",
    },
    Asset {
        name: "pages.js",
        body: include_bytes!("dashboard/pages.js"),
        content_type: "text/javascript; charset=utf-8",
    },
    Asset {
        name: "jobs.js",
        body: include_bytes!("dashboard/jobs.js"),
        content_type: "text/javascript; charset=utf-8",
    },
    Asset {
        name: "workflows.js",
        body: include_bytes!("dashboard/workflows.js"),
        content_type: "text/javascript; charset=utf-8",
    },
    Asset {
        name: "app.css",
        body: include_bytes!("dashboard/app.css"),
        content_type: "text/css; charset=utf-8",
    },
];

/// A strong validator: the FNV-1a hash of the content (it only changes with the binary).
fn etag(body: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in body {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("\"{h:016x}\"")
}

fn serve(asset: &Asset, headers: &HeaderMap, cache: &'static str) -> Response {
    let tag = etag(asset.body);
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let mut resp = if matches {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(Body::from(asset.body));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
        r
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
        ),
    );
    resp
}

/// `GET /`: the dashboard page; revalidated on every load so a new binary shows at once.
pub async fn index(headers: HeaderMap) -> Response {
    serve(&ASSETS[0], &headers, "no-cache")
}

/// `GET /dashboard/{file}`: scripts and styles, cached for an hour (and revalidated by
/// their ETag after that).
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => serve(a, &headers, "public, max-age=3600"),
        None => ApiError::not_found(format!("no dashboard file {file}")).into_response(),
    }
}

/// Whether a path is part of the page itself (served without the password).
pub fn is_page(path: &str) -> bool {
    path == "/" || path.starts_with("/dashboard/")
}

/// Refuse a state-changing request that a page on another site could have made the browser
/// send without a preflight: a non-GET with no content type or a form/text one, from an
/// `Origin` other than this server. API clients outside a browser send no `Origin`; a
/// cross-origin `fetch` with a JSON body is preflighted and governed by CORS instead.
pub async fn csrf_guard(req: Request, next: Next) -> Response {
    if is_cross_site_form(req.method(), req.headers()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            "a cross-site form request cannot change anything here; send JSON with Content-Type: application/json",
        )
        .into_response();
    }
    next.run(req).await
}

fn is_cross_site_form(method: &Method, h: &HeaderMap) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return false;
    }
    let simple = match h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(ct) => {
            let ct = ct
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            matches!(
                ct.as_str(),
                "application/x-www-form-urlencoded" | "multipart/form-data" | "text/plain"
            )
        }
    };
    if !simple {
        return false;
    }
    let site = h
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if site == "cross-site" || site == "same-site" {
        return true;
    }
    let Some(origin) = h.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let host = h
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .split_once("://")
        .map_or(origin, |(_, rest)| rest)
        .trim_end_matches('/');
    origin == "null" || !origin_host.eq_ignore_ascii_case(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn cross_site_form_posts_are_refused_and_api_calls_are_not() {
        let post = Method::POST;
        // A form on another site.
        assert!(is_cross_site_form(
            &post,
            &h(&[
                ("origin", "https://evil.example"),
                ("host", "127.0.0.1:7420")
            ])
        ));
        assert!(is_cross_site_form(
            &post,
            &h(&[
                ("sec-fetch-site", "cross-site"),
                ("content-type", "text/plain")
            ])
        ));
        assert!(is_cross_site_form(
            &post,
            &h(&[("origin", "null"), ("host", "a")])
        ));
        // The dashboard itself (same origin), JSON bodies, and non-browser clients pass.
        assert!(!is_cross_site_form(
            &post,
            &h(&[
                ("origin", "http://127.0.0.1:7420"),
                ("host", "127.0.0.1:7420")
            ])
        ));
        assert!(!is_cross_site_form(
            &post,
            &h(&[
                ("origin", "https://evil.example"),
                ("content-type", "application/json")
            ])
        ));
        assert!(!is_cross_site_form(&post, &h(&[])));
        assert!(!is_cross_site_form(
            &Method::GET,
            &h(&[("origin", "https://evil.example")])
        ));
    }

    #[test]
    fn assets_have_validators_and_answer_304_when_unchanged() {
        let tag = etag(ASSETS[1].body);
        let mut hm = HeaderMap::new();
        hm.insert(header::IF_NONE_MATCH, HeaderValue::from_str(&tag).unwrap());
        assert_eq!(
            serve(&ASSETS[1], &hm, "x").status(),
            StatusCode::NOT_MODIFIED
        );
        let r = serve(&ASSETS[1], &HeaderMap::new(), "public, max-age=3600");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::ETAG], tag.as_str());
    }
}
