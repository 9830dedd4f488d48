//! `[http]` (what a slow, idle or greedy client may hold, and which proxies are trusted)
//! and `[auth]` (who may write).

use std::path::PathBuf;

use serde::Deserialize;

/// `[auth]`
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// File of bearer tokens accepted on `POST /add` (one or more per line). Tokens may
    /// also come from env `TLOGD_BEARER_TOKENS`; never from the command line.
    pub bearer_tokens_file: Option<PathBuf>,
    /// Accept adds from anyone on a listener that is not loopback. Off by default: a
    /// transparency log can never delete what it logged, so an open one is a standing
    /// invitation to spam. Loopback listeners (behind a proxy that authenticates) need
    /// no tokens either way.
    pub allow_anonymous_writes: bool,
}

/// `[http]`: what a slow, idle or greedy client may hold.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// A request's headers must be whole within this of their first bytes; a new
    /// connection's first request must be within this of the connection. (The wait
    /// for the next request on a kept-alive HTTP/1.1 connection is `idle_timeout_ms`.)
    pub header_read_timeout_ms: u64,
    /// `POST /add`: the whole body must arrive within this once the headers have
    /// (`408` otherwise).
    pub body_read_timeout_ms: u64,
    /// A connection with no request in flight for this long is closed (HTTP/2:
    /// `GOAWAY`). Longer by default than common HTTP clients keep an idle connection
    /// (Go: 90 s), so that the client closes first: a client that reuses a connection
    /// at the moment the server closes it gets an `EOF`, and does not retry a `POST`.
    pub idle_timeout_ms: u64,
    /// A response that makes no progress for this long closes its connection: a socket
    /// write blocked (the peer reads nothing), or a response whose next piece has not
    /// been taken (an HTTP/2 stream whose window stays shut). On progress, not on the
    /// whole response: a slow reader that keeps reading gets all of it.
    pub write_timeout_ms: u64,
    /// Open connections at most; a connection beyond it is closed as soon as it is
    /// accepted.
    pub max_connections: usize,
    /// Open connections from one client address at most (beyond it, closed as soon as
    /// accepted); addresses in `trusted_proxies` have no such cap.
    pub max_connections_per_ip: usize,
    /// Addresses or CIDR ranges (`10.0.0.0/8`, `::1`) exempt from
    /// `max_connections_per_ip`: a reverse proxy or load balancer, from which every
    /// client comes. Default: loopback (`127.0.0.0/8`, `::1`).
    pub trusted_proxies: Vec<String>,
    /// IPv6 clients are counted by this many leading bits of their address, for
    /// `max_connections_per_ip` and every per-address share (a CT log's validation
    /// queue): one host is usually given a whole `/64`, so counting single addresses
    /// would let it open as many connections as it likes. 128 counts each address.
    pub ipv6_prefix_len: u8,
    /// Response body bytes held for clients at once (each listener); a response that
    /// does not fit gets `503` with `Retry-After: 1`.
    pub max_response_bytes_in_flight: u64,
    /// Of those, held for one client address at most (IPv6: its `ipv6_prefix_len`
    /// prefix; `trusted_proxies` not counted): one address's readers, however slow,
    /// cannot hold what others need. At least one full bundle.
    pub max_response_bytes_per_ip: u64,
    /// Request-body bytes being read at once (each listener), beyond the first 4 KiB
    /// of each body (small adds never count); a body that does not fit gets `503` +
    /// `Retry-After: 1` at once.
    pub max_request_bytes_in_flight: u64,
    /// Of those, read for one client address at most (IPv6: its `ipv6_prefix_len`
    /// prefix; `trusted_proxies` not counted). At least one CT chain (512 KiB).
    pub max_request_bytes_per_ip: u64,
    /// A response must be taken at this many bytes a second at least, on average: each
    /// piece the client takes earns it this much time, and a response whose credit runs
    /// `write_timeout_ms` behind is cut as if it had stopped (a reader that trickles is
    /// no better than one that stopped). 0: any progress counts.
    pub min_response_bytes_per_s: u64,
    /// Requests in flight at once on one HTTP/2 connection.
    pub h2_max_concurrent_streams: u32,
    /// An HTTP/2 connection is pinged after this long without hearing from the peer.
    pub h2_keep_alive_interval_ms: u64,
    /// A ping not answered within this closes the connection.
    pub h2_keep_alive_timeout_ms: u64,
    /// At shutdown, how long connections still busy are waited for before the queue is
    /// drained without them.
    pub shutdown_grace_ms: u64,
    /// Tile and bundle reads from storage at once (the checkpoint and paths beyond the
    /// tree are answered from memory): what readers can take from the database pool or
    /// the object store client that commits use.
    pub max_storage_reads: usize,
    /// A read waiting this long for its turn is answered `503` with `Retry-After`.
    pub storage_read_queue_timeout_ms: u64,
}

