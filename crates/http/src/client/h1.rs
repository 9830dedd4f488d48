//! HTTP/1.1 over plain TCP, driven by the task that sends the request: the request's head
//! and body go out in one write, the answer is read into one buffer and framed with
//! `httparse` (the parser hyper uses). Without TLS this is all a keep-alive client needs,
//! and it does without hyper's client machinery (a task per connection, a channel and a
//! oneshot per request), which was the largest user-space cost of the load generator's
//! adds after the kernel's.
//!
//! Framing follows RFC 9112 §6: no body for 1xx, 204 and 304; `Transfer-Encoding:
//! chunked`; `Content-Length`; otherwise the body runs to the end of the connection. A
//! response that says `Connection: close`, or is HTTP/1.0, ends the connection after it.

use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use hyper::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Response;

/// The most a response's status line and headers may take.
const MAX_HEAD: usize = 64 << 10;
/// Headers read per response; more is refused as a bad response.
const MAX_HEADERS: usize = 64;
/// How much is read at a time.
const READ_CHUNK: usize = 16 << 10;
/// The most a chunk-size line (size and extensions) may take: a server sending an
/// endless extension is refused rather than buffered.
const MAX_CHUNK_LINE: usize = 4 << 10;
/// The most a chunked body's trailer fields may take, all together.
const MAX_TRAILER: usize = MAX_HEAD;
/// A connection idle for longer is checked for a close by the server (its idle timeout)
/// before it carries a request: a request sent into a connection the server has closed
/// may or may not have been acted on, so it cannot simply be sent again.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// How an exchange failed.
pub(crate) struct Failure {
    /// The request cannot have been acted on: it was not written whole, or the
    /// connection ended before any byte of an answer and the request is safe to repeat
    /// (the caller decides which from the method).
    pub(crate) before_answer: bool,
    /// The request was not written whole (the server closed the connection first).
    pub(crate) unsent: bool,
    pub(crate) msg: String,
}

fn failure(msg: impl Into<String>) -> Failure {
    Failure {
        before_answer: false,
        unsent: false,
        msg: msg.into(),
    }
}

/// One plain-TCP HTTP/1.1 connection.
pub(crate) struct PlainH1 {
    stream: TcpStream,
    /// Bytes read and not yet taken by a response.
    buf: BytesMut,
    /// The server said the connection ends after the last response.
    done: bool,
    /// When the last response was read.
    idle_since: Instant,
    /// The largest body accepted; a larger one fails the exchange as soon as it is
    /// known to be larger (a `Content-Length`, a chunk, bytes to the end of the stream),
    /// so a hostile server cannot run the client out of memory.
    max_body: usize,
}

