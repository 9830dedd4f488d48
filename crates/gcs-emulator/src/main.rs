//! `tlogd-gcs-emulator`: runs the GCS XML-API emulator until killed, for manual tests and for
//! tests in other languages. Its first line on stdout is the base URL.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use tlogd_gcs_emulator::GcsEmulator;

/// An in-memory Google Cloud Storage XML-API emulator (for tests).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Address to listen on (port 0: a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// A bucket to create (repeat for more).
    #[arg(long = "bucket", required = true)]
    buckets: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let buckets: Vec<&str> = args.buckets.iter().map(String::as_str).collect();
    let emulator = GcsEmulator::start_on(args.listen, &buckets).context("starting the emulator")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", emulator.url()).context("writing the URL")?;
    // Whoever started us reads the URL before the first request: don't leave it buffered.
    out.flush().context("writing the URL")?;
    drop(out);
    // The server runs on the emulator's own thread; this one only keeps it alive.
    loop {
        std::thread::park();
    }
}
