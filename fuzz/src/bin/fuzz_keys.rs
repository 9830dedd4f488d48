//! AFL++ harness for [`tlogd_fuzz::keys`]: `cargo afl build --release --features afl`,
//! then `cargo afl fuzz -i fuzz/corpus/keys -o OUT .../fuzz_keys` (see fuzz/README.md).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tlogd_fuzz::keys(data);
    });
}
