//! What every listener shares (the TCP ports, HTTP, the peer listener): binding with a deep
//! backlog, and the accept loop's backoff when accepting fails.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;

/// A listener with a deep backlog, so a burst of a thousand connecting workers is not refused.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    TcpListener::from_std(socket.into())
}

/// Sleep after a failed accept: doubling from 5 ms up to 1 s while accepts keep failing
/// (out of file descriptors, say), so the loop neither spins nor stalls for long.
pub async fn accept_backoff(backoff: &mut Duration, e: &std::io::Error) {
    *backoff = (*backoff * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "accept failed");
    tokio::time::sleep(*backoff).await;
}
