//! A private Toxiproxy server, driven through its HTTP API: TCP proxies in front of a
//! test server, with latency, connection resets, cut answers and outages.

use std::process::Command;
use std::time::Duration;

use super::{ServerProcess, find_tool, free_port, http, server_dir};

/// A Toxiproxy server of the test process.
pub struct Toxiproxy {
    process: ServerProcess,
    port: u16,
    _dir: tempfile::TempDir,
}

/// Which direction a toxic applies to.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    /// Client to server (requests).
    Upstream,
    /// Server to client (answers).
    Downstream,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        }
    }
}

impl Toxiproxy {
    /// Start a server on a free port of 127.0.0.1.
    pub fn start() -> Toxiproxy {
        let binary = find_tool("toxiproxy-server");
        let dir = server_dir("tlogd-toxiproxy-");
        let t = Toxiproxy {
            process: ServerProcess::new("the test Toxiproxy", dir.path().join("toxiproxy.log")),
            port: free_port(),
            _dir: dir,
        };
        let mut cmd = Command::new(binary);
        cmd.args(["-host", "127.0.0.1", "-port", &t.port.to_string()]);
        let port = t.port;
        t.process
            .launch(cmd, port, Duration::from_secs(30), move || {
                let r = http::request(port, "GET", "/version", &[], b"", Duration::from_secs(2))?;
                match r.status {
                    200 => Ok(()),
                    s => Err(format!("/version answered {s}")),
                }
            });
        t
    }

    /// The API port.
    pub fn api_port(&self) -> u16 {
        self.port
    }

    fn call(&self, method: &str, path: &str, body: &str, want: &[u16]) -> String {
        let r = http::request(
            self.port,
            method,
            path,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("Toxiproxy {method} {path}: {e}"));
        assert!(
            want.contains(&r.status),
            "Toxiproxy {method} {path} {body}: {} {}\n{}",
            r.status,
            r.text(),
            self.process.log()
        );
        r.text()
    }

    /// A proxy named `name` from a free port of 127.0.0.1 to 127.0.0.1:`upstream`; its
    /// listening port.
    pub fn proxy(&self, name: &str, upstream: u16) -> u16 {
        let listen = free_port();
        let body = serde_json::json!({
            "name": name,
            "listen": format!("127.0.0.1:{listen}"),
            "upstream": format!("127.0.0.1:{upstream}"),
            "enabled": true,
        });
        self.call("POST", "/proxies", &body.to_string(), &[200, 201]);
        listen
    }

    /// Enable the proxy, or disable it: its connections are closed and new ones
    /// refused, an outage of the server behind it.
    pub fn set_enabled(&self, proxy: &str, enabled: bool) {
        let body = serde_json::json!({ "enabled": enabled });
        self.call(
            "POST",
            &format!("/proxies/{proxy}"),
            &body.to_string(),
            &[200],
        );
    }

    /// Add toxic `name` of `kind` (`latency`, `reset_peer`, `limit_data`, ...) with its
    /// `attributes`, applied to a `toxicity` fraction of connections.
    pub fn add_toxic(
        &self,
        proxy: &str,
        name: &str,
        kind: &str,
        stream: Stream,
        toxicity: f64,
        attributes: serde_json::Value,
    ) {
        let body = serde_json::json!({
            "name": name,
            "type": kind,
            "stream": stream.as_str(),
            "toxicity": toxicity,
            "attributes": attributes,
        });
        self.call(
            "POST",
            &format!("/proxies/{proxy}/toxics"),
            &body.to_string(),
            &[200, 201],
        );
    }

    /// `ms` milliseconds added to every answer (all connections).
    pub fn add_latency(&self, proxy: &str, ms: u64) {
        self.add_toxic(
            proxy,
            "latency",
            "latency",
            Stream::Downstream,
            1.0,
            serde_json::json!({ "latency": ms, "jitter": 0 }),
        );
    }

    /// Remove toxic `name` of the proxy.
    pub fn remove_toxic(&self, proxy: &str, name: &str) {
        self.call(
            "DELETE",
            &format!("/proxies/{proxy}/toxics/{name}"),
            "",
            &[200, 204],
        );
    }
}
