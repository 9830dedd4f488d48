//! `faultfs`: mount a fault-injecting pass-through filesystem and control it from the
//! shell (benches, README examples). See the crate documentation for the model.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use faultfs::control::{self, Request, Response};
use faultfs::{CutMode, Mount, Options, Profile};

#[derive(Parser)]
#[command(
    name = "faultfs",
    version,
    about = "Fault-injecting FUSE filesystem for tests"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Mount DIR at MNT and serve it until SIGINT/SIGTERM or `faultfs umount MNT`.
    Mount {
        /// Latency profile: none, cloud-block, network.
        #[arg(long, default_value = "none")]
        profile: String,
        /// Per-operation latency, OP=LATENCY (fsync=5ms, rename=1ms..2ms); repeatable.
        #[arg(long = "latency", value_name = "OP=LATENCY")]
        latency: Vec<String>,
        /// Seed of the latency jitter.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Return once mounted, leaving the server running in the background (its pid
        /// on stdout; its log in the runtime directory beside its control socket).
        #[arg(long)]
        background: bool,
        /// Print `ready PID` on stdout once mounted (for a parent waiting on it).
        #[arg(long)]
        ready_stdout: bool,
        /// Unmount and exit when the parent process ends, even if it is killed (for a
        /// test harness that starts the server: it never outlives the test).
        #[arg(long)]
        exit_with_parent: bool,
        /// (internal) The log file --background set up, removed at a clean exit.
        #[arg(long, hide = true)]
        remove_log: Option<PathBuf>,
        /// The backing directory.
        dir: PathBuf,
        /// The mount point.
        mnt: PathBuf,
    },
    /// Power cut: freeze MNT and lose what was not made durable.
    Cut {
        /// Keep a seeded subset of the pending changes (as a disk would) instead of none.
        #[arg(long, value_name = "SEED")]
        subset: Option<u64>,
        /// Unmount afterwards.
        #[arg(long)]
        umount: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// The mount point.
        mnt: PathBuf,
    },
    /// Change latencies or inject errors on a mounted MNT.
    Set {
        /// Switch to this latency profile.
        #[arg(long)]
        profile: Option<String>,
        /// Per-operation latency override, OP=LATENCY; repeatable.
        #[arg(long = "latency", value_name = "OP=LATENCY")]
        latency: Vec<String>,
        /// The Nth fsync from now fails with EIO.
        #[arg(long, value_name = "N")]
        eio_fsync: Option<u64>,
        /// The Nth write from now fails with EIO.
        #[arg(long, value_name = "N")]
        eio_write: Option<u64>,
        /// ENOSPC after this many more bytes written.
        #[arg(long, value_name = "BYTES")]
        enospc_after: Option<u64>,
        /// Every change fails with EROFS from now on.
        #[arg(long)]
        erofs: bool,
        /// Disarm every injected error first.
        #[arg(long)]
        clear_faults: bool,
        /// The mount point.
        mnt: PathBuf,
    },
    /// Show MNT's profile, armed faults and state.
    Status {
        /// The mount point.
        mnt: PathBuf,
    },
    /// Unmount MNT (lazily if its server is gone).
    Umount {
        /// The mount point.
        mnt: PathBuf,
    },
}

const TIMEOUT: Duration = Duration::from_secs(120);

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FAULTFS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fuser=error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Mount {
            profile,
            latency,
            seed,
            background,
            ready_stdout,
            exit_with_parent,
            remove_log,
            dir,
            mnt,
        } => {
            let mut p = Profile::named(&profile).map_err(anyhow::Error::msg)?;
            for o in &latency {
                p.apply_override(o).map_err(anyhow::Error::msg)?;
            }
            if background {
                return spawn_background(&latency, seed, &profile, &dir, &mnt);
            }
            serve(p, seed, &dir, &mnt, ready_stdout, exit_with_parent)?;
            if let Some(log) = remove_log {
                let _ = std::fs::remove_file(log);
            }
            Ok(())
        }
        Cmd::Cut {
            subset,
            umount,
            json,
            mnt,
        } => {
            let mode = match subset {
                Some(seed) => CutMode::Subset { seed },
                None => CutMode::All,
            };
            match control::request(&mnt, &Request::Cut { mode }, TIMEOUT)? {
                Response::Cut(r) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&r)?);
                    } else {
                        println!("{r}");
                        for op in &r.last_ops {
                            println!("  {op}");
                        }
                    }
                }
                other => bail!("cut failed: {}", describe(other)),
            }
            if umount {
                umount_cmd(&mnt)?;
            }
            Ok(())
        }
        Cmd::Set {
            profile,
            latency,
            eio_fsync,
            eio_write,
            enospc_after,
            erofs,
            clear_faults,
            mnt,
        } => {
            if profile.is_some() || !latency.is_empty() {
                expect_ok(control::request(
                    &mnt,
                    &Request::SetLatency {
                        profile,
                        overrides: latency,
                    },
                    TIMEOUT,
                )?)?;
            }
            let faults = Request::SetFaults {
                clear: clear_faults,
                eio_fsync,
                eio_write,
                enospc_after,
                erofs: erofs.then_some(true),
            };
            expect_ok(control::request(&mnt, &faults, TIMEOUT)?)
        }
        Cmd::Status { mnt } => match control::request(&mnt, &Request::Status, TIMEOUT)? {
            Response::Status(s) => {
                println!("{}", serde_json::to_string_pretty(&s)?);
                Ok(())
            }
            other => bail!("status failed: {}", describe(other)),
        },
        Cmd::Umount { mnt } => umount_cmd(&mnt),
    }
}

