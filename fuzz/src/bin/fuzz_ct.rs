//! AFL++ harness for [`tlogd_fuzz::ct`]: `cargo afl build --release --features afl`,
//! then `cargo afl fuzz -i fuzz/corpus/ct -o OUT .../fuzz_ct` (see fuzz/README.md).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tlogd_fuzz::ct(data);
    });
}
