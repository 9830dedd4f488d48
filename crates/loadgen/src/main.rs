//! `tlog-loadgen`: drive a tlog-tiles or static-ct-api log, verify it, report; `tlog-loadgen
//! ct-root` mints a root CA for a test CT log.

use clap::Parser;

// The instrument's own CPU per add is part of what it reports: glibc's malloc and free
// were the largest user-space item in its profile (the HTTP stacks allocate per request).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "ct-root") {
        // `ct-root` stands in for the program name, so clap names it in its messages.
        let a = tlog_loadgen::CtRootArgs::parse_from(&argv[1..]);
        return match tlog_loadgen::ct::write_root(&a.cert, &a.key) {
            Ok(_) => {
                println!(
                    "wrote the root certificate to {} and its key to {}",
                    a.cert.display(),
                    a.key.display()
                );
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tlog-loadgen ct-root: {e}");
                std::process::ExitCode::from(2)
            }
        };
    }
    let args = tlog_loadgen::Args::parse_from(argv);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tlog-loadgen: cannot start runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match rt.block_on(tlog_loadgen::run(args)) {
        Ok(report) => {
            print!("{}", tlog_loadgen::report::table(&report));
            if report.ok {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("tlog-loadgen: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
