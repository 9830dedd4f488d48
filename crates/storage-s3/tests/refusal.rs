//! A store that does not honour conditional writes is refused when the log is opened,
//! with `ObjectOpenError::NoConditionalWrites`, not a confusing error: S3 endpoints
//! faked in this process, one that ignores `If-None-Match` / `If-Match` (as S3-alikes
//! without conditional writes do) and one that rejects them with 501 Not Implemented.
//! (Real servers honour them; core's memory store covers the same refusal with
//! `set_ignore_conditions`.)

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tlogd_core::engine::objects::{ObjectLogOptions, ObjectOpenError};
use tlogd_storage_object::open_log;
use tlogd_storage_s3::S3Options;

#[derive(Clone, Copy)]
enum Mode {
    /// Conditional headers are ignored: every PUT succeeds.
    Ignore,
    /// Conditional PUTs get 501 Not Implemented.
    Reject,
}

/// Objects by key: bytes and the generation that wrote them.
type Objects = Mutex<HashMap<String, (Vec<u8>, u64)>>;

/// A minimal S3 on 127.0.0.1 (no signature checks): PUT, GET, DELETE, bulk delete.
fn fake_s3(mode: Mode) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let objects: Arc<Objects> = Arc::default();
    std::thread::spawn(move || {
        let mut generation = 0u64;
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            generation += 1;
            let _ = serve(conn, mode, &objects, generation);
        }
    });
    port
}

fn serve(conn: TcpStream, mode: Mode, objects: &Objects, generation: u64) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let mut length = 0usize;
    let mut conditional = false;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap_or((h, ""));
        let k = k.to_ascii_lowercase();
        if k == "content-length" {
            length = v.trim().parse().unwrap_or(0);
        }
        if k == "if-match" || k == "if-none-match" {
            conditional = true;
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let key = target.split('?').next().unwrap_or("").to_string();
    let date = "Mon, 23 Nov 2026 12:00:00 GMT";
    let (status, headers, out): (&str, String, Vec<u8>) = match method.as_str() {
        "PUT" if conditional && matches!(mode, Mode::Reject) => (
            "501 Not Implemented",
            String::new(),
            b"<Error><Code>NotImplemented</Code><Message>A header you provided implies functionality that is not implemented</Message></Error>".to_vec(),
        ),
        "PUT" => {
            objects.lock().unwrap().insert(key, (body, generation));
            ("200 OK", format!("ETag: \"{generation}\"\r\n"), Vec::new())
        }
        "GET" => match objects.lock().unwrap().get(&key) {
            Some((b, g)) => (
                "200 OK",
                format!("ETag: \"{g}\"\r\nLast-Modified: {date}\r\n"),
                b.clone(),
            ),
            None => (
                "404 Not Found",
                String::new(),
                b"<Error><Code>NoSuchKey</Code></Error>".to_vec(),
            ),
        },
        "DELETE" => {
            objects.lock().unwrap().remove(&key);
            ("204 No Content", String::new(), Vec::new())
        }
        _ => ("200 OK", String::new(), b"<DeleteResult></DeleteResult>".to_vec()),
    };
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        out.len()
    )?;
    conn.write_all(&out)
}

fn options(port: u16) -> S3Options {
    S3Options {
        bucket: "bucket".into(),
        region: Some("us-east-1".into()),
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        allow_http: true,
        access_key_id: Some("key".into()),
        secret_access_key: Some("secret".into()),
        virtual_hosted_style: Some(false),
        ..S3Options::default()
    }
}

async fn refused(mode: Mode) -> String {
    let port = fake_s3(mode);
    let backend = tlogd_storage_s3::backend(&options(port)).unwrap();
    let opened = tokio::time::timeout(
        Duration::from_secs(60),
        open_log(backend, "example.com/log", ObjectLogOptions::default()),
    )
    .await
    .unwrap_or_else(|_| panic!("opening did not finish"));
    match opened {
        Err(e @ ObjectOpenError::NoConditionalWrites(_)) => e.to_string(),
        Err(e) => panic!("expected a refusal for lack of conditional writes, got: {e}"),
        Ok(_) => panic!("a store without conditional writes was accepted"),
    }
}

#[tokio::test]
async fn a_store_that_ignores_conditions_is_refused() {
    let msg = refused(Mode::Ignore).await;
    assert!(msg.contains("does not honour conditional writes"), "{msg}");
    assert!(
        msg.contains("create-if-absent replaced an existing object"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_store_that_rejects_conditions_is_refused() {
    let msg = refused(Mode::Reject).await;
    assert!(msg.contains("does not honour conditional writes"), "{msg}");
    assert!(msg.contains("501"), "{msg}");
}
