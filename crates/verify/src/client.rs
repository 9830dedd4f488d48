//! A lean keep-alive HTTP/1.1 client: one hyper connection per task, reconnected on
//! error. No pooling layer, no per-request allocation beyond the body.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A failed request: transport error, timeout, unexpected status or a bad URL.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ClientError(pub String);

fn err(msg: impl Into<String>) -> ClientError {
    ClientError(msg.into())
}

/// A parsed `http://host:port/prefix` base URL.
#[derive(Clone, Debug)]
pub struct BaseUrl {
    /// `host:port` to connect to.
    pub authority: String,
    /// Path prefix without a trailing slash.
    pub prefix: String,
}

impl BaseUrl {
    /// Parse an `http://` URL (https is not supported: run a TLS proxy).
    pub fn parse(url: &str) -> Result<Self, ClientError> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| err(format!("{url}: only http:// URLs are supported")))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(err(format!("{url}: missing host")));
        }
        let authority = if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(BaseUrl {
            authority,
            prefix: path.trim_end_matches('/').to_string(),
        })
    }
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
            let stream = TcpStream::connect(&self.base.authority)
                .await
                .map_err(|e| err(format!("connecting to {}: {e}", self.base.authority)))?;
            stream
                .set_nodelay(true)
                .map_err(|e| err(format!("connecting to {}: {e}", self.base.authority)))?;
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| err(format!("connecting to {}: {e}", self.base.authority)))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
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
                Err(err(format!(
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
