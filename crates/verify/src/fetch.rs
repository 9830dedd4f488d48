//! Where a log's resources come from: a base URL or a local directory. Both answer
//! "the bytes at this tlog-tiles path, or absent".

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::VerifyError;
use tlogd_http::client::{BaseUrl, Client, H2cPool};

pub use tlogd_core::engine::checker::Fetch;

/// A log served over HTTP: keep-alive connections, one per concurrent request,
/// reused; or, over h2c, the shared connections of an [`H2cPool`].
#[derive(Clone)]
pub struct HttpFetcher {
    inner: Arc<HttpInner>,
}

struct HttpInner {
    url: String,
    base: BaseUrl,
    bearer: Option<String>,
    timeout: Duration,
    h2c: Option<Arc<H2cPool>>,
    idle: Mutex<Vec<Client>>,
}

impl HttpFetcher {
    /// A fetcher for the log at `url` (`http://host:port/prefix`), sending `bearer` (if
    /// any) with every request.
    pub fn new(url: &str, bearer: Option<&str>, timeout: Duration) -> Result<Self, VerifyError> {
        Self::build(url, bearer, timeout, None)
    }

    /// A fetcher for the log at `url` over HTTP/2 without TLS (h2c): every request is a
    /// stream on one of `connections` shared connections.
    pub fn h2c(
        url: &str,
        bearer: Option<&str>,
        timeout: Duration,
        connections: usize,
    ) -> Result<Self, VerifyError> {
        let base = BaseUrl::parse(url).map_err(|e| VerifyError::Fetch(e.to_string()))?;
        let pool =
            H2cPool::new(base, connections).map_err(|e| VerifyError::Fetch(e.to_string()))?;
        Self::build(url, bearer, timeout, Some(pool))
    }

    fn build(
        url: &str,
        bearer: Option<&str>,
        timeout: Duration,
        h2c: Option<Arc<H2cPool>>,
    ) -> Result<Self, VerifyError> {
        let base = BaseUrl::parse(url).map_err(|e| VerifyError::Fetch(e.to_string()))?;
        // Build one client now so a bad token or host fails here, not on first use.
        let first = Self::client(&base, bearer, timeout, h2c.as_ref())?;
        Ok(HttpFetcher {
            inner: Arc::new(HttpInner {
                url: url.trim_end_matches('/').to_string(),
                base,
                bearer: bearer.map(str::to_string),
                timeout,
                h2c,
                idle: Mutex::new(vec![first]),
            }),
        })
    }

    fn client(
        base: &BaseUrl,
        bearer: Option<&str>,
        timeout: Duration,
        h2c: Option<&Arc<H2cPool>>,
    ) -> Result<Client, VerifyError> {
        match h2c {
            Some(pool) => Client::h2c(pool.clone(), bearer, timeout),
            None => Client::new(base.clone(), bearer, timeout),
        }
        .map_err(|e| VerifyError::Fetch(e.to_string()))
    }

    fn take(&self) -> Result<Client, VerifyError> {
        let pooled = self
            .inner
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        match pooled {
            Some(c) => Ok(c),
            None => Self::client(
                &self.inner.base,
                self.inner.bearer.as_deref(),
                self.inner.timeout,
                self.inner.h2c.as_ref(),
            ),
        }
    }
}

impl Fetch for HttpFetcher {
    async fn get(&self, path: &str) -> Result<Option<Bytes>, VerifyError> {
        let mut client = self.take()?;
        let got = client.get(path).await;
        self.inner
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(client);
        got.map_err(|e| VerifyError::Fetch(e.to_string()))
    }

    fn location(&self) -> String {
        self.inner.url.clone()
    }
}

/// A log in a local directory laid out at the tlog-tiles paths (tlogd's POSIX
/// storage, Tessera's POSIX storage, a mirror).
#[derive(Clone)]
pub struct DirFetcher {
    root: Arc<PathBuf>,
}

impl DirFetcher {
    /// The log rooted at `root`.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, VerifyError> {
        let root = root.as_ref();
        if !root.is_dir() {
            return Err(VerifyError::Fetch(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        Ok(DirFetcher {
            root: Arc::new(root.to_path_buf()),
        })
    }
}

impl Fetch for DirFetcher {
    async fn get(&self, path: &str) -> Result<Option<Bytes>, VerifyError> {
        // Paths come from this crate (tlog-tiles paths), never from the log itself.
        let full = self.root.join(path);
        match tokio::fs::read(&full).await {
            Ok(b) => Ok(Some(Bytes::from(b))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(VerifyError::Fetch(format!(
                "reading {}: {e}",
                full.display()
            ))),
        }
    }

    fn location(&self) -> String {
        self.root.display().to_string()
    }
}
