//! AFL++ harness for [`tlogd_fuzz::verify_log`]: `cargo afl build --release --features afl`,
//! then `cargo afl fuzz -i fuzz/corpus/verify_log -o OUT .../fuzz_verify_log` (see fuzz/README.md).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tlogd_fuzz::verify_log(data);
    });
}
