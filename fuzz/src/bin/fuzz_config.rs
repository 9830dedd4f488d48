//! AFL++ harness for [`tlogd_fuzz::config`]: `cargo afl build --release --features afl`,
//! then `cargo afl fuzz -i fuzz/corpus/config -o OUT .../fuzz_config` (see fuzz/README.md).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tlogd_fuzz::config(data);
    });
}
