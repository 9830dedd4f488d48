//! AFL++ harness for [`tlogd_fuzz::tile`]: `cargo afl build --release --features afl`,
//! then `cargo afl fuzz -i fuzz/corpus/tile -o OUT .../fuzz_tile` (see fuzz/README.md).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tlogd_fuzz::tile(data);
    });
}
