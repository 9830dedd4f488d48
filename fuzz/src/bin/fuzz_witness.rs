//! AFL++ harness for [`tlogd_fuzz::witness`]: `cargo afl build --release --features afl`,
//! then `cargo afl fuzz -i fuzz/corpus/witness -o OUT .../fuzz_witness` (see fuzz/README.md).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tlogd_fuzz::witness(data);
    });
}
