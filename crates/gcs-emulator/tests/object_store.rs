//! The emulator as `object_store`'s GCS client sees it.
//!
//! The behaviour tests run against the in-crate emulator, or against another XML-API endpoint
//! (Google's storage testbench) when `TLOGD_GCS_URL` is set, with bucket `TLOGD_GCS_BUCKET`
//! (default `tlog`), which must exist. The fault-injection tests always start an emulator of
//! their own, since only it can inject faults. Every test is bounded by a timeout.

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::TryStreamExt;
use futures::future::join_all;
use object_store::gcp::{GoogleCloudStorage, GoogleCloudStorageBuilder};
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, BackoffConfig, ClientOptions, Error, GetOptions, ObjectStore,
    ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig, UpdateVersion,
};
use tlogd_gcs_emulator::{Fault, GcsEmulator, Op, service_account_json};

const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs a test body under a deadline, so that nothing can hang the suite.
async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(TEST_TIMEOUT, body)
        .await
        .expect("test timed out");
}

/// Where the behaviour tests run: our emulator, or an external endpoint.
struct Target {
    emulator: Option<GcsEmulator>,
    url: String,
    bucket: String,
    /// A prefix no other test (or earlier run against a long-lived endpoint) uses.
    prefix: String,
}

fn unique(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

fn target(name: &str) -> Target {
    match std::env::var("TLOGD_GCS_URL") {
        Ok(url) if !url.is_empty() => Target {
            emulator: None,
            url: url.trim_end_matches('/').to_owned(),
            bucket: std::env::var("TLOGD_GCS_BUCKET").unwrap_or_else(|_| "tlog".into()),
            prefix: unique(name),
        },
        _ => {
            let emulator = GcsEmulator::start(&["tlog"]).unwrap();
            Target {
                url: emulator.url(),
                emulator: Some(emulator),
                bucket: "tlog".into(),
                prefix: unique(name),
            }
        }
    }
}

impl Target {
    fn store(&self) -> GoogleCloudStorage {
        client(&self.url, &self.bucket, retry(5))
    }

    fn path(&self, rest: &str) -> Path {
        Path::from(format!("{}/{rest}", self.prefix))
    }
}

/// Short backoff, so retried faults cost milliseconds.
fn retry(max_retries: usize) -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
            base: 2.0,
        },
        max_retries,
        retry_timeout: Duration::from_secs(20),
    }
}

fn client(url: &str, bucket: &str, retry: RetryConfig) -> GoogleCloudStorage {
    client_with(url, bucket, retry, Duration::from_secs(30))
}

fn client_with(
    url: &str,
    bucket: &str,
    retry: RetryConfig,
    timeout: Duration,
) -> GoogleCloudStorage {
    // The workspace builds reqwest with `rustls-no-provider` and ring (no aws-lc-rs):
    // reqwest wants the process's rustls provider installed before a client is built.
    let _ = rustls::crypto::ring::default_provider().install_default();
    GoogleCloudStorageBuilder::new()
        .with_service_account_key(service_account_json(url))
        .with_bucket_name(bucket)
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(timeout),
        )
        .with_retry(retry)
        .build()
        .unwrap()
}

fn create() -> PutOptions {
    PutMode::Create.into()
}

fn update(version: Option<String>) -> PutOptions {
    PutMode::Update(UpdateVersion {
        e_tag: None,
        version,
    })
    .into()
}

async fn read(store: &GoogleCloudStorage, path: &Path) -> Bytes {
    store.get(path).await.unwrap().bytes().await.unwrap()
}

