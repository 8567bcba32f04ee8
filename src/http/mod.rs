//! The HTTP front end: the event transports of RFC-0005 and ojs-events §6 (SSE, WebSocket,
//! polling), Prometheus metrics (ojs-events §7) and the health check of ojs-http-binding
//! §8.1. Like the TCP front end it only talks to the engine through the `cluster::Router` (the local engine, or the partition's holder).
//!
//! | route | what |
//! |---|---|
//! | `GET /v1/events/stream`, `GET /ojs/v1/events/stream` | Server-Sent Events ([`sse`]) |
//! | `GET /ojs/v1/events` | one page of the event log ([`poll`]) |
//! | `GET /ojs/v1/ws` | WebSocket subscriptions ([`ws`]) |
//! | `GET /metrics` | Prometheus text ([`system`]) |
//! | `GET /ojs/v1/health` | health ([`system`]) |
//! | `GET`/`POST /ojs/v1/cron`, `GET`/`PATCH`/`DELETE /ojs/v1/cron/{name}` | cron jobs ([`cron`]) |
//! | `/ojs/v1/admin/...`, `/ojs/v1/dead-letter/...` | queues, workers, dead letter ([`admin`]) |
//! | `POST /ojs/v1/workflows`, `GET`/`DELETE /ojs/v1/workflows/{id}`, `POST .../{id}/cancel` | workflows ([`workflows`]) |
//! | `GET /ojs/v1/whoami` | the role of the request's token (for the dashboard) |
//!
//! With tokens (`--password`, `--token`), [`auth`] finds the role of the request's bearer
//! token, and the layer of the route's group in [`routes`] checks it: one table of which
//! role each route needs.
//!
//! Every response carries `OJS-Version` and `X-Request-Id` (the client's, when it sent
//! one); errors are JSON in the binding's shape ([`error`]). A request body is read whole
//! and bounded ([`body`]) before its handler runs.

pub mod admin;
pub mod body;
pub mod cors;
pub mod cron;
pub mod dashboard;
pub mod error;
pub mod jobs;
pub mod metrics;
pub mod page;
pub mod poll;
pub mod query;
pub mod queues;
pub mod sse;
pub mod system;
pub mod workflows;
pub mod ws;

use crate::auth::AuthLimiter;
use crate::auth::{Need, Role};
use crate::cluster::Router as EngineRouter;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use error::ApiError;
use hyper::body::Incoming;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The OJS spec version these endpoints follow (the `OJS-Version` header).
pub const OJS_VERSION: &str = "1.0";
const OJS_JSON: &str = "application/openjobspec+json";

#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// How long an SSE stream may stay silent before a `: keepalive` comment is sent.
    pub keepalive: Duration,
    /// The server's `--password` and `--token`s: when there is one, every route but health
    /// and the dashboard's page needs `Authorization: Bearer <token>`.
    pub tokens: crate::auth::Tokens,
    /// Wrong passwords per client address, shared with the TCP listeners
    /// (`--max-auth-failures` per `--auth-failure-window-ms`).
    pub auth_failures: Arc<AuthLimiter>,
    /// Connections at once (`--max-connections`, counted apart from the TCP listener's);
    /// past it a plain-HTTP client gets `503 TOO_MANY_CONNECTIONS`, a TLS one a closed socket.
    pub max_connections: usize,
    /// Time for the TLS handshake, and for each request's headers to arrive (which also
    /// closes keep-alive connections idle that long): `--hello-timeout-ms`.
    pub handshake_timeout: Duration,
    /// `--tls-cert`/`--tls-key`: serve HTTPS only.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// `--cors-origin`: browser origins allowed to call the API (§20); empty = none.
    pub cors_origins: Vec<String>,
    /// `--max-body-bytes`: the largest request body ([`body`]).
    pub max_body_bytes: usize,
    /// `--body-timeout-ms`: time for a request's whole body after its headers ([`body`]).
    pub body_timeout: Duration,
    /// The OJS TCP listener's port, which whoami tells the dashboard (its first-job help).
    pub tcp_port: Option<u16>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            keepalive: Duration::from_secs(15),
            tokens: crate::auth::Tokens::default(),
            auth_failures: AuthLimiter::shared(
                crate::server::DEFAULT_MAX_AUTH_FAILURES,
                Duration::from_millis(crate::server::DEFAULT_AUTH_FAILURE_WINDOW_MS),
            ),
            max_connections: crate::server::DEFAULT_MAX_CONNECTIONS,
            handshake_timeout: Duration::from_millis(crate::server::DEFAULT_HELLO_TIMEOUT_MS),
            tls: None,
            cors_origins: Vec::new(),
            max_body_bytes: body::default_max_body_bytes(
                crate::job::validate::DEFAULT_MAX_JOB_BYTES,
            ),
            body_timeout: Duration::from_millis(body::DEFAULT_BODY_TIMEOUT_MS),
            tcp_port: None,
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub engine: EngineRouter,
    pub cfg: Arc<HttpConfig>,
    pub started: Instant,
}

