//! A lean keep-alive HTTP client. Over HTTP/1.1 each [`Client`] owns one connection,
//! reconnected on error: over plain TCP driven by the requesting task itself (`h1`),
//! over TLS a hyper connection; over HTTP/2 (h2c, prior knowledge, or over TLS with
//! ALPN `h2`) many clients share the few connections of an [`H2cPool`] and their
//! requests are multiplexed. No pooling layer, no per-request allocation beyond the
//! body (the URI of the last path is kept). `https://` URLs use TLS (rustls) with the system's root
//! certificates, or those of the PEM file named by `SSL_CERT_FILE`.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1;
use hyper::header::{AUTHORIZATION, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::yield_first::YieldFirst;
use h1::PlainH1;

mod h1;

/// A failed request.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No complete answer within the client's timeout (the connection is dropped).
    #[error("{0}")]
    Timeout(String),
    /// The connection could not be made: the request never left this process.
    #[error("{0}")]
    Unsent(String),
    /// A transport or TLS error, an unexpected status, or a bad URL.
    #[error("{0}")]
    Other(String),
}

fn err(msg: impl Into<String>) -> ClientError {
    ClientError::Other(msg.into())
}

/// A parsed `http://host:port/prefix` or `https://...` base URL.
#[derive(Clone, Debug)]
pub struct BaseUrl {
    /// `host:port` to connect to.
    pub authority: String,
    /// Path prefix without a trailing slash.
    pub prefix: String,
    /// For `https://`: the server name its certificate must be valid for.
    pub tls_name: Option<String>,
}

impl BaseUrl {
    /// Parse an `http://` or `https://` URL.
    pub fn parse(url: &str) -> Result<Self, ClientError> {
        let (rest, tls, default_port) = if let Some(r) = url.strip_prefix("http://") {
            (r, false, 80)
        } else if let Some(r) = url.strip_prefix("https://") {
            (r, true, 443)
        } else {
            return Err(err(format!("{url}: not an http:// or https:// URL")));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        // `host`, `host:port`, `[v6]` or `[v6]:port`.
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !p.contains(']') => (h, Some(p)),
            _ => (authority, None),
        };
        if host.is_empty() || port.is_some_and(|p| p.parse::<u16>().is_err()) {
            return Err(err(format!("{url}: not a host[:port]")));
        }
        let port = port.map_or(default_port, |p| p.parse().unwrap_or(default_port));
        Ok(BaseUrl {
            authority: format!("{host}:{port}"),
            prefix: path.trim_end_matches('/').to_string(),
            tls_name: tls.then(|| {
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string()
            }),
        })
    }
}

/// The TLS client configuration, built once: rustls with ring, the system's roots (or
/// `SSL_CERT_FILE`'s), HTTP/1.1 over ALPN.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, ClientError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = rustls::RootCertStore::empty();
            for cert in found.certs {
                // A certificate rustls cannot use is skipped, as by every TLS client.
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                let why: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
                return Err(format!(
                    "no trusted root certificates (system store or SSL_CERT_FILE): {}",
                    why.join("; ")
                ));
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
        .map_err(ClientError::Other)
}

/// [`tls_config`] offering only `h2` over ALPN, for [`H2cPool`]'s `https://` bases.
fn tls_config_h2() -> Result<Arc<rustls::ClientConfig>, ClientError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut config = (*tls_config().map_err(|e| e.to_string())?).clone();
            config.alpn_protocols = vec![b"h2".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
        .map_err(ClientError::Other)
}

