//! A lean keep-alive HTTP/1.1 client: one hyper connection per task, reconnected on
//! error. No pooling layer, no per-request allocation beyond the body. `https://` URLs
//! use TLS (rustls) with the system's root certificates, or those of the PEM file named
//! by `SSL_CERT_FILE`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A failed request.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No complete answer within the client's timeout (the connection is dropped).
    #[error("{0}")]
    Timeout(String),
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

/// HTTP/1.1 over `io`; the connection is driven by a task of its own.
async fn handshake<T>(io: T, authority: &str) -> Result<SendRequest<Full<Bytes>>, ClientError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| err(format!("connecting to {authority}: {e}")))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One connection's worth of client.
pub struct Client {
    base: BaseUrl,
    auth: Option<HeaderValue>,
    timeout: Duration,
    sender: Option<SendRequest<Full<Bytes>>>,
    host: HeaderValue,
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

impl Client {
    /// A client for `base`; connects lazily.
    pub fn new(
        base: BaseUrl,
        bearer: Option<&str>,
        timeout: Duration,
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
            sender: None,
            host,
        })
    }

    async fn connect(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, ClientError> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            let authority = &self.base.authority;
            let stream = TcpStream::connect(authority)
                .await
                .map_err(|e| err(format!("connecting to {authority}: {e}")))?;
            stream
                .set_nodelay(true)
                .map_err(|e| err(format!("connecting to {authority}: {e}")))?;
            let sender = match &self.base.tls_name {
                None => handshake(stream, authority).await?,
                Some(name) => {
                    let server = rustls::pki_types::ServerName::try_from(name.clone())
                        .map_err(|e| err(format!("{name}: {e}")))?;
                    let tls = tokio_rustls::TlsConnector::from(tls_config()?)
                        .connect(server, stream)
                        .await
                        .map_err(|e| err(format!("TLS with {authority}: {e}")))?;
                    handshake(tls, authority).await?
                }
            };
            self.sender = Some(sender);
        }
        self.sender.as_mut().ok_or_else(|| err("not connected"))
    }

    /// Send one request to `path` (relative to the base URL).
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Response, ClientError> {
        let uri = format!("{}/{}", self.base.prefix, path.trim_start_matches('/'));
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .body(Full::new(body))
            .map_err(|e| err(format!("{path}: {e}")))?;
        req.headers_mut().insert(HOST, self.host.clone());
        if let Some(a) = &self.auth {
            req.headers_mut().insert(AUTHORIZATION, a.clone());
        }
        let timeout = self.timeout;
        let result = tokio::time::timeout(timeout, async {
            let sender = self.connect().await?;
            sender
                .ready()
                .await
                .map_err(|e| err(format!("{path}: {e}")))?;
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| err(format!("{path}: {e}")))?;
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get(hyper::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let duplicate = resp
                .headers()
                .get("x-tlog-duplicate")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| err(format!("{path}: {e}")))?
                .to_bytes();
            Ok::<_, ClientError>(Response {
                status,
                retry_after,
                duplicate,
                body,
            })
        })
        .await;
        match result {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                self.sender = None;
                Err(e)
            }
            Err(_) => {
                self.sender = None;
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