fn describe(r: Response) -> String {
    match r {
        Response::Error(e) => e,
        other => format!("unexpected answer {other:?}"),
    }
}

fn expect_ok(r: Response) -> Result<()> {
    match r {
        Response::Ok => Ok(()),
        other => bail!("{}", describe(other)),
    }
}

/// Serves the mount in the foreground until a signal or `faultfs umount`.
fn serve(
    profile: Profile,
    seed: u64,
    dir: &Path,
    mnt: &Path,
    ready_stdout: bool,
    exit_with_parent: bool,
) -> Result<()> {
    // Block the signals before any thread starts, so every thread inherits the mask and
    // only the wait below sees them.
    // SAFETY: plain signal-set manipulation on a local set.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    if exit_with_parent {
        // SIGTERM (waited for below) when the parent dies.
        // SAFETY: prctl with an integer argument.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
        // SAFETY: getppid has no failure mode.
        if unsafe { libc::getppid() } == 1 {
            bail!("the parent process is already gone");
        }
    }
    let options = Options {
        profile,
        seed,
        control_socket: true,
        ..Options::default()
    };
    let m = Mount::new(dir, mnt, options).context("mounting")?;
    eprintln!(
        "faultfs: {} mounted at {} (profile {}); `faultfs cut {}` cuts, `faultfs umount {}` ends",
        m.backing().display(),
        m.mountpoint().display(),
        m.profile(),
        m.mountpoint().display(),
        m.mountpoint().display()
    );
    if ready_stdout {
        println!("ready {}", std::process::id());
    }
    let wait = libc::timespec {
        tv_sec: 0,
        tv_nsec: 100_000_000,
    };
    loop {
        // SAFETY: valid set and timeout; no siginfo wanted.
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &wait) };
        if sig > 0 || m.unmount_requested() {
            break;
        }
    }
    m.unmount().context("unmounting")?;
    Ok(())
}

/// Starts `faultfs mount` again in the background and returns once it has mounted.
fn spawn_background(
    latency: &[String],
    seed: u64,
    profile: &str,
    dir: &Path,
    mnt: &Path,
) -> Result<()> {
    let exe = std::env::current_exe().context("finding faultfs's own executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg("--profile")
        .arg(profile)
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--ready-stdout");
    for l in latency {
        cmd.arg("--latency").arg(l);
    }
    cmd.arg(dir).arg(mnt);
    // The server must not keep the caller's stdout/stderr open (a caller that captures
    // them, `$(faultfs mount --background ...)`, would wait for it forever): its log
    // goes to a file beside its control socket.
    let log_path = control::socket_path(mnt)?.with_extension("log");
    if let Some(dir) = log_path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    }
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    cmd.arg("--remove-log").arg(&log_path);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    // Its own process group: a Ctrl-C meant for the shell's foreground job spares it.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().context("starting the background server")?;
    let out = child.stdout.take().context("no stdout from the server")?;
    let mut line = String::new();
    // The server writes its line once mounted, or exits (EOF) on failure.
    BufReader::new(out).read_line(&mut line)?;
    if !line.starts_with("ready") {
        let status = child.wait()?;
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        bail!("the background server failed ({status}): {}", log.trim());
    }
    println!("{}", child.id());
    eprintln!(
        "faultfs: serving {} in the background (pid {}, log {})",
        mnt.display(),
        child.id(),
        log_path.display()
    );
    Ok(())
}

fn umount_cmd(mnt: &Path) -> Result<()> {
    let canon = mnt
        .canonicalize()
        .with_context(|| format!("{}", mnt.display()))?;
    match control::request(mnt, &Request::Unmount, Duration::from_secs(10)) {
        Ok(Response::Ok) => {}
        Ok(other) => bail!("{}", describe(other)),
        Err(e) => {
            // The server is gone: lazily unmount what it left.
            eprintln!("faultfs: {e}; unmounting lazily");
            let _ = Command::new("umount").arg("-l").arg(&canon).status();
        }
    }
    let start = Instant::now();
    while mounted_faultfs(&canon) {
        if start.elapsed() > Duration::from_secs(20) {
            bail!("{} is still mounted", canon.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn mounted_faultfs(mnt: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .map(|m| {
            m.lines().any(|l| {
                let mut f = l.split(' ');
                let (_, at, ty) = (f.next(), f.next(), f.next());
                at == Some(&*mnt.to_string_lossy()) && ty == Some("fuse.faultfs")
            })
        })
        .unwrap_or(false)
}
