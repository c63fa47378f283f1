//! The accept loop of every listener: what a connection may cost before it sends a request.
//!
//! * At most [`ServerConfig::max_connections`] connections per listener; one more is closed at
//!   once and counted (`weft_connections_refused_total`), so idle or slow clients cannot take
//!   every file descriptor.
//! * Request headers must arrive within [`ServerConfig::header_timeout`]; the same clock runs
//!   while a keep-alive connection waits for its next request, so it also closes idle
//!   connections (slowloris sends headers a byte at a time).
//! * The first request of a connection must start within the same
//!   [`ServerConfig::header_timeout`] of its accept, whatever the protocol: a client that opens
//!   TCP and sends nothing, or (HTTP/2, gRPC) sends the preface but never a request's headers,
//!   is closed then. HTTP/2 connections are pinged every `header_timeout` while idle and closed
//!   when a ping goes unanswered for as long (a peer that vanished).
//! * A request body must arrive within [`ServerConfig::body_timeout`] of the request's start
//!   (see [`limit_body`]): a trickling body is cut (408; gRPC: an error status) and gives
//!   back its share of the in-flight budget.
//! * Shutdown stops accepting, lets requests in progress finish for at most
//!   [`ServerConfig::shutdown_timeout`], then drops the connections left.
//!
//! [`ServerConfig::max_connections`]: crate::ServerConfig::max_connections
//! [`ServerConfig::header_timeout`]: crate::ServerConfig::header_timeout
//! [`ServerConfig::body_timeout`]: crate::ServerConfig::body_timeout
//! [`ServerConfig::shutdown_timeout`]: crate::ServerConfig::shutdown_timeout

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Sleep;

use crate::metrics::ListenerCounters;
use crate::state::ServerConfig;

/// Serves `app` on `listener` until `stop` turns true, then shuts down within the configured
/// deadline.
pub(crate) async fn serve(
    what: &'static str,
    listener: TcpListener,
    app: Router,
    cfg: &ServerConfig,
    counters: Arc<ListenerCounters>,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(cfg.max_connections.clamp(1, Semaphore::MAX_PERMITS)));
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(cfg.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(cfg.header_timeout)
        .keep_alive_timeout(cfg.header_timeout);
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            a = listener.accept() => a,
        };
        let (socket, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::warn!(listener = what, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            drop(socket);
            continue;
        };
        let _ = socket.set_nodelay(true);
        let conn = builder.clone();
        let started = Arc::new(AtomicBool::new(false));
        let svc = FirstRequest { inner: TowerToHyperService::new(app.clone()), started: started.clone() };
        let mut stop = stop.clone();
        let counters = counters.clone();
        let handshake = tokio::time::sleep(cfg.header_timeout);
        counters.open.fetch_add(1, Ordering::Relaxed);
        conns.spawn(async move {
            let serving = conn.serve_connection_with_upgrades(TokioIo::new(socket), svc);
            tokio::pin!(serving);
            tokio::pin!(handshake);
            let mut stopping = false;
            let mut waiting = true;
            loop {
                tokio::select! {
                    _ = serving.as_mut() => break,
                    _ = handshake.as_mut(), if waiting => {
                        if !started.load(Ordering::Relaxed) {
                            // No request within the deadline: drop the connection.
                            break;
                        }
                        waiting = false;
                    }
                    _ = stop.wait_for(|s| *s), if !stopping => {
                        stopping = true;
                        serving.as_mut().graceful_shutdown();
                    }
                }
            }
            counters.open.fetch_sub(1, Ordering::Relaxed);
            drop(slot);
        });
    }
    drop(listener);
    let drained =
        tokio::time::timeout(cfg.shutdown_timeout, async { while conns.join_next().await.is_some() {} })
            .await;
    if drained.is_err() {
        tracing::warn!(
            listener = what,
            connections = conns.len(),
            "shutdown deadline ({:?}) passed: closing the connections left",
            cfg.shutdown_timeout
        );
        conns.shutdown().await;
    }
}

/// The connection's service, noting that a request has started (see the handshake deadline).
#[derive(Clone)]
struct FirstRequest<S> {
    inner: S,
    started: Arc<AtomicBool>,
}

impl<S: hyper::service::Service<R>, R> hyper::service::Service<R> for FirstRequest<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, req: R) -> Self::Future {
        self.started.store(true, Ordering::Relaxed);
        self.inner.call(req)
    }
}

/// Middleware of the HTTP listeners: the request body must arrive within `timeout` of the
/// request's start; past it reading the body fails with [`BodyTimeout`].
pub(crate) async fn limit_body(
    axum::extract::State(timeout): axum::extract::State<Duration>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let req = req
        .map(|b| Body::new(TimedBody { inner: b, deadline: Box::pin(tokio::time::sleep(timeout)), timeout }));
    next.run(req).await
}

/// The request body did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?} (weft serve --body-timeout)")]
pub struct BodyTimeout(pub Duration);

struct TimedBody {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyTimeout(self.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether a body-reading error is the body timeout.
pub(crate) fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<BodyTimeout>() {
            return true;
        }
        cur = err.source();
    }
    false
}