/// TLS over `stream` to `name` (at `authority`, for errors) with `config`.
async fn tls_connect(
    stream: TcpStream,
    name: &str,
    authority: &str,
    config: Arc<rustls::ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, ClientError> {
    let server = rustls::pki_types::ServerName::try_from(name.to_string())
        .map_err(|e| err(format!("{name}: {e}")))?;
    tokio_rustls::TlsConnector::from(config)
        .connect(server, stream)
        .await
        .map_err(|e| err(format!("TLS with {authority}: {e}")))
}

/// HTTP/2 over `io` (`what`: "h2c" or "h2", for errors); the connection is driven by a
/// task of its own, which clears `alive` when it ends.
async fn h2_handshake<T>(
    builder: &h2::client::Builder,
    io: T,
    authority: &str,
    what: &str,
    alive: Arc<AtomicBool>,
) -> Result<h2::client::SendRequest<Bytes>, ClientError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = builder
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| err(format!("connecting to {authority} ({what}): {e}")))?;
    tokio::spawn(async move {
        let _ = YieldFirst::new(connection).await;
        alive.store(false, Ordering::Release);
    });
    Ok(send)
}

/// HTTP/1.1 over `io`; the connection is driven by a task of its own.
async fn handshake<T>(
    io: T,
    authority: &str,
) -> Result<http1::SendRequest<Full<Bytes>>, ClientError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| err(format!("connecting to {authority}: {e}")))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn tcp(authority: &str) -> Result<TcpStream, ClientError> {
    let stream = TcpStream::connect(authority)
        .await
        .map_err(|e| ClientError::Unsent(format!("connecting to {authority}: {e}")))?;
    stream
        .set_nodelay(true)
        .map_err(|e| err(format!("connecting to {authority}: {e}")))?;
    Ok(stream)
}

/// An open h2c connection: a handle to start streams on it, and whether the task
/// driving it is still running.
#[derive(Clone)]
struct H2Conn {
    send: h2::client::SendRequest<Bytes>,
    alive: Arc<AtomicBool>,
}

impl H2Conn {
    fn is_open(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

/// A few HTTP/2 connections (h2c, or over TLS to an `https://` base) to one base URL,
/// shared by any number of [`Client`]s: their requests are multiplexed, up to the server's
/// limit of concurrent streams per connection (more wait their turn). A connection
/// that closes (the server's idle timeout, `GOAWAY`, an error) is replaced on next use.
///
/// Requests go straight to the `h2` crate: a request's head and its small body are
/// queued on the connection from the calling task, where hyper's client would spawn a
/// task per request to feed the body, which cost the load generator a fifth of its CPU
/// per add.
pub struct H2cPool {
    base: BaseUrl,
    slots: Vec<tokio::sync::Mutex<Option<H2Conn>>>,
    next: AtomicUsize,
}

impl H2cPool {
    /// A pool of `connections` (at least one) to `base`, opened lazily: h2c (prior
    /// knowledge) to an `http://` base, HTTP/2 over TLS (ALPN `h2`) to an `https://` one.
    pub fn new(base: BaseUrl, connections: usize) -> Result<Arc<Self>, ClientError> {
        Ok(Arc::new(H2cPool {
            base,
            slots: (0..connections.max(1))
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            next: AtomicUsize::new(0),
        }))
    }

    /// The base URL the pool connects to.
    pub fn base(&self) -> &BaseUrl {
        &self.base
    }

    /// Connection `slot`, connecting if it is not open.
    async fn conn(&self, slot: usize) -> Result<H2Conn, ClientError> {
        let mut s = self.slots[slot % self.slots.len()].lock().await;
        if let Some(open) = s.as_ref().filter(|c| c.is_open()) {
            return Ok(open.clone());
        }
        let authority = &self.base.authority;
        let mut builder = h2::client::Builder::new();
        // Room for many tile and bundle reads in flight without waiting for window
        // updates; adds are tiny either way.
        builder
            .initial_window_size(1 << 20)
            .initial_connection_window_size(16 << 20);
        let stream = tcp(authority).await?;
        let alive = Arc::new(AtomicBool::new(true));
        let send = match &self.base.tls_name {
            None => h2_handshake(&builder, stream, authority, "h2c", alive.clone()).await?,
            Some(name) => {
                let tls = tls_connect(stream, name, authority, tls_config_h2()?).await?;
                if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
                    return Err(err(format!("{authority} did not agree to h2 over ALPN")));
                }
                h2_handshake(&builder, tls, authority, "h2", alive.clone()).await?
            }
        };
        let conn = H2Conn { send, alive };
        *s = Some(conn.clone());
        Ok(conn)
    }
}

/// One request on an h2c connection: head and body queued at once, the response read
/// whole (its flow-control window released as it arrives).
/// The largest body a [`Client`] accepts unless told otherwise
/// ([`Client::with_max_body`]): a full tlog-tiles entry bundle, 256 entries of the
/// largest size with their length prefixes (tlog-tiles "Log entries").
pub const DEFAULT_MAX_BODY: usize = 256 * (2 + 65_535);

/// How an HTTP/2 exchange failed.
enum H2Failure {
    Stream(h2::Error),
    /// The body went over the client's limit; the stream was reset.
    TooLarge(usize),
}

async fn h2_exchange(
    conn: &H2Conn,
    req: Request<()>,
    body: Bytes,
    max_body: usize,
) -> Result<(hyper::http::response::Parts, Bytes), H2Failure> {
    let (parts, mut recv) = h2_send(conn, req, body).await.map_err(H2Failure::Stream)?;
    let mut whole: Option<Bytes> = None;
    let mut more: Vec<u8> = Vec::new();
    let mut received = 0usize;
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.map_err(H2Failure::Stream)?;
        let _ = recv.flow_control().release_capacity(chunk.len());
        received = received.saturating_add(chunk.len());
        if received > max_body {
            // Dropping `recv` resets the stream: nothing more is sent or kept.
            return Err(H2Failure::TooLarge(max_body));
        }
        match &whole {
            // The usual case, a body in one DATA frame: kept without a copy.
            None if more.is_empty() => whole = Some(chunk),
            _ => {
                if let Some(first) = whole.take() {
                    more.extend_from_slice(&first);
                }
                more.extend_from_slice(&chunk);
            }
        }
    }
    Ok((parts, whole.unwrap_or_else(|| Bytes::from(more))))
}

