//! Durable appends through the real engine and POSIX backend, without HTTP: what the
//! storage path costs per entry at several batch sizes (each batch = one commit with
//! its fsyncs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tlogd_core::engine::{Log, LogConfig};
use tlogd_core::note::NoteSigner;
use tlogd_storage_posix::PosixStorage;

const SKEY: &str =
    "PRIVATE+KEY+example.com/log/testdata+33d7b496+AeymY/SZAX0jZcJ8enZ5FY1Dz+wTML2yWSkK+9DSF3eg";

fn posix_append(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut g = c.benchmark_group("posix_durable_append");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    for batch in [256usize, 1024, 4096] {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = Arc::new(PosixStorage::open(dir.path(), "example.com/bench").expect("open"));
        let mut cfg = LogConfig::new(
            "example.com/bench",
            Arc::new(NoteSigner::from_skey(SKEY).expect("key")),
        );
        cfg.batch_max_entries = batch;
        cfg.max_pending_entries = 1 << 20;
        let (log, _tasks) = rt.block_on(Log::open(storage, None, cfg)).expect("log");
        let mut next = 0u64;
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(format!("batch {batch}"), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let futs: Vec<_> = (0..batch)
                        .map(|_| {
                            next += 1;
                            let log = log.clone();
                            let e = Bytes::from(format!("bench entry {next} {}", "y".repeat(100)));
                            rt.spawn(async move { log.add(e).await })
                        })
                        .collect();
                    rt.block_on(async {
                        for f in futs {
                            f.await.expect("join").expect("add");
                        }
                    });
                }
                start.elapsed()
            })
        });
        log.shutdown();
    }
    g.finish();
}

criterion_group!(benches, posix_append);
criterion_main!(benches);
