//! `tlog-loadgen`: drive a tlog-tiles log, verify it, report.

use clap::Parser;

// The instrument's own CPU per add is part of what it reports: glibc's malloc and free
// were the largest user-space item in its profile (the HTTP stacks allocate per request).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let args = tlog_loadgen::Args::parse();
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