/// The largest response tlogd sends: a full entry bundle, 256 entries of the largest
/// size with their length prefixes. `http.max_response_bytes_in_flight` must hold one.
pub const MAX_RESPONSE_BYTES: u64 = 256 * (2 + 65_535);

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 10_000,
            idle_timeout_ms: 120_000,
            write_timeout_ms: 30_000,
            max_connections: 4096,
            max_connections_per_ip: 256,
            trusted_proxies: vec!["127.0.0.0/8".into(), "::1".into()],
            ipv6_prefix_len: 64,
            max_response_bytes_in_flight: 256 << 20,
            max_response_bytes_per_ip: 64 << 20,
            min_response_bytes_per_s: 16 << 10,
            max_request_bytes_in_flight: 64 << 20,
            max_request_bytes_per_ip: 8 << 20,
            h2_max_concurrent_streams: 100,
            h2_keep_alive_interval_ms: 20_000,
            h2_keep_alive_timeout_ms: 20_000,
            shutdown_grace_ms: 30_000,
            max_storage_reads: 32,
            storage_read_queue_timeout_ms: 2_000,
        }
    }
}

impl HttpConfig {
    /// `trusted_proxies` parsed; the first entry that is not an address or a CIDR range
    /// is the error, naming the key.
    pub fn trusted_proxies(&self) -> anyhow::Result<Vec<IpCidr>> {
        self.trusted_proxies
            .iter()
            .map(|t| {
                IpCidr::parse(t).map_err(|why| {
                    anyhow::anyhow!(
                        "`http.trusted_proxies`: {t:?} is not an IP address or CIDR range ({why})"
                    )
                })
            })
            .collect()
    }
}

/// An IP address range: an address and how many leading bits of it count (`/32` or
/// `/128` for one address). IPv4-mapped IPv6 addresses are taken as the IPv4 ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpCidr {
    addr: std::net::IpAddr,
    prefix: u8,
}

impl IpCidr {
    /// `192.0.2.1`, `10.0.0.0/8`, `::1`, `2001:db8::/32`. Bits set beyond the prefix
    /// are refused (`10.0.0.1/8` is most likely a typo for something else).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: std::net::IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{:?} is not an address", addr.trim()))?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(format!("the prefix length must be 0 to {max}")),
            },
        };
        let net = IpCidr { addr, prefix };
        if net.masked(addr) != bits(addr) {
            return Err(format!("bits are set beyond the /{prefix} prefix"));
        }
        Ok(net)
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address as its IPv4 one).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.addr.is_ipv4() && self.masked(ip) == self.masked(self.addr)
    }

    /// The first `prefix` bits of `ip`.
    fn masked(&self, ip: std::net::IpAddr) -> u128 {
        let width = if ip.is_ipv4() { 32 } else { 128 };
        let keep = u32::from(self.prefix).min(width);
        match keep {
            0 => 0,
            k => bits(ip) & (u128::MAX << (width - k)) & (u128::MAX >> (128 - width)),
        }
    }
}

/// `ip` as a client is counted per address: an IPv4 address (IPv4-mapped IPv6 ones
/// too) as it is, an IPv6 address cut to its first `v6_prefix` bits (the rest zero).
pub fn client_key(ip: std::net::IpAddr, v6_prefix: u8) -> std::net::IpAddr {
    match ip.to_canonical() {
        std::net::IpAddr::V6(v6) => {
            let keep = u32::from(v6_prefix.min(128));
            let mask = u128::MAX.checked_shl(128 - keep).unwrap_or(0);
            std::net::IpAddr::V6((u128::from(v6) & mask).into())
        }
        v4 => v4,
    }
}

/// An address as a number (IPv4 in the low 32 bits).
fn bits(ip: std::net::IpAddr) -> u128 {
    match ip {
        std::net::IpAddr::V4(v4) => u32::from(v4).into(),
        std::net::IpAddr::V6(v6) => u128::from(v6),
    }
}