#[tokio::test]
async fn put_get_head_range_delete() {
    bounded(async {
        let t = target("basic");
        let store = t.store();
        let path = t.path("a/b.txt");
        let data = Bytes::from_static(b"hello, transparency");
        let put = store.put(&path, data.clone().into()).await.unwrap();
        assert!(put.e_tag.is_some());
        assert!(put.version.is_some());

        let got = store.get(&path).await.unwrap();
        assert_eq!(got.meta.size, data.len() as u64);
        assert_eq!(got.meta.e_tag, put.e_tag);
        assert_eq!(got.meta.version, put.version);
        assert_eq!(got.bytes().await.unwrap(), data);

        let head = store.head(&path).await.unwrap();
        assert_eq!(head.size, data.len() as u64);
        assert_eq!(head.e_tag, put.e_tag);
        assert_eq!(head.location, path);

        assert_eq!(
            store.get_range(&path, 7..19).await.unwrap(),
            data.slice(7..19)
        );
        // A range past the end is cut at the end.
        assert_eq!(
            store.get_range(&path, 15..100).await.unwrap(),
            data.slice(15..)
        );
        let suffix = GetOptions {
            range: Some(object_store::GetRange::Suffix(5)),
            ..Default::default()
        };
        let got = store.get_opts(&path, suffix).await.unwrap();
        assert_eq!(got.range, 14..19);
        assert_eq!(got.bytes().await.unwrap(), data.slice(14..));
        let ranges = store.get_ranges(&path, &[0..5, 7..9]).await.unwrap();
        assert_eq!(ranges, vec![data.slice(0..5), data.slice(7..9)]);

        // Overwrite: new contents, new generation.
        let put2 = store
            .put(&path, Bytes::from_static(b"v2").into())
            .await
            .unwrap();
        assert_ne!(put2.version, put.version);
        assert_eq!(read(&store, &path).await, Bytes::from_static(b"v2"));

        // An empty object.
        let empty = t.path("empty");
        store.put(&empty, PutPayload::default()).await.unwrap();
        assert_eq!(read(&store, &empty).await, Bytes::new());
        assert_eq!(store.head(&empty).await.unwrap().size, 0);

        store.delete(&path).await.unwrap();
        assert!(matches!(
            store.get(&path).await,
            Err(Error::NotFound { .. })
        ));
        assert!(matches!(
            store.head(&path).await,
            Err(Error::NotFound { .. })
        ));
        assert!(matches!(
            store.delete(&path).await,
            Err(Error::NotFound { .. })
        ));
        let missing = t.path("never-written");
        assert!(matches!(
            store.get(&missing).await,
            Err(Error::NotFound { .. })
        ));
        assert!(matches!(
            store.get_range(&missing, 0..1).await,
            Err(Error::NotFound { .. })
        ));
    })
    .await;
}

#[tokio::test]
async fn keys_that_need_escaping() {
    bounded(async {
        let t = target("escaping");
        let store = t.store();
        for name in [
            "tile/0/x001/234.p/5",
            "sp ace+plus&amp<lt>",
            "ünïcode/∑",
            "a%2Fb",
        ] {
            let path = t.path(name);
            store
                .put(&path, Bytes::from(name.to_owned()).into())
                .await
                .unwrap();
            assert_eq!(read(&store, &path).await, Bytes::from(name.to_owned()));
        }
        let listed: Vec<Path> = store
            .list(Some(&Path::from(t.prefix.as_str())))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed.len(), 4, "{listed:?}");
    })
    .await;
}

#[tokio::test]
async fn list_with_and_without_delimiter() {
    bounded(async {
        let t = target("list");
        if let Some(e) = &t.emulator {
            // Small pages, so that both listings below take several.
            e.set_list_page_size(4);
        }
        let store = t.store();
        let mut keys = Vec::new();
        for dir in ["d0", "d1", "d2"] {
            for i in 0..5 {
                keys.push(format!("{dir}/f{i}"));
            }
        }
        for i in 0..6 {
            keys.push(format!("top{i}"));
        }
        keys.push("d1/sub/deep".into());
        for k in &keys {
            store
                .put(&t.path(k), Bytes::from(k.clone()).into())
                .await
                .unwrap();
        }
        let lists_before = t.emulator.as_ref().map(|e| e.request_count(Op::List));

        let root = Path::from(t.prefix.as_str());
        let mut listed: Vec<_> = store.list(Some(&root)).try_collect().await.unwrap();
        listed.sort_by(|a, b| a.location.cmp(&b.location));
        let mut want: Vec<Path> = keys.iter().map(|k| t.path(k)).collect();
        want.sort();
        assert_eq!(
            listed
                .iter()
                .map(|m| m.location.clone())
                .collect::<Vec<_>>(),
            want
        );
        for m in &listed {
            let k = m
                .location
                .as_ref()
                .strip_prefix(&format!("{}/", t.prefix))
                .unwrap();
            assert_eq!(m.size, k.len() as u64);
            assert!(m.e_tag.is_some());
        }
        if let (Some(e), Some(before)) = (&t.emulator, lists_before) {
            // 22 keys at 4 a page.
            assert_eq!(e.request_count(Op::List) - before, 6);
        }

        let result = store.list_with_delimiter(Some(&root)).await.unwrap();
        let mut objects: Vec<Path> = result.objects.iter().map(|m| m.location.clone()).collect();
        objects.sort();
        let want: Vec<Path> = (0..6).map(|i| t.path(&format!("top{i}"))).collect();
        assert_eq!(objects, want);
        let mut prefixes = result.common_prefixes.clone();
        prefixes.sort();
        assert_eq!(prefixes, vec![t.path("d0"), t.path("d1"), t.path("d2")]);
        if let (Some(e), Some(before)) = (&t.emulator, lists_before) {
            // 6 objects and 3 prefixes at 4 a page: 3 more pages.
            assert_eq!(e.request_count(Op::List) - before, 9);
        }

        let sub = store
            .list_with_delimiter(Some(&t.path("d1")))
            .await
            .unwrap();
        assert_eq!(sub.objects.len(), 5);
        assert_eq!(sub.common_prefixes, vec![t.path("d1/sub")]);

        let nothing = store
            .list_with_delimiter(Some(&t.path("nothing-here")))
            .await
            .unwrap();
        assert!(nothing.objects.is_empty() && nothing.common_prefixes.is_empty());
    })
    .await;
}