/// Every route, with the fallbacks and the header middleware.
pub fn router(engine: EngineRouter, cfg: HttpConfig) -> Router {
    let guard = (!cfg.tokens.is_open()).then(|| {
        Arc::new(Credentials {
            tokens: cfg.tokens.clone(),
            failures: cfg.auth_failures.clone(),
        })
    });
    let cors_origins: Arc<[String]> = cfg.cors_origins.clone().into();
    let body_limits = body::BodyLimits {
        max_bytes: cfg.max_body_bytes,
        timeout: cfg.body_timeout,
    };
    let state = AppState {
        engine,
        cfg: Arc::new(cfg),
        started: Instant::now(),
    };
    routes()
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        // `body::read_whole` enforces --max-body-bytes before the extractors run.
        .layer(axum::extract::DefaultBodyLimit::disable())
        // Inside `auth`: a request refused for its credentials has its body never read.
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| body::read_whole(body_limits, req, next),
        ))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| auth(guard.clone(), req, next),
        ))
        .layer(axum::middleware::from_fn(dashboard::csrf_guard))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| cors::cors(cors_origins.clone(), req, next),
        ))
        .layer(axum::middleware::from_fn(headers))
}

/// Every route, grouped by the least role it needs (`auth::Role::may`): the one table of
/// the HTTP front end (PROTOCOL.md §13.7). Each group's layer checks the role [`auth`] found
/// for the request's token; a route the token may not use gets `403 x_forbidden`.
fn routes() -> Router<AppState> {
    use axum::routing::{delete, patch, post, put};
    // Health and the dashboard's page and scripts: no token at all ([`auth`] lets them by).
    let open = Router::new()
        .route("/ojs/v1/health", get(system::health))
        .route("/", get(dashboard::index))
        .route("/dashboard/{file}", get(dashboard::asset));
    // Any token: who am I, what the server implements, one job or workflow by its id.
    let any = Router::new()
        .route("/ojs/v1/whoami", get(whoami))
        .route("/ojs/manifest", get(queues::manifest))
        .route("/ojs/v1/jobs/{id}", get(jobs::get_job))
        .route("/ojs/v1/workflows/{id}", get(workflows::get_one));
    let producer = Router::new()
        .route("/ojs/v1/jobs", post(jobs::push))
        .route("/ojs/v1/jobs/batch", post(jobs::push_batch))
        .route("/ojs/v1/workflows", post(workflows::create));
    let worker = Router::new()
        .route("/ojs/v1/workers/fetch", post(jobs::fetch))
        .route("/ojs/v1/workers/ack", post(jobs::ack))
        .route("/ojs/v1/workers/nack", post(jobs::nack))
        .route("/ojs/v1/workers/heartbeat", post(jobs::heartbeat));
    // Reading everything: events, metrics, lists, every payload.
    let mut observer = Router::new()
        .route("/v1/events/stream", get(sse::stream))
        .route("/ojs/v1/events/stream", get(sse::stream))
        .route("/ojs/v1/events", get(poll::poll))
        .route("/ojs/v1/ws", get(ws::upgrade))
        .route("/metrics", get(system::metrics))
        .route("/stats", get(system::faktory_stats))
        .route("/ojs/v1/cron", get(cron::list))
        .route("/ojs/v1/cron/{name}", get(cron::get_one))
        .route("/ojs/v1/workflows", get(workflows::list))
        .route("/ojs/v1/queues", get(queues::list))
        .route("/ojs/v1/queues/{name}/stats", get(queues::stats))
        .route("/ojs/v1/admin/queues", get(admin::queues))
        .route("/ojs/v1/admin/queues/{name}", get(admin::queue))
        .route(
            "/ojs/v1/admin/queues/{name}/rate-limit",
            get(admin::rate_limit_get),
        )
        .route("/ojs/v1/admin/workers", get(admin::workers))
        .route("/ojs/v1/admin/workers/{id}", get(admin::worker))
        .route("/ojs/v1/admin/jobs", get(admin::jobs))
        .route("/ojs/v1/admin/overview", get(admin::overview))
        .route("/ojs/v1/admin/cluster", get(admin::cluster))
        .route("/ojs/v1/admin/stats", get(admin::stats))
        .route("/ojs/v1/admin/stats/history", get(admin::stats_history));
    // Changing what is not one's own.
    let mut admin = Router::new()
        .route("/ojs/v1/cron", post(cron::register))
        .route(
            "/ojs/v1/cron/{name}",
            patch(cron::patch).delete(cron::delete),
        )
        .route("/ojs/v1/workflows/{id}", delete(workflows::cancel))
        .route("/ojs/v1/workflows/{id}/cancel", post(workflows::cancel))
        .route("/ojs/v1/jobs/{id}", delete(jobs::cancel))
        .route("/ojs/v1/jobs/{id}/activate", post(jobs::activate))
        .route("/ojs/v1/admin/jobs/{id}/retry", post(jobs::retry_now))
        .route("/ojs/v1/queues/{name}/pause", post(queues::pause))
        .route("/ojs/v1/queues/{name}/resume", post(queues::resume))
        .route("/ojs/v1/admin/queues/{name}/pause", post(admin::pause))
        .route("/ojs/v1/admin/queues/{name}/resume", post(admin::resume))
        .route(
            "/ojs/v1/admin/queues/{name}/rate-limit",
            put(admin::rate_limit_put).delete(admin::rate_limit_delete),
        )
        .route("/ojs/v1/admin/queues/{name}/jobs", delete(admin::purge))
        .route("/ojs/v1/admin/workers/{id}/quiet", post(admin::quiet))
        .route(
            "/ojs/v1/admin/workers/{id}/terminate",
            post(admin::terminate),
        );
    // The dead letters, under the admin API and ojs-dead-letter §10's own prefix.
    for (base, binding) in [
        ("/ojs/v1/admin/dead-letter", false),
        ("/ojs/v1/dead-letter", true),
    ] {
        let list = if binding {
            get(admin::dead_list_binding)
        } else {
            get(admin::dead_list)
        };
        observer = observer
            .route(base, list)
            .route(&format!("{base}/stats"), get(admin::dead_stats))
            .route(&format!("{base}/{{id}}"), get(admin::dead_get));
        admin = admin
            .route(base, delete(admin::dead_delete_all))
            .route(&format!("{base}/retry"), post(admin::dead_retry_all))
            .route(&format!("{base}/{{id}}"), delete(admin::dead_delete))
            .route(&format!("{base}/{{id}}/retry"), post(admin::dead_retry));
    }
    let need = |need: Need, r: Router<AppState>| {
        r.route_layer(axum::middleware::from_fn(
            move |req: Request, next: Next| require(need, req, next),
        ))
    };
    open.merge(need(Need::Any, any))
        .merge(need(Need::Producer, producer))
        .merge(need(Need::Worker, worker))
        .merge(need(Need::Observer, observer))
        .merge(need(Need::Admin, admin))
}