/// Send a request on an h2 connection; the answer's head and its body stream.
async fn h2_send(
    conn: &H2Conn,
    req: Request<()>,
    body: Bytes,
) -> Result<(hyper::http::response::Parts, h2::RecvStream), h2::Error> {
    let mut send = conn.send.clone().ready().await?;
    let (response, mut stream) = send.send_request(req, body.is_empty())?;
    if !body.is_empty() {
        // The server may answer and close the stream as soon as it has the head (a 401
        // or 413 without reading the body), even before this line runs: then the data
        // has nowhere to go and the answer below is what counts.
        let _ = stream.send_data(body, true);
    }
    Ok(response.await?.into_parts())
}

/// A stream the server refused (`REFUSED_STREAM`: over its concurrent-stream limit
/// before the client knew it, as with 256 writers against a server allowing 250), or a
/// kept connection it was closing: nothing was done, the request can go again.
fn h2_retryable(e: &h2::Error, reused: bool) -> bool {
    e.reason() == Some(h2::Reason::REFUSED_STREAM) || (reused && e.is_go_away())
}

/// How a client reaches the server.
enum Conn {
    /// Its own HTTP/1.1 connection over plain TCP, and the head of the last request
    /// (method, path, and the head's bytes up to its `Content-Length`).
    Plain {
        conn: Option<PlainH1>,
        head: Option<(Method, String, Vec<u8>)>,
        request: Vec<u8>,
    },
    /// Its own HTTP/1.1 connection over TLS.
    H1(Option<http1::SendRequest<Full<Bytes>>>),
    /// Streams on a shared h2c connection; `conn` is this client's handle on it.
    H2 {
        pool: Arc<H2cPool>,
        slot: usize,
        conn: Option<H2Conn>,
    },
}

