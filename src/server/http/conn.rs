//! Connections: accepting, serving HTTP/1.1 with hyper, and closing what holds a socket without
//! using it. axum::serve holds every connection for ever: a client sending its headers a byte at
//! a time, an idle keep-alive, or a few thousand sockets opened and left were all kept, until the
//! process ran out of file descriptors and could not accept even `/readyz`.
//!
//! - **Header-read timeout**: a request line and headers must arrive within
//!   `server.header_read_timeout_ms` of their first byte, however slowly they trickle in.
//! - **Body-read timeout**: a request body must arrive whole within
//!   `server.body_read_timeout_ms` of its head: the handler reading it is answered 408
//!   `body_timeout`, and a connection still holding an unread body a second later is closed.
//! - **Idle timeout**: a connection with no request in flight and no byte read or written for
//!   `server.idle_timeout_secs` is closed.
//! - **Connection cap**: at `server.max_connections`, a new connection closes the one idle for
//!   the longest (an idle keep-alive costs its client a reconnect; a slow or silent one costs it
//!   nothing it was using), else the one whose body has been arriving the longest (nothing was
//!   applied from it yet); only when every connection has a request being processed does
//!   accepting wait. So slow clients cannot keep `/readyz` and real requests out.
//!
//! hyper's own header timeout starts whenever it waits for a request head, so it would close a
//! keep-alive the moment it had been idle that long; these two rules are kept apart here instead,
//! by watching the bytes each connection reads and writes and the requests it has in flight.
//!
//! hyper answers what it cannot parse (a malformed request, a URI or headers over their limits)
//! itself, with an empty body. [`Tracked`] rewrites exactly those answers into our JSON error
//! body, so every 4xx carries `{code, message, path}` even when no handler ever ran.

use super::error::ErrorBody;
use axum::Router;
use hyper::body::{Body as _, Bytes, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

/// The connection settings of `[server]`.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_header_bytes: usize,
    /// How long in-flight requests may finish after shutdown begins.
    pub grace: Duration,
}

impl ConnLimits {
    pub fn of(s: &loopguard::config::ServerConfig) -> ConnLimits {
        ConnLimits {
            header_read_timeout: Duration::from_millis(s.header_read_timeout_ms),
            body_read_timeout: Duration::from_millis(s.body_read_timeout_ms),
            idle_timeout: Duration::from_secs(s.idle_timeout_secs),
            max_connections: s.max_connections,
            max_header_bytes: s.max_header_bytes,
            grace: Duration::from_secs(s.shutdown_grace_secs),
        }
    }
}

/// What one connection is doing, shared by its task, its IO wrapper and its service.
struct Conn {
    /// Requests handed to the router and not yet answered.
    in_flight: AtomicUsize,
    /// Milliseconds since the registry's epoch of the last byte read or written.
    last_active: AtomicU64,
    /// When the first byte of the request head now arriving was read (ms since the epoch, plus
    /// one); 0 while no head is arriving.
    head_started: AtomicU64,
    /// When the head of a request whose body is still arriving was read (as above); 0 while no
    /// body is arriving.
    body_started: AtomicU64,
    /// A head or a body began: the connection's deadline moved earlier.
    deadline_moved: Notify,
    /// Asked to close to make room (the cap); no longer counted as open.
    evicted: AtomicBool,
    close: Notify,
}

impl Conn {
    fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }
}

/// Why a connection is closed by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    Header,
    Body,
    Idle,
}

impl Expiry {
    fn as_str(self) -> &'static str {
        match self {
            Expiry::Header => "header_timeout",
            Expiry::Body => "body_timeout",
            Expiry::Idle => "idle_timeout",
        }
    }
}

/// How long after the body timeout a connection whose handler did not answer it is closed.
const BODY_CLOSE_AFTER: Duration = Duration::from_secs(1);

struct Registry {
    epoch: Instant,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    ended: Notify,
}

impl Registry {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// Connections counted against the cap (evicted ones are on their way out).
    fn open(&self) -> usize {
        let conns = self.conns.lock().expect("connection registry lock");
        conns
            .values()
            .filter(|c| !c.evicted.load(Ordering::Acquire))
            .count()
    }

    /// Ask the connection without a request in flight that was active least recently to
    /// close; with none, the one whose request body has been arriving the longest. False when
    /// every connection has a request being processed.
    fn evict_idlest(&self) -> bool {
        let conns = self.conns.lock().expect("connection registry lock");
        let open = || {
            conns
                .values()
                .filter(|c| !c.evicted.load(Ordering::Acquire))
        };
        let idlest = open()
            .filter(|c| c.idle())
            .min_by_key(|c| c.last_active.load(Ordering::Acquire))
            .or_else(|| {
                open()
                    .filter(|c| c.body_started.load(Ordering::Acquire) != 0)
                    .min_by_key(|c| c.body_started.load(Ordering::Acquire))
            });
        match idlest {
            Some(c) => {
                c.evicted.store(true, Ordering::Release);
                c.close.notify_one();
                true
            }
            None => false,
        }
    }