/// Let a request through if the role [`auth`] found for it may do what `need` allows;
/// otherwise `403 x_forbidden`. A request without a role never went through [`auth`] (a
/// bug): refused too.
async fn require(need: Need, req: Request, next: Next) -> Response {
    use axum::response::IntoResponse;
    let role = req.extensions().get::<Role>().copied();
    if role.is_some_and(|r| r.may(need)) {
        return next.run(req).await;
    }
    ApiError::new(
        StatusCode::FORBIDDEN,
        "FORBIDDEN",
        format!(
            "{} {} needs the {} role",
            req.method(),
            req.uri().path(),
            need.role()
        ),
    )
    .into_response()
}

/// `GET /ojs/v1/whoami`: the role of the request's token (`admin` on a server without
/// tokens), and whether the server asks for one; the dashboard hides what it may not do.
async fn whoami(
    role: Option<axum::Extension<Role>>,
    st: axum::extract::State<AppState>,
) -> Response {
    let role = role.map_or(Role::Admin, |r| r.0);
    let body = serde_json::json!({
        "role": role.as_str(),
        "authenticated": !st.cfg.tokens.is_open(),
        "tcp_port": st.cfg.tcp_port,
    });
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

/// Serve until the task is dropped (aborted on shutdown; open streams end when the engine
/// stops, their subscriptions failing with `BACKEND_UNAVAILABLE`).
///
/// Its own accept loop rather than `axum::serve`, for what that does not offer: the
/// connection cap, TLS, and a deadline on request headers (slow or idle clients); the
/// body's deadline is [`body`]'s.
pub async fn serve(listener: TcpListener, engine: EngineRouter, cfg: HttpConfig) {
    let permits = Arc::new(Semaphore::new(
        cfg.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let max = cfg.max_connections;
    // hyper adds this to "now" unchecked: keep an absurd flag value from overflowing it.
    let timeout = cfg
        .handshake_timeout
        .clamp(Duration::from_millis(1), Duration::from_secs(86_400 * 365));
    let tls = cfg.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let app = router(engine, cfg);
    let mut backoff = Duration::ZERO;
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                crate::listen::accept_backoff(&mut backoff, &e).await;
                continue;
            }
        };
        backoff = Duration::ZERO;
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            if tls.is_none() {
                // A fresh socket's send buffer is empty: this does not block.
                let _ = tcp.try_write(&too_many_connections(max));
            }
            continue;
        };
        // Events are small writes that should leave at once.
        let _ = tcp.set_nodelay(true);
        let (app, tls) = (app.clone(), tls.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let result = match tls {
                None => serve_connection(tcp, peer, app, timeout).await,
                Some(acceptor) => match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => serve_connection(stream, peer, app, timeout).await,
                    Ok(Err(e)) => Err(e.into()),
                    Err(_) => Err("TLS handshake timed out".into()),
                },
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "http connection ended with an error");
            }
        });
    }
}