/// One connection's worth of client (HTTP/1.1), or one user of a shared h2c pool.
pub struct Client {
    base: BaseUrl,
    auth: Option<HeaderValue>,
    timeout: Duration,
    conn: Conn,
    host: HeaderValue,
    /// The last path requested and its URI (writers request the same path every time).
    last_uri: Option<(String, Uri)>,
    /// The largest response body accepted ([`Client::with_max_body`]).
    max_body: usize,
    /// Ask a kept-alive HTTP/1.1 connection whether the server closed it before every
    /// request, not only after a second idle ([`Client::with_close_probe`]).
    probe_always: bool,
    /// An exchange is under way. Found set when a request starts, the previous one was
    /// cancelled midway (its future dropped: a caller's timeout, a witness not waited
    /// for): its answer may still arrive on the connection and must not be read as
    /// this request's, so the connection is dropped.
    in_exchange: bool,
}

/// A response: status, `Retry-After` seconds, duplicate marker, body.
pub struct Response {
    /// HTTP status.
    pub status: StatusCode,
    /// `Retry-After` in seconds, if sent.
    pub retry_after: Option<u64>,
    /// `X-Tlog-Duplicate: true` was sent.
    pub duplicate: bool,
    /// The body.
    pub body: Bytes,
}

impl Response {
    fn from_parts(status: &StatusCode, headers: &hyper::HeaderMap, body: Bytes) -> Self {
        Response {
            status: *status,
            retry_after: headers
                .get(hyper::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok()),
            duplicate: headers
                .get("x-tlog-duplicate")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true")),
            body,
        }
    }
}