    /// When `c` expires if nothing happens meanwhile, and why.
    fn deadline(&self, c: &Conn, limits: &ConnLimits) -> (Instant, Option<Expiry>) {
        if !c.idle() {
            return match c.body_started.load(Ordering::Acquire) {
                // Being processed: bounded by server.request_timeout_ms; look again later.
                0 => (Instant::now() + limits.idle_timeout, None),
                started => (
                    self.at(started - 1) + limits.body_read_timeout + BODY_CLOSE_AFTER,
                    Some(Expiry::Body),
                ),
            };
        }
        match c.head_started.load(Ordering::Acquire) {
            0 => (
                self.at(c.last_active.load(Ordering::Acquire)) + limits.idle_timeout,
                Some(Expiry::Idle),
            ),
            started => (
                self.at(started - 1) + limits.header_read_timeout,
                Some(Expiry::Header),
            ),
        }
    }
}

/// Counts a request in flight for as long as it lives, even when its connection is dropped.
struct InFlight(Arc<Conn>);

impl InFlight {
    fn enter(c: &Arc<Conn>) -> InFlight {
        c.in_flight.fetch_add(1, Ordering::AcqRel);
        // The head has arrived whole.
        c.head_started.store(0, Ordering::Release);
        InFlight(Arc::clone(c))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What answers requests: `starting` until `ready` is set (while the store opens and replays
/// its log, `/livez` answers and everything else says the service is starting), then `ready`.
#[derive(Clone)]
pub struct Routes {
    pub ready: Arc<OnceLock<Router>>,
    pub starting: Router,
}

impl Routes {
    fn current(&self) -> Router {
        self.ready
            .get()
            .cloned()
            .unwrap_or_else(|| self.starting.clone())
    }
}

/// Why the server closed a connection: the label of `loopguard_http_connections_closed_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct CloseLabels {
    /// `idle_timeout`, `header_timeout`, `body_timeout` or `evicted` (closed to make room at
    /// the cap).
    pub reason: &'static str,
}

/// The connection counters (registered with the service's metrics), available before the rest
/// of the service is.
#[derive(Clone)]
pub struct ConnMetrics {
    open: prometheus_client::metrics::gauge::Gauge,
    closed: prometheus_client::metrics::family::Family<
        CloseLabels,
        prometheus_client::metrics::counter::Counter,
    >,
}

impl ConnMetrics {
    pub fn new(
        open: prometheus_client::metrics::gauge::Gauge,
        closed: prometheus_client::metrics::family::Family<
            CloseLabels,
            prometheus_client::metrics::counter::Counter,
        >,
    ) -> ConnMetrics {
        ConnMetrics { open, closed }
    }

    fn closed(&self, reason: &'static str) {
        self.closed.get_or_create(&CloseLabels { reason }).inc();
    }
}

/// Serve `routes` on `listener` until `shutdown` resolves; then stop accepting, let in-flight
/// requests finish within the grace period and close everything.
pub async fn serve(
    listener: TcpListener,
    routes: Routes,
    limits: ConnLimits,
    metrics: ConnMetrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let registry = Arc::new(Registry {
        epoch: Instant::now(),
        conns: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(0),
        ended: Notify::new(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    'accepting: loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            _ = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, most likely: free one and back off a moment rather
                // than spin.
                tracing::warn!(error = %e, "accept failed");
                registry.evict_idlest();
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        // Make room under the cap: close the idlest connection, or wait for one to finish.
        while registry.open() >= limits.max_connections {
            let ended = registry.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if registry.evict_idlest() {
                metrics.closed("evicted");
                break;
            }
            tokio::select! {
                _ = ended => {}
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                _ = &mut shutdown => break 'accepting,
            }
        }
        let id = registry.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            in_flight: AtomicUsize::new(0),
            last_active: AtomicU64::new(registry.now_ms()),
            head_started: AtomicU64::new(0),
            body_started: AtomicU64::new(0),
            deadline_moved: Notify::new(),
            evicted: AtomicBool::new(false),
            close: Notify::new(),
        });
        registry
            .conns
            .lock()
            .expect("connection registry lock")
            .insert(id, Arc::clone(&conn));
        metrics.open.inc();
        let (registry, routes, stop, metrics) = (
            Arc::clone(&registry),
            routes.clone(),
            stop_rx.clone(),
            metrics.clone(),
        );
        tasks.spawn(async move {
            serve_connection(stream, &conn, &registry, routes, limits, stop, &metrics).await;
            registry
                .conns
                .lock()
                .expect("connection registry lock")
                .remove(&id);
            metrics.open.dec();
            registry.ended.notify_waiters();
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(limits.grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            event = "shutdown",
            connections = tasks.len(),
            "grace period over with requests still in flight"
        );
        tasks.abort_all();
    }
}

async fn serve_connection(
    stream: TcpStream,
    conn: &Arc<Conn>,
    registry: &Arc<Registry>,
    routes: Routes,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
    metrics: &ConnMetrics,
) {
    // Answers are small and written whole: do not hold them back for Nagle.
    let _ = stream.set_nodelay(true);
    let io = Tracked {
        inner: stream,
        conn: Arc::clone(conn),
        registry: Arc::clone(registry),
        max_header_bytes: limits.max_header_bytes,
        pending: Vec::new(),
        written: 0,
    };
    let svc_conn = Arc::clone(conn);
    let svc_registry = Arc::clone(registry);
    let body_timeout = limits.body_read_timeout;
    let svc_metrics = metrics.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        use hyper::service::Service as _;
        let guard = InFlight::enter(&svc_conn);
        let req = req.map(|body| {
            ArrivingBody::new(body, &svc_conn, &svc_registry, body_timeout, &svc_metrics)
        });
        // The router of the moment: the starting one until the store is open.
        let answer = TowerToHyperService::new(routes.current()).call(req);
        async move {
            let r = answer.await;
            drop(guard);
            r
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .keep_alive(true)
        // The head limit answers 431; the buffer must hold a head that size (hyper's minimum
        // buffer is 8 KiB, and the config does not allow less).
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.max_header_bytes.max(8192) * 2)
        // One buffer per write, so a response head hyper writes on its own is seen whole.
        .writev(false)
        // Ours, below: hyper's would also close keep-alives idle that long.
        .header_read_timeout(None);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let mut draining = false;
    loop {
        let (deadline, _) = registry.deadline(conn, &limits);
        tokio::select! {
            // A head or body began: its deadline may be earlier than the one slept on.
            _ = conn.deadline_moved.notified() => {}
            r = connection.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                // Activity may have moved the deadline: only what is still expired closes.
                let (deadline, why) = registry.deadline(conn, &limits);
                if let Some(why) = why.filter(|_| deadline <= Instant::now()) {
                    metrics.closed(why.as_str());
                    tracing::debug!(event = "connection_closed", reason = why.as_str());
                    return;
                }
            }
            _ = conn.close.notified() => return,
            _ = stop.changed(), if !draining => {
                draining = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

/// A request body that tells its connection while it is arriving (a connection waiting for a
/// body can be evicted at the cap, and is closed past the body timeout), and ends in
/// [`BodyTimeout`] if it has not arrived whole within the timeout.
struct ArrivingBody {
    inner: Incoming,
    conn: Option<Arc<Conn>>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    /// A body that times out closes its connection (its handler answers 408 and closes it):
    /// counted when it times out, before the answer is sent.
    metrics: ConnMetrics,
}

/// A request body did not arrive within `server.body_read_timeout_ms`.
#[derive(Debug)]
pub struct BodyTimeout(pub Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {} ms (server.body_read_timeout_ms)",
            self.0.as_millis()
        )
    }
}

impl std::error::Error for BodyTimeout {}

impl ArrivingBody {
    fn new(
        inner: Incoming,
        conn: &Arc<Conn>,
        registry: &Registry,
        timeout: Duration,
        metrics: &ConnMetrics,
    ) -> ArrivingBody {
        let arriving = !inner.is_end_stream();
        if arriving {
            conn.body_started
                .store(registry.now_ms() + 1, Ordering::Release);
            conn.deadline_moved.notify_one();
        }
        ArrivingBody {
            inner,
            conn: arriving.then(|| Arc::clone(conn)),
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            metrics: metrics.clone(),
        }
    }

    fn arrived(&mut self) {
        if let Some(c) = self.conn.take() {
            c.body_started.store(0, Ordering::Release);
        }
    }
}

impl Drop for ArrivingBody {
    fn drop(&mut self) {
        self.arrived();
    }
}

impl hyper::body::Body for ArrivingBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.conn.is_none() && this.inner.is_end_stream() {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if frame.is_none() || this.inner.is_end_stream() {
                    this.arrived();
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                ready!(this.deadline.as_mut().poll(cx));
                if this.conn.is_some() {
                    // Once: a body polled again after its timeout is not another close.
                    this.metrics.closed(Expiry::Body.as_str());
                }
                this.arrived();
                Poll::Ready(Some(Err(Box::new(BodyTimeout(this.timeout)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A TCP stream that tells its connection when bytes move, and rewrites the bodiless error
/// answers hyper writes on its own.
struct Tracked {
    inner: TcpStream,
    conn: Arc<Conn>,
    registry: Arc<Registry>,
    max_header_bytes: usize,
    /// A rewritten answer still to be written, and how much of it is.
    pending: Vec<u8>,
    written: usize,
}

impl Tracked {
    fn touch(&self) {
        self.conn
            .last_active
            .store(self.registry.now_ms(), Ordering::Release);
    }

    fn drain_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
            self.touch();
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            let now = this.registry.now_ms();
            this.conn.last_active.store(now, Ordering::Release);
            // Bytes while no request is in flight begin the next request head.
            if this.conn.idle()
                && this
                    .conn
                    .head_started
                    .compare_exchange(0, now + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                this.conn.deadline_moved.notify_one();
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.drain_pending(cx))?;
        if let Some(answer) = rewrite_protocol_error(buf, this.max_header_bytes) {
            this.pending = answer;
            this.written = 0;
            // Whatever is not written now goes out on the flush or shutdown that follow.
            if let Poll::Ready(Err(e)) = this.drain_pending(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        this.touch();
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// hyper's own answer to a request it could not parse is a bare head (`HTTP/1.1 431 …`,
/// `content-length: 0`, no body) written before any handler ran; our handlers never answer a
/// 4xx without a body. Such a head becomes the same status with our JSON error body.
fn rewrite_protocol_error(buf: &[u8], max_header_bytes: usize) -> Option<Vec<u8>> {
    if !(buf.starts_with(b"HTTP/1.1 4") || buf.starts_with(b"HTTP/1.0 4")) || buf.len() > 1024 {
        return None;
    }
    let head = std::str::from_utf8(buf).ok()?;
    // The whole answer is the head: nothing after the blank line.
    if !head.ends_with("\r\n\r\n") || head[..head.len() - 4].contains("\r\n\r\n") {
        return None;
    }
    if !head
        .to_ascii_lowercase()
        .contains("\r\ncontent-length: 0\r\n")
    {
        return None;
    }
    let (code, message) = match head.get(9..12)? {
        "400" => (
            "invalid_http",
            "the request is not valid HTTP/1.1: its request line or a header could not be parsed"
                .to_string(),
        ),
        "414" => ("uri_too_long", "the request target (URI) is too long".to_string()),
        "431" => (
            "headers_too_large",
            format!(
                "the request line and headers exceed {max_header_bytes} bytes (server.max_header_bytes) or number more than 100"
            ),
        ),
        _ => return None,
    };
    let status_line = head.split("\r\n").next()?;
    let body = serde_json::to_vec(&ErrorBody {
        code,
        message,
        path: None,
    })
    .ok()?;
    let mut out = format!(
        "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    Some(out)
}

/// Raise the soft limit on open files to fit `max_connections` (and the store, the model and
/// the log), up to the hard limit; warn when even that is too low. Servers commonly start with
/// a soft limit of 1024.
pub fn fit_open_file_limit(max_connections: usize) {
    #[cfg(unix)]
    {
        // Beyond the sockets: sled's files, the model, the runtime library, stdio, the listener.
        let want = max_connections as libc::rlim_t + 128;
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
        if !ok || lim.rlim_cur >= want {
            return;
        }
        let raised = libc::rlimit {
            rlim_cur: want.min(lim.rlim_max),
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0;
        let now = if set { raised.rlim_cur } else { lim.rlim_cur };
        if now < want {
            tracing::warn!(
                open_files = now,
                needed = want,
                "the open-file limit is below server.max_connections + 128; lower max_connections or raise `ulimit -n`"
            );
        } else {
            tracing::info!(open_files = now, "raised the open-file limit");
        }
    }
    #[cfg(not(unix))]
    let _ = max_connections;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_only_hyper_bodiless_error_heads() {
        let hyper_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(rewrite_protocol_error(hyper_431, 16384).unwrap()).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["code"], "headers_too_large");
        assert!(v["message"].as_str().unwrap().contains("16384"));
        assert_eq!(v["path"], serde_json::Value::Null);
        for (status, code) in [
            ("400 Bad Request", "invalid_http"),
            ("414 URI Too Long", "uri_too_long"),
        ] {
            let head = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
            let out =
                String::from_utf8(rewrite_protocol_error(head.as_bytes(), 8192).unwrap()).unwrap();
            assert!(out.contains(code), "{out}");
        }
        // Our own answers have bodies, and successes are never touched.
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n{\"code\":\"x\"}";
        assert!(rewrite_protocol_error(ours, 8192).is_none());
        let head_only = b"HTTP/1.1 404 Not Found\r\ncontent-length: 40\r\n\r\n";
        assert!(rewrite_protocol_error(head_only, 8192).is_none());
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert!(rewrite_protocol_error(ok, 8192).is_none());
    }
}