#[tokio::test]
async fn list_with_offset() {
    bounded(async {
        let t = target("offset");
        if let Some(e) = &t.emulator {
            e.set_list_page_size(2);
        }
        let store = t.store();
        for i in 0..7 {
            store
                .put(&t.path(&format!("k{i}")), Bytes::from_static(b"x").into())
                .await
                .unwrap();
        }
        let root = Path::from(t.prefix.as_str());
        let mut after: Vec<Path> = store
            .list_with_offset(Some(&root), &t.path("k2"))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .unwrap();
        after.sort();
        let want: Vec<Path> = (3..7).map(|i| t.path(&format!("k{i}"))).collect();
        assert_eq!(after, want);
    })
    .await;
}

#[tokio::test]
async fn create_only_if_absent() {
    bounded(async {
        let t = target("create");
        let store = t.store();
        let path = t.path("checkpoint");
        let first = store
            .put_opts(&path, Bytes::from_static(b"first").into(), create())
            .await
            .unwrap();
        assert!(first.version.is_some());
        let second = store
            .put_opts(&path, Bytes::from_static(b"second").into(), create())
            .await;
        assert!(
            matches!(second, Err(Error::AlreadyExists { .. })),
            "{second:?}"
        );
        assert_eq!(read(&store, &path).await, Bytes::from_static(b"first"));

        // Deleted, the key can be created again.
        store.delete(&path).await.unwrap();
        store
            .put_opts(&path, Bytes::from_static(b"third").into(), create())
            .await
            .unwrap();
        assert_eq!(read(&store, &path).await, Bytes::from_static(b"third"));
    })
    .await;
}

