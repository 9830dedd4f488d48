//! `tlogd`: a C2SP tlog-tiles transparency log daemon.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

use tlogd::commands::keygen::KeyAlgorithm;
use tlogd::commands::migrate::MigrateArgs;
use tlogd::commands::serve::ServeArgs;
use tlogd::commands::{freeze, keygen, migrate, serve};
use tlogd::config::Config;
use tlogd::observe;

// glibc's malloc and free were ~10 % of the daemon's CPU under load (hyper, axum and
// the add path allocate per request); mimalloc's thread-local free lists cost a
// fraction of that (benches/results/history.md, "Where tlogd's CPU goes, by stage").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (`mi_option_reset_delay` before 2.1): the same
/// index in its v2 and v3 headers; libmimalloc-sys names no constant for it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keep memory the daemon frees for reuse instead of handing it back to the kernel,
/// unless `MIMALLOC_PURGE_DELAY` in the environment says otherwise. By default mimalloc
/// returns ("purges") memory that stayed free for a while, and the next allocation
/// faults it back in, zeroed, some of it on the integrator's thread between commits; at
/// 1024 writers that cost ~4 % of the append rate and ~1 µs of CPU per append
/// (benches/results/history.md, "2026-11-25 (late night)"). The price: resident memory stays
/// near its high-water mark, which the queue's and the caches' limits bound.
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of the allocator's options, which it reads atomically; any
        // thread may do so at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
    }
}

/// A C2SP tlog-tiles transparency log daemon.
///
/// Quick start:
///
///   tlogd keygen --origin example.com/mylog --out log.key
///
///   tlogd serve --storage-dir ./log --origin example.com/mylog --private-key-file log.key
///
/// then `curl --data-binary 'hello' http://127.0.0.1:2024/add` prints the entry's index
/// and `curl http://127.0.0.1:2024/checkpoint` the signed checkpoint.
#[derive(Parser)]
#[command(version, about, long_about, verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the log server.
    Serve(Box<ServeArgs>),
    /// Generate a checkpoint signing key (Ed25519 unless --algorithm says otherwise);
    /// prints the verifier key.
    Keygen {
        /// The log's origin (the key name), e.g. example.com/mylog.
        #[arg(long)]
        origin: String,
        /// The key's algorithm: ed25519 (signed-note type 0x01), ml-dsa-44 (type 0x06,
        /// timestamped ML-DSA-44 cosignatures, for origins of at most 255 bytes) or
        /// ecdsa-p256 (a CT log's key, as --ct).
        #[arg(long, value_enum, default_value_t = KeyAlgorithm::Ed25519, conflicts_with = "ct")]
        algorithm: KeyAlgorithm,
        /// An ECDSA P-256 key for a Certificate Transparency log (PKCS#8 PEM); prints
        /// the public key (PEM) and the log ID.
        #[arg(long)]
        ct: bool,
        /// Where to write the private key (created with mode 0600; never overwritten).
        #[arg(long, default_value = "tlogd.key")]
        out: PathBuf,
    },
    /// Check a whole tlog-tiles log (any implementation's), from a base URL or a local
    /// directory: checkpoint signature, every bundle and hash tile recomputed, the
    /// root, the checkpoint's partial tiles. Exit 0 when it verifies, 1 naming the
    /// first failure, 2 on bad arguments.
    Verify(tlogd::commands::verify::VerifyArgs),
    /// Freeze a log for good: it accepts no more entries (HTTP 403), keeps serving
    /// reads and republishing its checkpoint. Recorded in the log's storage, so every
    /// frontend of a shared store obeys it. Opens the log as `serve` would (a POSIX
    /// log's daemon must be stopped first), commits what it holds, freezes it,
    /// publishes the final checkpoint and exits. `read_only = true` in the file does
    /// the same at start-up.
    Freeze {
        /// The daemon's TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Which of the file's `[[logs]]` (by name); not needed for a single log.
        #[arg(long)]
        log: Option<String>,
    },
    /// Copy a tlog-tiles log (Tessera's, tlogd's, anyone's; from a URL or a directory)
    /// into the log the configuration (or the flags, as `serve` takes them) names,
    /// on any backend: every bundle checked against the source's signed checkpoint
    /// before it is written, resumable (run it again after an interruption), and the
    /// source's checkpoint published only once the whole tree is copied. With this
    /// log's key the copy is a continuation that `tlogd serve` appends to; checked with
    /// --source-public-key only, it is a mirror, which tlogd does not append to.
    /// Prints the copy rate; exit 0 when the target holds the source's checkpoint.
    Migrate(Box<MigrateArgs>),
}

fn main() -> anyhow::Result<()> {
    keep_freed_memory();
    let cli = Cli::parse();
    match cli.command {
        Command::Keygen {
            origin,
            out,
            ct,
            algorithm,
        } => keygen::run(&origin, algorithm, ct, &out),
        Command::Verify(args) => std::process::exit(tlogd::commands::verify::run(args).into()),
        Command::Freeze { config, log } => {
            let c = Config::load(&config)?;
            c.validate()?;
            observe::init_logging(&c.log)?;
            runtime()?.block_on(freeze::run(c, log))
        }
        Command::Migrate(args) => runtime()?.block_on(migrate::run(*args)),
        Command::Serve(args) => {
            let config = serve::load_config(*args)?;
            observe::init_logging(&config.log)?;
            runtime()?.block_on(serve::run(config))
        }
    }
}

/// The runtime of the async commands (the engine's integrator runs on its own:
/// `tlogd::logset`).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

#[cfg(test)]
mod tests {
    use super::MI_OPTION_PURGE_DELAY;

    fn purge_delay() -> std::ffi::c_long {
        // SAFETY: reads one of the allocator's options.
        unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }
    }

    /// The option index really is the purge delay (mimalloc v3's default for it is
    /// 1000 ms; the options next to it default to 1 and 0), and the daemon turns
    /// purging off unless the environment chose a delay.
    #[test]
    fn freed_memory_is_kept_unless_the_environment_says_otherwise() {
        let chosen = std::env::var("MIMALLOC_PURGE_DELAY").ok();
        let before = chosen.as_deref().map_or(Ok(1000), str::parse);
        assert_eq!(Ok(purge_delay()), before);
        super::keep_freed_memory();
        assert_eq!(
            Ok(purge_delay()),
            if chosen.is_some() { before } else { Ok(-1) }
        );
    }
}
