//! CORS for browser clients on other origins (ojs-http-binding §20): only for the origins
//! listed with `--cors-origin` (never `*`: the routes take a Bearer password). A preflight
//! (`OPTIONS` with `Access-Control-Request-Method`) from an allowed origin is answered
//! here, before the password check, with the methods and headers the binding lists; other
//! requests from an allowed origin get `Access-Control-Allow-Origin` and the exposed
//! headers. Requests from any other origin get no CORS headers, so browsers refuse them.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

const ALLOW_METHODS: &str = "GET, POST, PATCH, DELETE, OPTIONS";
const ALLOW_HEADERS: &str =
    "Content-Type, Accept, Authorization, X-Request-Id, OJS-Version, Last-Event-ID";
const EXPOSE_HEADERS: &str =
    "X-Request-Id, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, OJS-Version, Retry-After, Location";

pub async fn cors(allowed: Arc<[String]>, req: Request, next: Next) -> Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .filter(|o| allowed.iter().any(|a| a == o))
        .and_then(|o| HeaderValue::from_str(o).ok());
    let Some(origin) = origin else {
        return next.run(req).await;
    };
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut resp = if preflight {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NO_CONTENT;
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("86400"),
        );
        r
    } else {
        next.run(req).await
    };
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSE_HEADERS),
    );
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    resp
}