/// A plain HTTP/1.1 request's head for `method` and `uri`, up to where its
/// `Content-Length` goes.
fn request_head(
    method: &Method,
    uri: &Uri,
    host: &HeaderValue,
    auth: Option<&HeaderValue>,
) -> Vec<u8> {
    let mut h = Vec::with_capacity(128);
    h.extend_from_slice(method.as_str().as_bytes());
    h.push(b' ');
    h.extend_from_slice(uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes());
    h.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    h.extend_from_slice(host.as_bytes());
    h.extend_from_slice(b"\r\n");
    if let Some(a) = auth {
        h.extend_from_slice(b"authorization: ");
        h.extend_from_slice(a.as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    h
}

/// How one try of a request failed.
enum Attempt {
    /// Before the server can have acted on it (or a GET): worth one more try on a
    /// fresh connection.
    Retry(ClientError),
    /// For good.
    Fail(ClientError),
}

impl Attempt {
    fn into_error(self) -> ClientError {
        match self {
            Attempt::Retry(e) | Attempt::Fail(e) => e,
        }
    }
}

/// A request that failed before the server can have acted on it, or that is safe to
/// send twice: worth one more try on a fresh connection. A kept-alive connection the
/// server closed while idle (its idle timeout) fails the next request this way.
fn retryable(method: &Method, e: &hyper::Error) -> bool {
    e.is_canceled() || (method == Method::GET && (e.is_incomplete_message() || e.is_closed()))
}

impl Client {
    /// A client for `base` with a connection of its own (HTTP/1.1); connects lazily.
    pub fn new(
        base: BaseUrl,
        bearer: Option<&str>,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let conn = if base.tls_name.is_some() {
            Conn::H1(None)
        } else {
            Conn::Plain {
                conn: None,
                head: None,
                request: Vec::new(),
            }
        };
        Self::with_conn(base, bearer, timeout, conn)
    }

    /// A client sending its requests over the shared h2c connections of `pool`
    /// (clients are spread over them in turn).
    pub fn h2c(
        pool: Arc<H2cPool>,
        bearer: Option<&str>,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let slot = pool.next.fetch_add(1, Ordering::Relaxed);
        let base = pool.base.clone();
        Self::with_conn(
            base,
            bearer,
            timeout,
            Conn::H2 {
                pool,
                slot,
                conn: None,
            },
        )
    }

    fn with_conn(
        base: BaseUrl,
        bearer: Option<&str>,
        timeout: Duration,
        conn: Conn,
    ) -> Result<Self, ClientError> {
        let auth = match bearer {
            // Never echo the token in the error.
            Some(t) => Some(
                HeaderValue::from_str(&format!("Bearer {t}"))
                    .map_err(|_| err("the bearer token is not a valid header value"))?,
            ),
            None => None,
        };
        let host = HeaderValue::from_str(&base.authority)
            .map_err(|_| err(format!("{}: not a valid host", base.authority)))?;
        Ok(Client {
            base,
            auth,
            timeout,
            conn,
            host,
            last_uri: None,
            max_body: DEFAULT_MAX_BODY,
            probe_always: false,
            in_exchange: false,
        })
    }

    /// Before each request on a kept-alive HTTP/1.1 connection, ask the socket (one
    /// non-blocking read) whether the server has closed it, however briefly it was
    /// idle: a request written into a connection the server closed (it exited) fails
    /// as never sent ([`ClientError::Unsent`] once a fresh connection is refused)
    /// instead of "sent, no answer". For requests that must not be in doubt (a
    /// forward between frontends).
    pub fn with_close_probe(mut self) -> Self {
        self.probe_always = true;
        self
    }

    /// Accept response bodies of at most `max_body` bytes (default
    /// [`DEFAULT_MAX_BODY`], a full entry bundle); a larger one fails the request as soon
    /// as it is known to be larger, before it is read, so a hostile or broken server
    /// cannot run this process out of memory. Set it to the most the answers of this
    /// use can hold (a witness's cosignature: a few hundred bytes).
    pub fn with_max_body(mut self, max_body: usize) -> Self {
        self.max_body = max_body;
        self
    }

    /// The URI of `path`: origin-form for HTTP/1.1, absolute for HTTP/2 (whose
    /// `:scheme` and `:authority` come from it).
    fn uri(&mut self, path: &str) -> Result<Uri, ClientError> {
        if let Some((p, u)) = &self.last_uri
            && p == path
        {
            return Ok(u.clone());
        }
        let rel = format!("{}/{}", self.base.prefix, path.trim_start_matches('/'));
        let full = match self.conn {
            Conn::H1(_) | Conn::Plain { .. } => rel,
            Conn::H2 { .. } => {
                let scheme = if self.base.tls_name.is_some() {
                    "https"
                } else {
                    "http"
                };
                format!("{scheme}://{}{rel}", self.base.authority)
            }
        };
        let uri: Uri = full.parse().map_err(|e| err(format!("{path}: {e}")))?;
        self.last_uri = Some((path.to_string(), uri.clone()));
        Ok(uri)
    }

    async fn connect_h1(&mut self) -> Result<&mut http1::SendRequest<Full<Bytes>>, ClientError> {
        let Conn::H1(slot) = &mut self.conn else {
            return Err(err("not an HTTP/1.1 client"));
        };
        if slot.as_ref().is_none_or(|s| s.is_closed()) {
            let authority = &self.base.authority;
            let stream = tcp(authority).await?;
            let sender = match &self.base.tls_name {
                None => handshake(stream, authority).await?,
                Some(name) => {
                    handshake(
                        tls_connect(stream, name, authority, tls_config()?).await?,
                        authority,
                    )
                    .await?
                }
            };
            *slot = Some(sender);
        }
        slot.as_mut().ok_or_else(|| err("not connected"))
    }

    /// Send one request on this client's connection (opening one if needed) and read
    /// the whole answer.
    /// `uri` is `None` only when a plain HTTP/1.1 client has the head for `method` and
    /// `path` already.
    async fn send_once(
        &mut self,
        method: &Method,
        uri: Option<&Uri>,
        body: Bytes,
        path: &str,
    ) -> Result<Response, Attempt> {
        let fail = |e: &dyn std::fmt::Display| err(format!("{path}: {e}"));
        if let Conn::Plain {
            conn,
            head,
            request,
        } = &mut self.conn
        {
            let probe = self.probe_always;
            let reused = conn.as_mut().is_some_and(|c| c.is_open_probed(probe));
            if !reused {
                *conn = Some(
                    PlainH1::connect(&self.base.authority, self.max_body)
                        .await
                        .map_err(|e| Attempt::Fail(ClientError::Unsent(e)))?,
                );
            }
            let c = conn
                .as_mut()
                .ok_or_else(|| Attempt::Fail(err("not connected")))?;
            if let Some(uri) = uri {
                let h = request_head(method, uri, &self.host, self.auth.as_ref());
                *head = Some((method.clone(), path.to_string(), h));
            }
            let prefix = head.as_ref().map_or(&[][..], |(_, _, h)| &h[..]);
            request.clear();
            request.extend_from_slice(prefix);
            if !body.is_empty() || *method != Method::GET {
                let _ = write!(request, "content-length: {}\r\n", body.len());
            }
            request.extend_from_slice(b"\r\n");
            request.extend_from_slice(&body);
            return c.exchange(request).await.map_err(|f| {
                let e = fail(&f.msg);
                if reused && (f.unsent || (f.before_answer && *method == Method::GET)) {
                    Attempt::Retry(e)
                } else {
                    Attempt::Fail(e)
                }
            });
        }
        let uri = uri.ok_or_else(|| Attempt::Fail(err(format!("{path}: no URI"))))?;
        if let Conn::H2 { pool, slot, conn } = &mut self.conn {
            let reused = conn.as_ref().is_some_and(H2Conn::is_open);
            if !reused {
                *conn = Some(pool.conn(*slot).await.map_err(Attempt::Fail)?);
            }
            let c = conn
                .as_ref()
                .ok_or_else(|| Attempt::Fail(err("not connected")))?;
            let mut req = Request::new(());
            *req.method_mut() = method.clone();
            *req.uri_mut() = uri.clone();
            if let Some(a) = &self.auth {
                req.headers_mut().insert(AUTHORIZATION, a.clone());
            }
            return match h2_exchange(c, req, body, self.max_body).await {
                Ok((parts, body)) => Ok(Response::from_parts(&parts.status, &parts.headers, body)),
                Err(H2Failure::Stream(e)) if h2_retryable(&e, reused) => {
                    Err(Attempt::Retry(fail(&e)))
                }
                Err(H2Failure::Stream(e)) => Err(Attempt::Fail(fail(&e))),
                Err(H2Failure::TooLarge(max)) => Err(Attempt::Fail(fail(&format!(
                    "response refused: a body over the {max}-byte limit for this request"
                )))),
            };
        }
        let reused = matches!(&self.conn, Conn::H1(Some(s)) if !s.is_closed());
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = method.clone();
        *req.uri_mut() = uri.clone();
        req.headers_mut().insert(HOST, self.host.clone());
        if let Some(a) = &self.auth {
            req.headers_mut().insert(AUTHORIZATION, a.clone());
        }
        let sender = self.connect_h1().await.map_err(Attempt::Fail)?;
        sender.ready().await.map_err(|e| Attempt::Fail(fail(&e)))?;
        let resp = sender.send_request(req).await.map_err(|e| {
            if reused && retryable(method, &e) {
                Attempt::Retry(fail(&e))
            } else {
                Attempt::Fail(fail(&e))
            }
        })?;
        let (parts, incoming) = resp.into_parts();
        let max = self.max_body;
        let body = Limited::new(incoming, max)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    Attempt::Fail(fail(&format!(
                        "response refused: a body over the {max}-byte limit for this request"
                    )))
                } else {
                    Attempt::Fail(fail(&e))
                }
            })?
            .to_bytes();
        Ok(Response::from_parts(&parts.status, &parts.headers, body))
    }

    fn drop_connection(&mut self) {
        match &mut self.conn {
            Conn::Plain { conn, .. } => *conn = None,
            Conn::H1(s) => *s = None,
            Conn::H2 { conn, .. } => *conn = None,
        }
    }

    /// Send one request to `path` (relative to the base URL).
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Response, ClientError> {
        // A plain HTTP/1.1 client sending the same request as last time has its head.
        let same_head = matches!(&self.conn, Conn::Plain { head: Some((m, p, _)), .. }
            if *m == method && p == path);
        let uri = if same_head {
            None
        } else {
            Some(self.uri(path)?)
        };
        if self.in_exchange {
            self.drop_connection();
        }
        self.in_exchange = true;
        let timeout = self.timeout;
        let result = tokio::time::timeout(timeout, async {
            match self
                .send_once(&method, uri.as_ref(), body.clone(), path)
                .await
            {
                Ok(r) => Ok(r),
                Err(Attempt::Retry(_stale)) => {
                    self.drop_connection();
                    self.send_once(&method, uri.as_ref(), body, path)
                        .await
                        .map_err(Attempt::into_error)
                }
                Err(Attempt::Fail(e)) => Err(e),
            }
        })
        .await;
        self.in_exchange = false;
        match result {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                self.drop_connection();
                Err(e)
            }
            Err(_) => {
                self.drop_connection();
                Err(ClientError::Timeout(format!(
                    "request to {path} timed out after {timeout:?}"
                )))
            }
        }
    }

    /// GET `path`; `Ok(None)` on 404.
    pub async fn get(&mut self, path: &str) -> Result<Option<Bytes>, ClientError> {
        let r = self.send(Method::GET, path, Bytes::new()).await?;
        match r.status {
            StatusCode::OK => Ok(Some(r.body)),
            StatusCode::NOT_FOUND => Ok(None),
            s => Err(err(format!("GET {path}: HTTP {s}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A hostile h2c server: every request is answered 200 and then DATA, 16 KiB at a
    /// time, until the client resets the stream or 16 MiB are sent (then it holds the
    /// stream open without a word, so a client without a limit waits for its timeout).
    async fn h2_stream_forever() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let (sock, _) = listener.accept().await.expect("accept");
            let mut conn = h2::server::handshake(sock).await.expect("handshake");
            while let Some(Ok((_req, mut respond))) = conn.accept().await {
                tokio::spawn(async move {
                    let answer = hyper::Response::new(());
                    let Ok(mut send) = respond.send_response(answer, false) else {
                        return;
                    };
                    let chunk = Bytes::from(vec![b'x'; 16 << 10]);
                    let mut sent = 0;
                    while sent < 16 << 20 {
                        send.reserve_capacity(chunk.len());
                        match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
                            Some(Ok(n)) if n > 0 => {
                                if send.send_data(chunk.slice(..n), false).is_err() {
                                    return;
                                }
                                sent += n;
                            }
                            Some(Ok(_)) => {}
                            _ => return,
                        }
                    }
                    std::future::pending::<()>().await;
                });
            }
        });
        addr
    }

    /// An h2c answer whose body never ends is cut at the client's limit: the request
    /// fails as over the limit, long before its timeout.
    #[tokio::test]
    async fn an_endless_h2_body_is_cut_at_the_limit() {
        let addr = h2_stream_forever().await;
        let base = BaseUrl::parse(&format!("http://{addr}")).expect("url");
        let pool = H2cPool::new(base, 1).expect("pool");
        let mut c = Client::h2c(pool, None, Duration::from_secs(10))
            .expect("client")
            .with_max_body(64 << 10);
        let e = c.get("tile/entries/000").await.expect_err("refused");
        assert!(e.to_string().contains("over the 65536-byte limit"), "{e}");
    }
}
