//! AFL++ harness for [`tlogd_fuzz::note`]: `cargo afl build --release --features afl`,
//! then `cargo afl fuzz -i fuzz/corpus/note -o OUT .../fuzz_note` (see fuzz/README.md).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tlogd_fuzz::note(data);
    });
}
