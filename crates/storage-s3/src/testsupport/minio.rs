//! A private MinIO server: `minio server <tmpdir> --address 127.0.0.1:<free>`, root
//! credentials given explicitly, buckets created with a signed request.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tlogd_storage_object::conformance::ObjectServer;
use tlogd_storage_object::{ClientTuning, ObjectStoreBackend};

use super::sigv4;
use crate::S3Options;
use tlogd_storage_object::testsupport::{
    ServerProcess, find_tool, free_port, http, no_metadata_services, server_dir,
};

/// The root user of every test server.
pub const ACCESS_KEY: &str = "tlogd-test";
/// The root password of every test server.
pub const SECRET_KEY: &str = "tlogd-test-secret-key";
/// The region buckets are created in.
pub const REGION: &str = "us-east-1";

/// A MinIO server of the test process.
pub struct TestMinio {
    process: ServerProcess,
    binary: PathBuf,
    data: PathBuf,
    port: u16,
    console_port: u16,
    _dir: tempfile::TempDir,
}

static SHARED: OnceLock<TestMinio> = OnceLock::new();
static BUCKETS: AtomicU64 = AtomicU64::new(0);

impl TestMinio {
    /// The server shared by the tests of this process (started on first use; tests use
    /// buckets of their own).
    pub fn shared() -> &'static TestMinio {
        SHARED.get_or_init(TestMinio::start)
    }

    /// A server of the caller's own (one it may stop).
    pub fn start() -> TestMinio {
        no_metadata_services();
        let binary = find_tool("minio");
        let dir = server_dir("tlogd-minio-");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data)
            .unwrap_or_else(|e| panic!("creating {}: {e}", data.display()));
        let m = TestMinio {
            process: ServerProcess::new("the test MinIO", dir.path().join("minio.log")),
            binary,
            data,
            port: free_port(),
            console_port: free_port(),
            _dir: dir,
        };
        m.launch();
        m
    }

    fn launch(&self) {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("server")
            .arg(&self.data)
            .args(["--address", &format!("127.0.0.1:{}", self.port)])
            .args([
                "--console-address",
                &format!("127.0.0.1:{}", self.console_port),
            ])
            .arg("--certs-dir")
            .arg(self.data.with_file_name("certs"))
            .arg("--quiet")
            .env("MINIO_ROOT_USER", ACCESS_KEY)
            .env("MINIO_ROOT_PASSWORD", SECRET_KEY)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            .env("AWS_EC2_METADATA_DISABLED", "true");
        let port = self.port;
        // /minio/health/ready answers 200 before the server takes bucket operations
        // ("XMinioServerNotInitialized"): wait for a signed ListBuckets to work.
        self.process
            .launch(cmd, port, Duration::from_secs(60), move || {
                let r = signed(port, "GET", "/", "", b"", Duration::from_secs(2))?;
                match r.status {
                    200 => Ok(()),
                    s => Err(format!("ListBuckets answered {s}: {}", r.text())),
                }
            });
    }

    /// The S3 port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Create bucket `name`; panics with MinIO's answer if it refuses. A server still
    /// initialising (503) is waited for, up to 30 s.
    pub fn create_bucket(&self, name: &str) {
        let path = format!("/{name}");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let r = signed(self.port, "PUT", &path, "", b"", Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("creating bucket {name}: {e}"));
            match r.status {
                200 => return,
                503 if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                s => panic!("creating bucket {name}: MinIO answered {s}: {}", r.text()),
            }
        }
    }

    /// Let anyone read the public objects of the log below `prefix` of `bucket` (the
    /// checkpoint and `tile/`), and nothing else: how a log is served straight from
    /// its bucket.
    pub fn set_public_read(&self, bucket: &str, prefix: &str) {
        let base = match prefix.trim_matches('/') {
            "" => bucket.to_string(),
            p => format!("{bucket}/{p}"),
        };
        let policy = serde_json::json!({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow",
                "Principal": { "AWS": ["*"] },
                "Action": ["s3:GetObject"],
                "Resource": [
                    format!("arn:aws:s3:::{base}/checkpoint"),
                    format!("arn:aws:s3:::{base}/tile/*"),
                ],
            }],
        })
        .to_string();
        let path = format!("/{bucket}");
        let r = signed(
            self.port,
            "PUT",
            &path,
            "policy=",
            policy.as_bytes(),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("setting the policy of {bucket}: {e}"));
        assert!(
            r.status == 200 || r.status == 204,
            "setting the policy of {bucket}: MinIO answered {}: {}",
            r.status,
            r.text()
        );
    }

    /// A new empty bucket named after `prefix` (lower-case letters, digits and `-`),
    /// unique to this process and call.
    pub fn fresh_bucket(&self, prefix: &str) -> String {
        let name = unique_bucket_name(prefix);
        self.create_bucket(&name);
        name
    }

    /// Options reaching `bucket` on this server, credentials given explicitly.
    pub fn s3_options(&self, bucket: &str) -> S3Options {
        self.s3_options_via(self.port, bucket)
    }

    /// Options reaching `bucket` through a proxy listening on `port` in front of this
    /// server.
    pub fn s3_options_via(&self, port: u16, bucket: &str) -> S3Options {
        S3Options {
            bucket: bucket.to_string(),
            prefix: String::new(),
            region: Some(REGION.into()),
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            allow_http: true,
            access_key_id: Some(ACCESS_KEY.into()),
            secret_access_key: Some(SECRET_KEY.into()),
            session_token: None,
            virtual_hosted_style: Some(false),
            client: Default::default(),
        }
    }

    /// Kill the server (SIGKILL, as a crash would).
    pub fn stop(&self) {
        self.process.kill();
    }

    /// Start it again on the same data and port.
    pub fn restart(&self) {
        self.launch();
    }
}

/// A request signed with the root credentials.
fn signed(
    port: u16,
    method: &str,
    path: &str,
    query: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<http::Response, String> {
    let creds = sigv4::Credentials {
        region: REGION,
        access_key: ACCESS_KEY,
        secret: SECRET_KEY,
    };
    let headers = sigv4::sign(method, path, query, body, port, &creds);
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let target = match query {
        "" => path.to_string(),
        q => format!("{path}?{q}"),
    };
    http::request(port, method, &target, &headers, body, timeout)
}

/// `<prefix>-<pid>-<n>`, within S3's bucket-name rules.
pub fn unique_bucket_name(prefix: &str) -> String {
    let clean: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(30)
        .collect();
    let n = BUCKETS.fetch_add(1, Ordering::Relaxed);
    format!("t-{}-{}-{n}", clean.trim_matches('-'), std::process::id())
}

/// The object-store conformance suite runs on this server.
impl ObjectServer for TestMinio {
    fn shared() -> &'static Self {
        TestMinio::shared()
    }
    fn fresh_bucket(&self, name: &str) -> String {
        TestMinio::fresh_bucket(self, name)
    }
    fn port(&self) -> u16 {
        TestMinio::port(self)
    }
    fn backend_via(
        &self,
        port: u16,
        bucket: &str,
        prefix: &str,
        client: ClientTuning,
    ) -> ObjectStoreBackend {
        let mut o = self.s3_options_via(port, bucket);
        o.prefix = prefix.to_string();
        o.client = client;
        crate::backend(&o).unwrap_or_else(|e| panic!("S3 backend: {e}"))
    }
}
