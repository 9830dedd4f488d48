//! A TCP fault proxy between a test and its database server: added latency, cut
//! connections, an outage, and the one fault a real network makes that matters most
//! to a log: a `COMMIT` that reaches the server while its reply is lost. (Toxiproxy
//! does the first three; only a proxy that reads the stream can aim at a `COMMIT`.)

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

#[derive(Default)]
struct Controls {
    latency_ms: AtomicU64,
    down: AtomicBool,
    lose_commit_reply: AtomicBool,
    /// Milliseconds to hold the next `COMMIT` after cutting its client (0: off).
    commit_late_ms: AtomicU64,
    /// Bumped to cut every open connection.
    cut: Notify,
    commits_lost: AtomicU64,
    commits_late: AtomicU64,
}

/// A proxy on a free loopback port forwarding to `upstream`, on a thread of its own.
pub struct FaultProxy {
    addr: SocketAddr,
    controls: Arc<Controls>,
    stop: Arc<Notify>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl FaultProxy {
    /// Start forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let controls = Arc::new(Controls::default());
        let stop = Arc::new(Notify::new());
        let (c, s) = (controls.clone(), stop.clone());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = TcpListener::from_std(listener) else {
                    return;
                };
                loop {
                    tokio::select! {
                        _ = s.notified() => return,
                        accepted = listener.accept() => {
                            let Ok((client, _)) = accepted else { continue };
                            if c.down.load(Ordering::Acquire) {
                                reset(client);
                                continue;
                            }
                            tokio::spawn(serve(client, upstream, c.clone()));
                        }
                    }
                }
            })
        });
        Ok(FaultProxy {
            addr,
            controls,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The port to connect to instead of the server's.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Delay every chunk forwarded, both ways.
    pub fn set_latency(&self, latency: Duration) {
        self.controls
            .latency_ms
            .store(latency.as_millis() as u64, Ordering::Release);
    }

    /// Reset every open connection.
    pub fn cut(&self) {
        self.controls.cut.notify_waiters();
    }

    /// An outage: reset every connection and refuse new ones (true), or heal (false).
    pub fn set_down(&self, down: bool) {
        self.controls.down.store(down, Ordering::Release);
        if down {
            self.cut();
        }
    }

    /// The next `COMMIT` sent to the server is delivered, then its connection is reset
    /// before the reply reaches the client: the transaction commits, the client cannot
    /// know it.
    pub fn lose_next_commit_reply(&self) {
        self.controls
            .lose_commit_reply
            .store(true, Ordering::Release);
    }

    /// The next `COMMIT` sent to the server is held: its client connection is closed
    /// at once, and the `COMMIT` reaches the server `late` afterwards, as one still in
    /// flight in the network would. A client reading the state back in between sees
    /// the transaction uncommitted; it commits anyway.
    pub fn deliver_next_commit_late(&self, late: Duration) {
        self.controls
            .commit_late_ms
            .store(late.as_millis().max(1) as u64, Ordering::Release);
    }

    /// How many `COMMIT`s were delivered late so far.
    pub fn commits_late(&self) -> u64 {
        self.controls.commits_late.load(Ordering::Acquire)
    }

    /// How many `COMMIT` replies were lost so far.
    pub fn commits_lost(&self) -> u64 {
        self.controls.commits_lost.load(Ordering::Acquire)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.notify_one();
        self.controls.cut.notify_waiters();
        let thread = self.thread.lock().map(|mut t| t.take());
        if let Ok(Some(t)) = thread {
            let _ = t.join();
        }
    }
}

/// Close with RST (linger 0), as a crashed peer or a middlebox would.
fn reset(s: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket and a correctly sized option value.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(s);
}

async fn serve(client: TcpStream, upstream: SocketAddr, c: Arc<Controls>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        reset(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // Set once a COMMIT went up whose reply must not come back.
    let doomed = Arc::new(AtomicBool::new(false));
    let up = {
        let (c, doomed) = (c.clone(), doomed.clone());
        async move {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = match cr.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                delay(&c).await;
                let chunk = &buf[..n];
                let is_commit = chunk.windows(6).any(|w| w.eq_ignore_ascii_case(b"COMMIT"));
                if is_commit && c.lose_commit_reply.swap(false, Ordering::AcqRel) {
                    doomed.store(true, Ordering::Release);
                    c.commits_lost.fetch_add(1, Ordering::AcqRel);
                    let _ = sw.write_all(chunk).await;
                    // Let the server commit, then drop both sides.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    return;
                }
                let late = match is_commit {
                    true => c.commit_late_ms.swap(0, Ordering::AcqRel),
                    false => 0,
                };
                if late > 0 {
                    c.commits_late.fetch_add(1, Ordering::AcqRel);
                    let chunk = chunk.to_vec();
                    // The server side outlives this connection's client side, which
                    // closes as this task returns.
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(late)).await;
                        let _ = sw.write_all(&chunk).await;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    });
                    return;
                }
                if sw.write_all(chunk).await.is_err() {
                    return;
                }
            }
        }
    };
    let down = {
        let (c, doomed) = (c.clone(), doomed.clone());
        async move {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = match sr.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if doomed.load(Ordering::Acquire) {
                    continue;
                }
                delay(&c).await;
                if cw.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = c.cut.notified() => {}
    }
    // Dropping the halves closes both connections; the reunited client socket is
    // reset so the driver sees an error, not a clean end.
}

async fn delay(c: &Controls) {
    let ms = c.latency_ms.load(Ordering::Acquire);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}