impl PlainH1 {
    /// A connection to `authority` (Nagle off: a request is one write, sent at once)
    /// accepting bodies of at most `max_body` bytes.
    pub(crate) async fn connect(authority: &str, max_body: usize) -> Result<Self, String> {
        let stream = TcpStream::connect(authority)
            .await
            .map_err(|e| format!("connecting to {authority}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("connecting to {authority}: {e}"))?;
        Ok(PlainH1 {
            stream,
            buf: BytesMut::with_capacity(READ_CHUNK),
            done: false,
            idle_since: Instant::now(),
            max_body,
        })
    }

    /// Whether the connection can carry another request. One that has been idle a while
    /// is asked (without blocking) whether the server has closed it.
    /// With `always`, the socket is asked even when it was idle only briefly (one
    /// non-blocking read: for requests whose outcome must never be in doubt because the
    /// server was already gone).
    pub(crate) fn is_open_probed(&mut self, always: bool) -> bool {
        if self.done || !self.buf.is_empty() {
            // Closing, or bytes nobody asked for: the exchange is out of step.
            return false;
        }
        if !always && self.idle_since.elapsed() < IDLE_CHECK {
            return true;
        }
        let mut probe = [0u8; 1];
        match self.stream.try_read(&mut probe) {
            Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            // End of stream (the server closed it) or unexpected bytes.
            Ok(_) => false,
        }
    }

    /// Write `request` (head and body, whole) and read the answer.
    pub(crate) async fn exchange(&mut self, request: &[u8]) -> Result<Response, Failure> {
        if let Err(e) = self.stream.write_all(request).await {
            // A server may answer and close before reading a body it refuses (a 413 for
            // an oversized one): its answer, if it arrived, is what counts.
            return match self.read_response().await {
                Ok(r) => {
                    self.done = true;
                    Ok(r)
                }
                Err(_) => Err(Failure {
                    before_answer: true,
                    unsent: true,
                    msg: e.to_string(),
                }),
            };
        }
        let r = self.read_response().await?;
        self.idle_since = Instant::now();
        Ok(r)
    }

    /// Read more into the buffer; `Ok(false)` at the end of the stream.
    async fn fill(&mut self) -> Result<bool, Failure> {
        self.buf.reserve(READ_CHUNK);
        match self.stream.read_buf(&mut self.buf).await {
            Ok(0) => Ok(false),
            Ok(_) => Ok(true),
            Err(e) => Err(failure(e.to_string())),
        }
    }

    /// Read until the buffer holds `len` bytes.
    async fn fill_to(&mut self, len: usize) -> Result<(), Failure> {
        while self.buf.len() < len {
            if !self.fill().await? {
                return Err(failure("connection closed before the end of the response"));
            }
        }
        Ok(())
    }

    async fn read_response(&mut self) -> Result<Response, Failure> {
        let mut got_any = !self.buf.is_empty();
        let (head, head_len) = loop {
            if !self.buf.is_empty() {
                match parse_head(&self.buf)? {
                    Some((head, n)) if head.interim => {
                        // 100 Continue and the like: the real answer follows.
                        self.buf.advance(n);
                        continue;
                    }
                    Some(found) => break found,
                    None if self.buf.len() >= MAX_HEAD => {
                        return Err(failure("response head over 64 KiB"));
                    }
                    None => {}
                }
            }
            let more = self.fill().await.map_err(|mut f| {
                f.before_answer = !got_any;
                f
            })?;
            if !more {
                let mut f = failure("connection closed before a response");
                f.before_answer = !got_any;
                return Err(f);
            }
            got_any = true;
        };
        if head.close {
            self.done = true;
        }
        let body = match head.framing {
            Framing::Empty => {
                self.buf.advance(head_len);
                Bytes::new()
            }
            Framing::Length(n) => {
                if n > self.max_body {
                    self.done = true;
                    return Err(self.too_large(format!("a Content-Length of {n} bytes")));
                }
                let end = head_len
                    .checked_add(n)
                    .ok_or_else(|| failure("Content-Length out of range"))?;
                self.fill_to(end).await?;
                let mut whole = self.buf.split_to(end);
                whole.split_off(head_len).freeze()
            }
            Framing::Chunked => {
                self.buf.advance(head_len);
                self.read_chunked().await?
            }
            Framing::UntilClose => {
                self.done = true;
                while self.fill().await? {
                    if self.buf.len() - head_len > self.max_body {
                        return Err(self.too_large("a body read to the end of the stream"));
                    }
                }
                self.buf.advance(head_len);
                self.buf.split().freeze()
            }
        };
        Ok(Response {
            status: head.status,
            retry_after: head.retry_after,
            duplicate: head.duplicate,
            body,
        })
    }

    /// The failure of a response over [`PlainH1::max_body`]; the connection ends (the
    /// rest of the response is never read).
    fn too_large(&mut self, what: impl std::fmt::Display) -> Failure {
        self.done = true;
        failure(format!(
            "response refused: {what} is over the {}-byte limit for this request",
            self.max_body
        ))
    }

    /// A chunked body (RFC 9112 §7.1), the buffer starting at its first chunk; trailer
    /// fields are read and dropped. Every part is bounded: the body by `max_body`, a
    /// chunk-size line by [`MAX_CHUNK_LINE`], the trailer by [`MAX_TRAILER`]; each is
    /// scanned once, not again from its start after every read.
    async fn read_chunked(&mut self) -> Result<Bytes, Failure> {
        let mut body = BytesMut::new();
        loop {
            let (used, size) = loop {
                // The line is complete once its LF is in: parse only then, so that a
                // line arriving a byte at a time is scanned once.
                let line_end = self.buf.iter().position(|&b| b == b'\n');
                match line_end {
                    None if self.buf.len() > MAX_CHUNK_LINE => {
                        self.done = true;
                        return Err(failure("a chunk-size line over 4 KiB"));
                    }
                    None => {
                        let len = self.buf.len() + 1;
                        self.fill_to(len).await?;
                        continue;
                    }
                    Some(_) => {}
                }
                match httparse::parse_chunk_size(&self.buf) {
                    Ok(httparse::Status::Complete(found)) => break found,
                    Ok(httparse::Status::Partial) | Err(_) => {
                        self.done = true;
                        return Err(failure("bad chunk size in a chunked response"));
                    }
                }
            };
            self.buf.advance(used);
            if size == 0 {
                break;
            }
            let size = match usize::try_from(size) {
                Ok(n) if n <= self.max_body - body.len() => n,
                _ => {
                    let at_least = (body.len() as u64).saturating_add(size);
                    return Err(self.too_large(format!("a chunked body of {at_least}+ bytes")));
                }
            };
            let end = size
                .checked_add(2)
                .ok_or_else(|| failure("chunk size out of range"))?;
            self.fill_to(end).await?;
            if &self.buf[size..end] != b"\r\n" {
                return Err(failure("a chunk not followed by CRLF"));
            }
            body.extend_from_slice(&self.buf[..size]);
            self.buf.advance(end);
        }
        // Trailer fields, then an empty line. `scanned`: bytes of the current line
        // already searched for its end.
        let mut trailer = 0usize;
        let mut scanned = 0usize;
        loop {
            match self.buf[scanned..].windows(2).position(|w| w == b"\r\n") {
                Some(i) if scanned + i == 0 => {
                    self.buf.advance(2);
                    return Ok(body.freeze());
                }
                Some(i) => {
                    trailer += scanned + i + 2;
                    self.buf.advance(scanned + i + 2);
                    scanned = 0;
                }
                None => {
                    // Keep the last byte: it may be the CR of a CRLF split by a read.
                    scanned = self.buf.len().saturating_sub(1);
                    let len = self.buf.len() + 1;
                    self.fill_to(len).await?;
                }
            }
            if trailer + scanned > MAX_TRAILER {
                self.done = true;
                return Err(failure("a chunked body's trailer over 64 KiB"));
            }
        }
    }
}

/// How a response's body is delimited.
enum Framing {
    Empty,
    Length(usize),
    Chunked,
    UntilClose,
}

/// What is kept of a response head.
struct Head {
    status: StatusCode,
    /// 1xx other than 101: another head follows.
    interim: bool,
    framing: Framing,
    close: bool,
    retry_after: Option<u64>,
    duplicate: bool,
}

/// The head at the start of `buf` and its length, or `None` if it is not all there.
fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, Failure> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Response::new(&mut headers);
    let n = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(failure(format!("bad response: {e}"))),
    };
    let code = r.code.unwrap_or(0);
    let status =
        StatusCode::from_u16(code).map_err(|_| failure(format!("bad response status {code}")))?;
    let mut close = r.version == Some(0);
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut retry_after = None;
    let mut duplicate = false;
    for h in r.headers.iter() {
        let value = h.value;
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or_else(|| failure("bad Content-Length"))?;
            if length.is_some_and(|l| l != v) {
                return Err(failure("conflicting Content-Length headers"));
            }
            length = Some(v);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            if !chunked {
                return Err(failure("a transfer coding other than chunked"));
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    close = false;
                }
            }
        } else if h.name.eq_ignore_ascii_case("retry-after") {
            retry_after = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.trim().parse().ok());
        } else if h.name.eq_ignore_ascii_case("x-tlog-duplicate") {
            duplicate = value.trim_ascii().eq_ignore_ascii_case(b"true");
        }
    }
    let interim = status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS;
    let framing =
        if interim || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
            Framing::Empty
        } else if chunked {
            Framing::Chunked
        } else if let Some(l) = length {
            Framing::Length(l)
        } else {
            Framing::UntilClose
        };
    Ok(Some((
        Head {
            status,
            interim,
            framing,
            close,
            retry_after,
            duplicate,
        },
        n,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// A server that reads one request head (and a small body it ignores), answers each
    /// request on the connection with the next of `answers` as raw bytes, and closes
    /// after the last.
    async fn serve(answers: Vec<&'static [u8]>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut buf = Vec::new();
            for answer in answers {
                loop {
                    let mut chunk = [0u8; 4096];
                    let n = s.read(&mut chunk).await.expect("read");
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..i + 4);
                        break;
                    }
                }
                buf.clear();
                s.write_all(answer).await.expect("write");
            }
        });
        addr
    }

    const GET: &[u8] = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";

    /// A hostile server: after a request head it writes `head`, then `forever` again
    /// and again until the client goes away, or until it has sent 16 MiB, when it holds
    /// the connection open without a word (so a client without limits waits, and the
    /// test fails on its timeout without taking the machine's memory).
    async fn stream_forever(head: &'static [u8], forever: &'static [u8]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut buf = Vec::new();
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                let mut chunk = [0u8; 4096];
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            if s.write_all(head).await.is_err() {
                return;
            }
            let mut sent = 0;
            while sent < 16 << 20 {
                if s.write_all(forever).await.is_err() {
                    return;
                }
                sent += forever.len();
            }
            std::future::pending::<()>().await;
        });
        addr
    }

    /// Every way a body can grow without end is cut at its limit, long before the
    /// server stops (it never does): no exchange hangs, none buffers without bound.
    #[tokio::test]
    async fn a_server_that_streams_forever_is_cut_at_the_limit() {
        const KIB: &[u8] = &[b'x'; 1024];
        let mut chunk = b"400\r\n".to_vec();
        chunk.extend_from_slice(KIB);
        chunk.extend_from_slice(b"\r\n");
        let chunk_of_1k: &'static [u8] = Box::leak(chunk.into_boxed_slice());
        let cases: [(&'static [u8], &'static [u8], &str); 6] = [
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\n",
                KIB,
                "over the 65536-byte limit",
            ),
            (b"HTTP/1.1 200 OK\r\n\r\n", KIB, "over the 65536-byte limit"),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                chunk_of_1k,
                "over the 65536-byte limit",
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;ext=",
                KIB,
                "chunk-size line over 4 KiB",
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n",
                b"x-trailer: yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\r\n",
                "trailer over 64 KiB",
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\nx-trailer: ",
                KIB,
                "trailer over 64 KiB",
            ),
        ];
        for (head, forever, want) in cases {
            let addr = stream_forever(head, forever).await;
            let mut c = PlainH1::connect(&addr, 64 << 10).await.expect("connect");
            let f = tokio::time::timeout(Duration::from_secs(10), c.exchange(GET))
                .await
                .unwrap_or_else(|_| panic!("{want}: still reading after 10 s"))
                .err()
                .unwrap_or_else(|| panic!("{want}: an endless body was accepted"));
            assert!(f.msg.contains(want), "{want}: {}", f.msg);
            assert!(
                !c.is_open_probed(false),
                "{want}: the connection is not reused"
            );
            assert!(
                c.buf.capacity() < 1 << 20,
                "{want}: {} bytes held",
                c.buf.capacity()
            );
        }
        // At the limit exactly, a body is taken.
        let mut body = b"HTTP/1.1 200 OK\r\ncontent-length: 65536\r\n\r\n".to_vec();
        body.extend_from_slice(&[b'z'; 65536]);
        let answer: &'static [u8] = Box::leak(body.into_boxed_slice());
        let addr = serve(vec![answer]).await;
        let mut c = PlainH1::connect(&addr, 64 << 10).await.expect("connect");
        let r = c
            .exchange(GET)
            .await
            .map_err(|f| f.msg)
            .expect("at the limit");
        assert_eq!(r.body.len(), 65536);
    }

    #[tokio::test]
    async fn frames_length_chunked_empty_and_interim() {
        let addr = serve(vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nx-tlog-duplicate: true\r\n\r\n42\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n2;ext=1\r\nef\r\n0\r\nx-trailer: 1\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end",
        ])
        .await;
        let mut c = PlainH1::connect(&addr, 1 << 20).await.expect("connect");
        let r = c.exchange(GET).await.map_err(|f| f.msg).expect("first");
        assert_eq!(
            (r.status, &r.body[..], r.duplicate),
            (StatusCode::OK, &b"42\n"[..], true)
        );
        let r = c.exchange(GET).await.map_err(|f| f.msg).expect("chunked");
        assert_eq!(&r.body[..], b"abcdef");
        let r = c.exchange(GET).await.map_err(|f| f.msg).expect("204");
        assert_eq!((r.status, r.body.len()), (StatusCode::NO_CONTENT, 0));
        let r = c.exchange(GET).await.map_err(|f| f.msg).expect("503");
        assert_eq!(
            (r.status, r.retry_after),
            (StatusCode::SERVICE_UNAVAILABLE, Some(7))
        );
        assert!(c.is_open_probed(false));
        let r = c
            .exchange(GET)
            .await
            .map_err(|f| f.msg)
            .expect("until close");
        assert_eq!(&r.body[..], b"to the end");
        assert!(
            !c.is_open_probed(false),
            "a response to the end of the stream ends the connection"
        );
    }

    #[tokio::test]
    async fn an_idle_connection_is_checked_for_a_close_before_reuse() {
        const EMPTY: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        // This server closes after one answer; the other waits for a second request.
        let closing = serve(vec![EMPTY]).await;
        let waiting = serve(vec![EMPTY, EMPTY]).await;
        let mut closed = PlainH1::connect(&closing, 1 << 20).await.expect("connect");
        let mut open = PlainH1::connect(&waiting, 1 << 20).await.expect("connect");
        closed
            .exchange(GET)
            .await
            .map_err(|f| f.msg)
            .expect("answer");
        open.exchange(GET).await.map_err(|f| f.msg).expect("answer");
        tokio::time::sleep(IDLE_CHECK + Duration::from_millis(200)).await;
        assert!(
            !closed.is_open_probed(false),
            "the server closed it while it was idle"
        );
        assert!(open.is_open_probed(false));
        open.exchange(GET).await.map_err(|f| f.msg).expect("reused");
    }

    #[tokio::test]
    async fn refuses_bad_framing_and_reports_a_silent_close() {
        for bad in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab"[..],
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
            b"HTTQ/1.1 200 OK\r\n\r\n",
        ] {
            let addr = serve(vec![bad]).await;
            let mut c = PlainH1::connect(&addr, 1 << 20).await.expect("connect");
            let f = c.exchange(GET).await.err().expect("refused");
            assert!(!f.before_answer, "{}", f.msg);
        }
        // Closed without a byte of answer: the caller may repeat a safe request.
        let addr = serve(vec![]).await;
        let mut c = PlainH1::connect(&addr, 1 << 20).await.expect("connect");
        let f = c.exchange(GET).await.err().expect("closed");
        assert!(f.before_answer, "{}", f.msg);
    }
}