/// Bytes one HTTP connection buffers for reading and for writing.
pub const CONNECTION_BUFFER: usize = 64 * 1024;

/// HTTP/1.1 on one connection, upgrades (WebSocket) included. Each request carries the
/// peer's address (`ConnectInfo`), for the throttle on wrong credentials.
async fn serve_connection<S>(
    io: S,
    peer: SocketAddr,
    app: Router,
    header_timeout: Duration,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let app = tower::ServiceExt::map_request(app, move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        req
    });
    let service = hyper_util::service::TowerToHyperService::new(app);
    hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        // Bytes a connection buffers each way (hyper's default is ~400 KiB): an SSE stream
        // whose client does not read holds at most this much rendered output.
        .max_buf_size(CONNECTION_BUFFER)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .with_upgrades()
        .await?;
    Ok(())
}

/// The whole response to a connection over the cap.
fn too_many_connections(max: usize) -> Vec<u8> {
    let err = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "TOO_MANY_CONNECTIONS",
        format!("the server is at --max-connections ({max}); try again later"),
    );
    let body = serde_json::to_vec(&err.body(None)).unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {OJS_JSON}\r\nojs-version: {OJS_VERSION}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// A JSON body with the binding's content type.
pub fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(OJS_JSON));
    resp
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// What a request needs with `--password` set, and the count of wrong ones per address.
struct Credentials {
    tokens: crate::auth::Tokens,
    failures: Arc<AuthLimiter>,
}