#[tokio::test]
async fn update_only_if_current() {
    bounded(async {
        let t = target("update");
        let store = t.store();
        let path = t.path("checkpoint");
        let v1 = store
            .put(&path, Bytes::from_static(b"v1").into())
            .await
            .unwrap();
        let v2 = store
            .put_opts(
                &path,
                Bytes::from_static(b"v2").into(),
                update(v1.version.clone()),
            )
            .await
            .unwrap();
        assert_ne!(v1.version, v2.version);
        assert_eq!(read(&store, &path).await, Bytes::from_static(b"v2"));

        let stale = store
            .put_opts(
                &path,
                Bytes::from_static(b"stale").into(),
                update(v1.version.clone()),
            )
            .await;
        assert!(
            matches!(stale, Err(Error::Precondition { .. })),
            "{stale:?}"
        );
        assert_eq!(read(&store, &path).await, Bytes::from_static(b"v2"));

        let missing = t.path("missing");
        let r = store
            .put_opts(
                &missing,
                Bytes::from_static(b"x").into(),
                update(v2.version.clone()),
            )
            .await;
        assert!(matches!(r, Err(Error::Precondition { .. })), "{r:?}");
        assert!(matches!(
            store.head(&missing).await,
            Err(Error::NotFound { .. })
        ));

        // A re-created object never takes an old generation: the stale version stays stale.
        store.delete(&path).await.unwrap();
        store
            .put(&path, Bytes::from_static(b"v3").into())
            .await
            .unwrap();
        let r = store
            .put_opts(
                &path,
                Bytes::from_static(b"x").into(),
                update(v2.version.clone()),
            )
            .await;
        assert!(matches!(r, Err(Error::Precondition { .. })), "{r:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_racers_have_exactly_one_winner() {
    bounded(async {
        let t = target("race");
        let store = t.store();
        for round in 0..20 {
            let path = t.path(&format!("round{round}"));
            let creates = (0..8).map(|i| {
                let (store, path) = (store.clone(), path.clone());
                async move {
                    store
                        .put_opts(&path, Bytes::from(format!("create{i}")).into(), create())
                        .await
                }
            });
            let results = join_all(creates).await;
            let winners: Vec<usize> = (0..8).filter(|i| results[*i].is_ok()).collect();
            assert_eq!(winners.len(), 1, "round {round}: {results:?}");
            for r in &results {
                assert!(
                    matches!(r, Ok(_) | Err(Error::AlreadyExists { .. })),
                    "round {round}: {r:?}"
                );
            }
            let winner = winners[0];
            assert_eq!(
                read(&store, &path).await,
                Bytes::from(format!("create{winner}"))
            );

            let version = results[winner].as_ref().unwrap().version.clone();
            let updates = (0..8).map(|i| {
                let (store, path, version) = (store.clone(), path.clone(), version.clone());
                async move {
                    store
                        .put_opts(
                            &path,
                            Bytes::from(format!("update{i}")).into(),
                            update(version),
                        )
                        .await
                }
            });
            let results = join_all(updates).await;
            let winners: Vec<usize> = (0..8).filter(|i| results[*i].is_ok()).collect();
            assert_eq!(winners.len(), 1, "round {round}: {results:?}");
            for r in &results {
                assert!(
                    matches!(r, Ok(_) | Err(Error::Precondition { .. })),
                    "round {round}: {r:?}"
                );
            }
            assert_eq!(
                read(&store, &path).await,
                Bytes::from(format!("update{}", winners[0]))
            );
        }
    })
    .await;
}

#[tokio::test]
async fn sixteen_mebibytes() {
    bounded(async {
        let t = target("large");
        let store = t.store();
        let path = t.path("big");
        let data: Bytes = (0..16u32 << 20)
            .map(|i| (i * 31 % 251) as u8)
            .collect::<Vec<_>>()
            .into();
        store.put(&path, data.clone().into()).await.unwrap();
        let got = read(&store, &path).await;
        assert_eq!(got.len(), data.len());
        assert!(got == data);
        let mid = 7 << 20;
        assert!(
            store.get_range(&path, mid..mid + 1000).await.unwrap()
                == data.slice(mid as usize..mid as usize + 1000)
        );
        assert_eq!(store.head(&path).await.unwrap().size, 16 << 20);
    })
    .await;
}

#[tokio::test]
async fn attributes_round_trip() {
    bounded(async {
        let t = target("attributes");
        let store = t.store();
        let path = t.path("checkpoint");
        let mut attributes = Attributes::new();
        attributes.insert(Attribute::ContentType, "text/plain; charset=utf-8".into());
        attributes.insert(Attribute::CacheControl, "no-cache".into());
        attributes.insert(Attribute::ContentDisposition, "inline".into());
        attributes.insert(Attribute::ContentLanguage, "en".into());
        attributes.insert(Attribute::Metadata("origin".into()), "tlogd".into());
        let opts = PutOptions {
            attributes: attributes.clone(),
            ..Default::default()
        };
        store
            .put_opts(&path, Bytes::from_static(b"checkpoint\n").into(), opts)
            .await
            .unwrap();
        let got = store.get(&path).await.unwrap();
        assert_eq!(got.attributes, attributes);

        // Without attributes, object_store sends application/octet-stream.
        let plain = t.path("plain");
        store
            .put(&plain, Bytes::from_static(b"x").into())
            .await
            .unwrap();
        let got = store.get(&plain).await.unwrap();
        assert_eq!(
            got.attributes
                .get(&Attribute::ContentType)
                .map(|v| v.as_ref()),
            Some("application/octet-stream")
        );
    })
    .await;
}

#[tokio::test]
async fn conditional_reads() {
    bounded(async {
        let t = target("conditional");
        let store = t.store();
        let path = t.path("tile");
        let put = store
            .put(&path, Bytes::from_static(b"data").into())
            .await
            .unwrap();
        let etag = put.e_tag.clone().unwrap();

        let opts = GetOptions {
            if_match: Some(etag.clone()),
            ..Default::default()
        };
        assert_eq!(
            store
                .get_opts(&path, opts)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap(),
            "data"
        );
        let opts = GetOptions {
            if_match: Some("\"0123\"".into()),
            ..Default::default()
        };
        let r = store.get_opts(&path, opts).await;
        assert!(matches!(r, Err(Error::Precondition { .. })), "{r:?}");
        let opts = GetOptions {
            if_none_match: Some(etag.clone()),
            ..Default::default()
        };
        let r = store.get_opts(&path, opts).await;
        assert!(matches!(r, Err(Error::NotModified { .. })), "{r:?}");
        let opts = GetOptions {
            version: put.version.clone(),
            ..Default::default()
        };
        assert_eq!(
            store
                .get_opts(&path, opts)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap(),
            "data"
        );
    })
    .await;
}

#[tokio::test]
async fn copy_and_multipart() {
    bounded(async {
        // Copies and multipart uploads are checked on the emulator only: the testbench's XML
        // API has neither.
        let emulator = GcsEmulator::start(&["tlog"]).unwrap();
        let store = client(&emulator.url(), "tlog", retry(3));
        let from = Path::from("src");
        let mut attributes = Attributes::new();
        attributes.insert(Attribute::ContentType, "text/plain".into());
        let opts = PutOptions {
            attributes: attributes.clone(),
            ..Default::default()
        };
        store
            .put_opts(&from, Bytes::from_static(b"copied").into(), opts)
            .await
            .unwrap();
        store.copy(&from, &Path::from("dst")).await.unwrap();
        let got = store.get(&Path::from("dst")).await.unwrap();
        assert_eq!(got.attributes, attributes);
        assert_eq!(got.bytes().await.unwrap(), "copied");
        let r = store.copy_if_not_exists(&from, &Path::from("dst")).await;
        assert!(matches!(r, Err(Error::AlreadyExists { .. })), "{r:?}");
        store
            .copy_if_not_exists(&from, &Path::from("dst2"))
            .await
            .unwrap();
        let r = store.copy(&Path::from("nope"), &Path::from("dst3")).await;
        assert!(matches!(r, Err(Error::NotFound { .. })), "{r:?}");

        let path = Path::from("multi");
        let mut upload = store.put_multipart(&path).await.unwrap();
        let parts: Vec<Bytes> = (0..3u8)
            .map(|i| Bytes::from(vec![b'a' + i; 5 << 20]))
            .collect();
        for p in &parts {
            upload.put_part(p.clone().into()).await.unwrap();
        }
        let result = upload.complete().await.unwrap();
        assert!(result.version.is_some());
        assert!(read(&store, &path).await == parts.concat());

        let mut aborted = store.put_multipart(&Path::from("aborted")).await.unwrap();
        aborted
            .put_part(Bytes::from_static(b"x").into())
            .await
            .unwrap();
        aborted.abort().await.unwrap();
        assert!(matches!(
            store.head(&Path::from("aborted")).await,
            Err(Error::NotFound { .. })
        ));
    })
    .await;
}

/// An emulator of its own and a client with quick retries, for the fault-injection tests.
fn faulty() -> (GcsEmulator, GoogleCloudStorage) {
    let emulator = GcsEmulator::start(&["tlog"]).unwrap();
    let store = client(&emulator.url(), "tlog", retry(5));
    (emulator, store)
}

#[tokio::test]
async fn unavailable_and_throttled_requests_are_retried() {
    bounded(async {
        let (e, store) = faulty();
        let path = Path::from("tile/0/000");
        e.inject(Op::Put, "tile/", 2, Fault::ServiceUnavailable);
        e.inject(Op::Put, "tile/", 1, Fault::TooManyRequests);
        store
            .put_opts(&path, Bytes::from_static(b"t").into(), create())
            .await
            .unwrap();
        assert_eq!(e.request_count(Op::Put), 4);
        assert_eq!(e.pending_faults(), 0);

        e.inject(Op::Get, "tile/", 1, Fault::TooManyRequests);
        e.inject(Op::Get, "tile/", 1, Fault::ServiceUnavailable);
        assert_eq!(read(&store, &path).await, "t");
        assert_eq!(e.request_count(Op::Get), 3);

        e.inject(Op::List, "tile/", 1, Fault::ServiceUnavailable);
        e.inject(Op::Delete, "tile/", 1, Fault::TooManyRequests);
        let listed: Vec<_> = store
            .list(Some(&Path::from("tile")))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        store.delete(&path).await.unwrap();
        assert_eq!(e.pending_faults(), 0);
        assert_eq!(e.request_count(Op::List), 2);
        assert_eq!(e.request_count(Op::Delete), 2);
        assert_eq!(e.request_count(Op::Any), 11);

        // A rule only fires for its operation and prefix.
        e.inject(Op::Put, "other/", 1, Fault::ServiceUnavailable);
        store
            .put(&path, Bytes::from_static(b"t").into())
            .await
            .unwrap();
        assert_eq!(e.pending_faults(), 1);
        e.clear_faults();
        assert_eq!(e.pending_faults(), 0);
    })
    .await;
}

#[tokio::test]
async fn outage_switch() {
    bounded(async {
        let e = GcsEmulator::start(&["tlog"]).unwrap();
        let store = client(&e.url(), "tlog", retry(2));
        let path = Path::from("checkpoint");
        store
            .put(&path, Bytes::from_static(b"c").into())
            .await
            .unwrap();
        e.set_unavailable(true);
        let r = store.get(&path).await;
        let Err(Error::Generic { source, .. }) = &r else {
            panic!("{r:?}")
        };
        assert!(source.to_string().contains("503"), "{source}");
        assert_eq!(e.request_count(Op::Get), 3);
        let r = store.put(&path, Bytes::from_static(b"d").into()).await;
        assert!(r.is_err());
        e.set_unavailable(false);
        assert_eq!(read(&store, &path).await, "c");
    })
    .await;
}

#[tokio::test]
async fn reset_before_applying() {
    bounded(async {
        let (e, store) = faulty();
        let path = Path::from("entries/000");
        // A plain (idempotent) put is retried after a reset.
        e.inject(Op::Put, "entries/", 1, Fault::Reset);
        store
            .put(&path, Bytes::from_static(b"p").into())
            .await
            .unwrap();
        assert_eq!(e.request_count(Op::Put), 2);
        // So is a read.
        e.inject(Op::Get, "entries/", 1, Fault::Reset);
        assert_eq!(read(&store, &path).await, "p");
        assert_eq!(e.request_count(Op::Get), 2);

        // A conditional put is not: the caller sees the reset, and nothing was written.
        let fresh = Path::from("entries/001");
        e.inject(Op::Put, "entries/001", 1, Fault::Reset);
        let r = store
            .put_opts(&fresh, Bytes::from_static(b"c").into(), create())
            .await;
        assert!(matches!(r, Err(Error::Generic { .. })), "{r:?}");
        assert!(format!("{r:?}").to_lowercase().contains("reset"), "{r:?}");
        assert!(e.object("tlog", "entries/001").is_none());

        // Nor is a delete.
        e.inject(Op::Delete, "entries/", 1, Fault::Reset);
        let r = store.delete(&path).await;
        assert!(matches!(r, Err(Error::Generic { .. })), "{r:?}");
        assert_eq!(e.request_count(Op::Delete), 1);
        assert!(e.object("tlog", "entries/000").is_some());
    })
    .await;
}

#[tokio::test]
async fn reset_after_applying_a_conditional_write() {
    bounded(async {
        let (e, store) = faulty();
        let path = Path::from("checkpoint");
        e.inject(Op::Put, "checkpoint", 1, Fault::ApplyThenReset);
        let r = store
            .put_opts(&path, Bytes::from_static(b"mine").into(), create())
            .await;
        // The client sees an error, though its write landed.
        assert!(matches!(r, Err(Error::Generic { .. })), "{r:?}");
        assert_eq!(e.request_count(Op::Put), 1);
        let stored = e.object("tlog", "checkpoint").unwrap();
        assert_eq!(stored.data, "mine");
        assert_eq!(read(&store, &path).await, "mine");
        let again = store
            .put_opts(&path, Bytes::from_static(b"again").into(), create())
            .await;
        assert!(
            matches!(again, Err(Error::AlreadyExists { .. })),
            "{again:?}"
        );

        // The same for an update: the new generation is there, the caller does not know it.
        let current = store.head(&path).await.unwrap().version;
        e.inject(Op::Put, "checkpoint", 1, Fault::ApplyThenReset);
        let r = store
            .put_opts(
                &path,
                Bytes::from_static(b"next").into(),
                update(current.clone()),
            )
            .await;
        assert!(r.is_err(), "{r:?}");
        let stored = e.object("tlog", "checkpoint").unwrap();
        assert_eq!(stored.data, "next");
        assert_ne!(Some(stored.generation.to_string()), current);
    })
    .await;
}

#[tokio::test]
async fn close_without_answer_is_retried_even_for_conditional_writes() {
    bounded(async {
        let (e, store) = faulty();
        // Closed before applying: object_store retries, and the retry succeeds.
        e.inject(Op::Put, "a", 1, Fault::Close);
        store
            .put_opts(&Path::from("a"), Bytes::from_static(b"a").into(), create())
            .await
            .unwrap();
        assert_eq!(e.request_count(Op::Put), 2);

        // Closed after applying: the retry fails its own precondition, so a Create that
        // succeeded reports AlreadyExists. Callers must read back before concluding.
        e.inject(Op::Put, "b", 1, Fault::ApplyThenClose);
        let r = store
            .put_opts(&Path::from("b"), Bytes::from_static(b"b").into(), create())
            .await;
        assert!(matches!(r, Err(Error::AlreadyExists { .. })), "{r:?}");
        assert_eq!(e.object("tlog", "b").unwrap().data, "b");
        assert_eq!(e.request_count(Op::Put), 4);
    })
    .await;
}

#[tokio::test]
async fn delays() {
    bounded(async {
        let e = GcsEmulator::start(&["tlog"]).unwrap();
        let store = client(&e.url(), "tlog", retry(0));
        let path = Path::from("slow");
        store
            .put(&path, Bytes::from_static(b"s").into())
            .await
            .unwrap();
        e.inject(Op::Get, "slow", 1, Fault::Delay(Duration::from_millis(300)));
        let start = Instant::now();
        assert_eq!(read(&store, &path).await, "s");
        assert!(start.elapsed() >= Duration::from_millis(300));

        // A client that gives up on a slow conditional write: the write still lands.
        let impatient = client_with(&e.url(), "tlog", retry(0), Duration::from_millis(200));
        e.inject(Op::Put, "late", 1, Fault::Delay(Duration::from_millis(600)));
        let r = impatient
            .put_opts(
                &Path::from("late"),
                Bytes::from_static(b"l").into(),
                create(),
            )
            .await;
        assert!(r.is_err(), "{r:?}");
        assert!(e.object("tlog", "late").is_none());
        let deadline = Instant::now() + Duration::from_secs(10);
        while e.object("tlog", "late").is_none() {
            assert!(Instant::now() < deadline, "the delayed write never landed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn truncated_downloads_are_resumed() {
    bounded(async {
        let (e, store) = faulty();
        let path = Path::from("bundle");
        let data: Bytes = (0..100_000u32).map(|i| i as u8).collect::<Vec<_>>().into();
        store.put(&path, data.clone().into()).await.unwrap();
        e.inject(Op::Get, "bundle", 1, Fault::TruncateBody(40_000));
        assert!(read(&store, &path).await == data);
        // The second request asked for the rest only.
        assert_eq!(e.request_count(Op::Get), 2);
    })
    .await;
}

#[test]
fn outlives_the_runtimes_that_use_it_and_stops_on_drop() {
    let emulator = GcsEmulator::start(&["tlog"]).unwrap();
    let addr = emulator.addr();
    for round in 0..2 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(bounded(async {
            let store = client(&emulator.url(), "tlog", retry(2));
            let path = Path::from(format!("r{round}"));
            store
                .put(&path, Bytes::from_static(b"x").into())
                .await
                .unwrap();
            assert_eq!(read(&store, &path).await, "x");
        }));
    }
    assert_eq!(emulator.object("tlog", "r0").unwrap().data, "x");
    drop(emulator);
    assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err());
}

#[test]
fn rejects_bad_bucket_names() {
    assert!(GcsEmulator::start(&["a/b"]).is_err());
    assert!(GcsEmulator::start(&[""]).is_err());
}

#[tokio::test]
async fn unknown_bucket() {
    bounded(async {
        let e = GcsEmulator::start(&["tlog"]).unwrap();
        let store = client(&e.url(), "other", retry(0));
        let r = store.get(&Path::from("x")).await;
        assert!(matches!(r, Err(Error::NotFound { .. })), "{r:?}");
        assert!(format!("{r:?}").contains("NoSuchBucket"), "{r:?}");
    })
    .await;
}

/// Kills the child on every exit path, so a failing assertion leaves no process behind.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn binary_prints_its_url_and_serves() {
    bounded(async {
        let mut child = Child(
            Command::new(env!("CARGO_BIN_EXE_tlogd-gcs-emulator"))
                .args([
                    "--listen",
                    "127.0.0.1:0",
                    "--bucket",
                    "one",
                    "--bucket",
                    "two",
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let stdout = child.0.stdout.take().unwrap();
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).unwrap();
            line
        })
        .await
        .unwrap();
        let url = line.trim();
        assert!(url.starts_with("http://127.0.0.1:"), "{url:?}");
        for bucket in ["one", "two"] {
            let store = client(url, bucket, retry(2));
            store
                .put(&Path::from("k"), Bytes::from(bucket).into())
                .await
                .unwrap();
            assert_eq!(read(&store, &Path::from("k")).await, bucket);
        }
    })
    .await;
}

/// Injects faults into the next requests of one client: through the emulator's API, or, on
/// Google's testbench (`TLOGD_GCS_URL`), through its `/retry_test` resource, so that the same
/// scenarios show that both fail the same way as `object_store` sees it.
enum Injector {
    Own(GcsEmulator),
    Testbench { url: String, bucket: String },
}

impl Injector {
    fn new() -> Self {
        match std::env::var("TLOGD_GCS_URL") {
            Ok(url) if !url.is_empty() => Injector::Testbench {
                url: url.trim_end_matches('/').to_owned(),
                bucket: std::env::var("TLOGD_GCS_BUCKET").unwrap_or_else(|_| "tlog".into()),
            },
            _ => Injector::Own(GcsEmulator::start(&["tlog"]).unwrap()),
        }
    }

    /// A client whose next requests meet `faults` (in order, per operation), and on the
    /// testbench the id of its retry test.
    fn client(&self, faults: &[(Op, Fault)]) -> (GoogleCloudStorage, Option<String>) {
        match self {
            Injector::Own(e) => {
                for (op, fault) in faults {
                    e.inject(*op, "", 1, fault.clone());
                }
                (client(&e.url(), "tlog", retry(5)), None)
            }
            Injector::Testbench { url, bucket } => {
                let mut instructions = serde_json::Map::new();
                for (op, fault) in faults {
                    let method = match op {
                        Op::Put => "storage.objects.insert",
                        Op::Get | Op::Head => "storage.objects.get",
                        Op::Delete => "storage.objects.delete",
                        Op::List => "storage.objects.list",
                        other => panic!("no testbench method for {other:?}"),
                    };
                    let action = match fault {
                        Fault::ServiceUnavailable => "return-503",
                        Fault::TooManyRequests => "return-429",
                        Fault::Reset => "return-reset-connection",
                        other => panic!("no testbench fault for {other:?}"),
                    };
                    instructions
                        .entry(method)
                        .or_insert_with(|| serde_json::Value::Array(Vec::new()))
                        .as_array_mut()
                        .unwrap()
                        .push(action.into());
                }
                let body = serde_json::json!({ "instructions": instructions }).to_string();
                let (status, answer) = http(url, "POST", "/retry_test", &body);
                assert_eq!(status, 200, "{answer}");
                let id = serde_json::from_str::<serde_json::Value>(&answer).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                let mut headers = object_store::HeaderMap::new();
                headers.insert("x-retry-test-id", id.parse().unwrap());
                let store = GoogleCloudStorageBuilder::new()
                    .with_service_account_key(service_account_json(url))
                    .with_bucket_name(bucket)
                    .with_client_options(
                        ClientOptions::new()
                            .with_allow_http(true)
                            .with_timeout(Duration::from_secs(30))
                            .with_default_headers(headers),
                    )
                    .with_retry(retry(5))
                    .build()
                    .unwrap();
                (store, Some(id))
            }
        }
    }

    /// Whether every injected fault has fired.
    fn all_fired(&self, id: &Option<String>) -> bool {
        match (self, id) {
            (Injector::Own(e), _) => e.pending_faults() == 0,
            (Injector::Testbench { url, .. }, Some(id)) => {
                let (_, answer) = http(url, "GET", &format!("/retry_test/{id}"), "");
                serde_json::from_str::<serde_json::Value>(&answer).unwrap()["completed"]
                    == serde_json::Value::Bool(true)
            }
            (Injector::Testbench { .. }, None) => false,
        }
    }

    /// A client without faults.
    fn plain(&self) -> GoogleCloudStorage {
        match self {
            Injector::Own(e) => client(&e.url(), "tlog", retry(5)),
            Injector::Testbench { url, bucket } => client(url, bucket, retry(5)),
        }
    }
}

/// A minimal blocking HTTP/1.0 exchange, for the testbench's control API.
fn http(base: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let host = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_owned())
}

#[tokio::test]
async fn faults_as_object_store_sees_them() {
    bounded(async {
        let injector = Injector::new();
        let bucket_prefix = unique("faults");
        let p = |k: &str| Path::from(format!("{bucket_prefix}/{k}"));
        use Fault::*;

        // Throttling and outages are retried, for plain and conditional writes alike (no
        // answer came, so nothing was applied).
        let (store, id) =
            injector.client(&[(Op::Put, ServiceUnavailable), (Op::Put, TooManyRequests)]);
        store
            .put(&p("a"), Bytes::from_static(b"a").into())
            .await
            .unwrap();
        assert!(injector.all_fired(&id));
        let (store, id) = injector.client(&[(Op::Put, ServiceUnavailable)]);
        store
            .put_opts(&p("b"), Bytes::from_static(b"b").into(), create())
            .await
            .unwrap();
        assert!(injector.all_fired(&id));
        let (store, id) =
            injector.client(&[(Op::Get, TooManyRequests), (Op::Get, ServiceUnavailable)]);
        assert_eq!(read(&store, &p("a")).await, "a");
        assert!(injector.all_fired(&id));
        let (store, id) = injector.client(&[(Op::List, ServiceUnavailable)]);
        let listed: Vec<_> = store
            .list(Some(&Path::from(bucket_prefix.as_str())))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed.len(), 2);
        assert!(injector.all_fired(&id));

        // A reset is retried for plain puts and reads...
        let (store, id) = injector.client(&[(Op::Put, Reset)]);
        store
            .put(&p("c"), Bytes::from_static(b"c").into())
            .await
            .unwrap();
        assert!(injector.all_fired(&id));
        let (store, id) = injector.client(&[(Op::Get, Reset)]);
        assert_eq!(read(&store, &p("c")).await, "c");
        assert!(injector.all_fired(&id));

        // ...but not for conditional puts or deletes, which surface it to the caller.
        let (store, id) = injector.client(&[(Op::Put, Reset)]);
        let r = store
            .put_opts(&p("d"), Bytes::from_static(b"d").into(), create())
            .await;
        assert!(matches!(r, Err(Error::Generic { .. })), "{r:?}");
        assert!(injector.all_fired(&id));
        let plain = injector.plain();
        assert!(matches!(
            plain.head(&p("d")).await,
            Err(Error::NotFound { .. })
        ));
        let version = plain.head(&p("c")).await.unwrap().version;
        let (store, id) = injector.client(&[(Op::Put, Reset)]);
        let r = store
            .put_opts(&p("c"), Bytes::from_static(b"c2").into(), update(version))
            .await;
        assert!(matches!(r, Err(Error::Generic { .. })), "{r:?}");
        assert!(injector.all_fired(&id));
        assert_eq!(read(&plain, &p("c")).await, "c");
        let (store, id) = injector.client(&[(Op::Delete, Reset)]);
        let r = store.delete(&p("c")).await;
        assert!(matches!(r, Err(Error::Generic { .. })), "{r:?}");
        assert!(injector.all_fired(&id));
        assert_eq!(read(&plain, &p("c")).await, "c");
    })
    .await;
}