/// With tokens configured, every route but health and the dashboard's pages needs one of
/// them; the token's role goes with the request (an extension) to the check of its route's
/// group ([`require`]). Without tokens every request is `admin`.
///
/// Wrong tokens count against the sender's address in the limiter the TCP HELLO uses, and
/// an address out of allowance is refused with 429 before its token is looked at (a
/// correct one too, as on TCP): without it one keep-alive connection tried 32,201 tokens
/// in 5 s. A request with no `Authorization` header is refused without counting, since it
/// guesses nothing (the dashboard asks for the password after such a 401). The token is
/// compared in constant time with every configured token without hashing, far cheaper
/// than a HELLO's, so unlike TCP's check it needs no blocking thread.
async fn auth(guard: Option<Arc<Credentials>>, mut req: Request, next: Next) -> Response {
    use axum::response::IntoResponse;
    let Some(guard) = guard else {
        // No token configured: every client is admin.
        req.extensions_mut().insert(Role::Admin);
        return next.run(req).await;
    };
    let path = req.uri().path();
    if path == "/ojs/v1/health" || dashboard::is_page(path) {
        return next.run(req).await;
    }
    let ip = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    if let Some(ip) = ip {
        if let Err(wait) = guard.failures.check(ip, std::time::Instant::now()) {
            tracing::debug!(%ip, "HTTP request refused: too many wrong credentials");
            return throttled(ip, wait);
        }
    }
    let Some(given) = req.headers().get(header::AUTHORIZATION) else {
        return unauthenticated().into_response();
    };
    let token = given
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    match guard.tokens.bearer(token) {
        None => {
            if let Some(ip) = ip {
                guard.failures.failed(ip, std::time::Instant::now());
            }
            unauthenticated().into_response()
        }
        // What the role may do is each route group's check (`require`).
        Some(role) => {
            req.extensions_mut().insert(role);
            next.run(req).await
        }
    }
}

fn unauthenticated() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "UNAUTHENTICATED",
        "this server needs a token: send Authorization: Bearer <token>",
    )
}

/// 429 for an address out of its allowance of wrong credentials, with `Retry-After` in
/// whole seconds (ojs-errors ERR-006): when its next try will be counted again.
fn throttled(ip: IpAddr, wait: Duration) -> Response {
    use axum::response::IntoResponse;
    let secs = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
    let mut resp = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "RATE_LIMITED",
        format!("too many wrong credentials from {ip}; try again in {secs} s"),
    )
    .into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    resp
}

/// `OJS-Version` and `X-Request-Id` on every response (ojs-http-binding §6.5, §19), and
/// the request id inside error bodies.
async fn headers(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 200)
        .map(str::to_string)
        .unwrap_or_else(|| format!("req_{}", uuid::Uuid::now_v7()));
    let mut resp = next.run(req).await;
    if let Some(err) = resp.extensions_mut().remove::<ApiError>() {
        let body = serde_json::to_vec(&err.body(Some(&id))).unwrap_or_default();
        let h = resp.headers_mut();
        h.remove(header::CONTENT_LENGTH);
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(OJS_JSON));
        *resp.body_mut() = Body::from(body);
    }
    let h = resp.headers_mut();
    h.insert("ojs-version", HeaderValue::from_static(OJS_VERSION));
    if let Ok(v) = HeaderValue::from_str(&id) {
        h.insert("x-request-id", v);
    }
    resp
}
