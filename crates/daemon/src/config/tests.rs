//! The configuration file's parsing and validation, section by section.

use super::*;

#[test]
fn database_urls_without_verified_tls_to_another_host_are_warned_about() {
    for quiet in [
        "mysql://u:p@127.0.0.1:3306/tlog",
        "postgres://u:p@localhost/tlog",
        "postgres://u:p@[::1]:5432/tlog",
        "postgres://u:p@db.example/tlog?sslmode=verify-full",
        "mysql://u:p@db.example/tlog?ssl-mode=VERIFY_IDENTITY",
        "mysql://u:p@db.example/tlog?ssl-mode=verify_ca&charset=utf8mb4",
        "postgres://u@/tlog?host=/run/postgresql",
    ] {
        assert_eq!(database_tls_warning(quiet), None, "{quiet}");
    }
    for (loud, says) in [
        (
            "mysql://u:secret@db.example:3306/tlog",
            "add `ssl-mode=verify_ca",
        ),
        (
            "postgres://u:secret@10.0.0.5/tlog?sslmode=require",
            "`sslmode=require`",
        ),
        (
            "mysql://u:secret@db.example/tlog?ssl-mode=REQUIRED",
            "`ssl-mode=required`",
        ),
    ] {
        let w = database_tls_warning(loud).expect(loud);
        assert!(w.contains(says), "{w}");
        assert!(!w.contains("secret"), "{w}");
        assert_eq!(w.lines().count(), 1);
    }
}

#[test]
fn example_configs_parse_and_validate() {
    // Read at run time: the binary may come from a build in another clone.
    let manifest: std::path::PathBuf = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    // This module is also compiled into the fuzz crate, one level up from the
    // repository root instead of two: find the examples from either.
    let root = manifest
        .ancestors()
        .find(|d| d.join("config/posix.toml").is_file())
        .expect("config/ above the crate");
    let dir = root.join("crates/daemon");
    let c = Config::load(&dir.join("../../config/posix.toml")).unwrap();
    c.validate().unwrap();
    assert_eq!(
        c.batching.max_entries,
        Config::defaults().batching.max_entries
    );
    let c = Config::load(&dir.join("../../config/mysql.toml")).unwrap();
    c.validate().unwrap();
    assert_eq!(c.storage.backend, "mysql");
    assert_eq!(c.storage.pool_size, Config::defaults().storage.pool_size);
    let c = Config::load(&dir.join("../../config/postgres.toml")).unwrap();
    c.validate().unwrap();
    assert_eq!(c.storage.backend, "postgres");
    let c = Config::load(&dir.join("../../config/s3.toml")).unwrap();
    c.validate().unwrap();
    assert_eq!(c.storage.backend, "s3");
    assert_eq!(
        c.storage.write_concurrency,
        Config::defaults().storage.write_concurrency
    );
    let c = Config::load(&dir.join("../../config/gcs.toml")).unwrap();
    c.validate().unwrap();
    assert_eq!(c.storage.backend, "gcs");
    let c = Config::load(&dir.join("../../config/three-logs.toml")).unwrap();
    c.validate().unwrap();
    let logs = c.served_logs();
    let names: Vec<&str> = logs.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["products", "audit", "archive"]);
    assert_eq!(logs[1].storage.backend, "mysql");
    assert!(logs[2].read_only);
    let c = Config::load(&dir.join("../../config/ct.toml")).unwrap();
    c.validate().unwrap();
    let ct = c.ct.as_ref().expect("[ct]");
    assert!(ct.freeze_after_window);
    assert_eq!((ct.freeze_grace_s, ct.mmd_seconds), (604_800, 60));
    let c = Config::load(&dir.join("../../config/ct-shards.toml")).unwrap();
    c.validate().unwrap();
    let logs = c.served_logs();
    let names: Vec<&str> = logs.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["2027h1", "2027h2"]);
    let windows: Vec<_> = logs
        .iter()
        .map(|l| l.ct.as_ref().expect("[logs.ct]").shard_window().unwrap())
        .collect();
    assert_eq!(windows[0].1, windows[1].0, "the shards' windows meet");
    // A CT shard without `[batching]` lingers as a CT log does.
    assert!(logs.iter().all(|l| l.ct.is_some()
        && l.batching.max_age(true) == std::time::Duration::from_millis(CT_BATCH_MAX_AGE_MS)));
}

/// `[batching] max_age_ms`: unset, 0 for a tlog-tiles log and 10 ms for a CT log;
/// set, what it says for either.
#[test]
fn batching_linger_defaults_by_kind_of_log() {
    use std::time::Duration;
    let unset = BatchingConfig::default();
    assert_eq!(unset.max_age(false), Duration::ZERO);
    assert_eq!(unset.max_age(true), Duration::from_millis(10));
    let set: BatchingConfig = toml::from_str("max_age_ms = 0").unwrap();
    assert_eq!(set.max_age(true), Duration::ZERO);
    let set: BatchingConfig = toml::from_str("max_age_ms = 3").unwrap();
    assert_eq!(set.max_age(false), Duration::from_millis(3));
}

/// `[batching] min_commit_interval_ms`: 1 ms unless set; 0 turns pacing off.
#[test]
fn commit_pacing_defaults_to_a_millisecond() {
    use std::time::Duration;
    assert_eq!(
        BatchingConfig::default().min_commit_interval(),
        Duration::from_millis(1)
    );
    let set: BatchingConfig = toml::from_str("min_commit_interval_ms = 0").unwrap();
    assert_eq!(set.min_commit_interval(), Duration::ZERO);
}

/// The log's keys: one file, or a list in signing order (inside `[[logs]]` too);
/// both at once, a file twice, or several keys for a CT log are refused.
#[test]
fn signing_keys_are_one_file_or_a_list_in_signing_order() {
    let base = "origin = \"example.com/x\"\nstorage.dir = \"x\"\n";
    let files = |toml: &str| {
        let c = Config::parse(&format!("{base}{toml}")).unwrap();
        c.validate().map_err(|e| e.to_string())?;
        Ok::<_, String>(c.served_logs()[0].key_files())
    };
    let p = |s: &str| PathBuf::from(s);
    assert_eq!(
        files("private_key_files = [\"new.key\", \"old.key\"]\n"),
        Ok(vec![p("new.key"), p("old.key")])
    );
    assert_eq!(
        files("private_key_file = \"a.key\"\n"),
        Ok(vec![p("a.key")])
    );
    assert_eq!(files(""), Ok(vec![]));
    let e = files("private_key_file = \"a.key\"\nprivate_key_files = [\"b.key\"]\n").unwrap_err();
    assert!(e.contains("not both"), "{e}");
    let e = files("private_key_files = [\"a.key\", \"a.key\"]\n").unwrap_err();
    assert!(e.contains("names a.key twice"), "{e}");
    // A CT log: its ECDSA key, then note keys signing after it.
    let ct = "[ct]\nroots_file = \"r.pem\"\n";
    Config::parse(&format!(
        "origin = \"ct.example.com/2026h1\"\nstorage.dir = \"d\"\nprivate_key_files = [\"a.pem\", \"b.key\"]\n{ct}"
    ))
    .unwrap()
    .validate()
    .unwrap();
    let logs = two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n").replace(
        "private_key_file = \"b.key\"",
        "private_key_files = [\"b1.key\", \"b2.key\"]",
    );
    let c = Config::parse(&logs).unwrap();
    c.validate().unwrap();
    assert_eq!(c.served_logs()[1].key_files(), [p("b1.key"), p("b2.key")]);
    let e = Config::parse(&format!("private_key_files = [\"k\"]\n{logs}")).unwrap_err();
    assert!(
        e.to_string()
            .contains("`private_key_files` is a setting of one log"),
        "{e}"
    );
}

fn two_logs(a: &str, b: &str) -> String {
    format!(
        "[[logs]]\nname = \"a\"\norigin = \"example.com/a\"\nprivate_key_file = \"a.key\"\n{a}\
         [[logs]]\nname = \"b\"\norigin = \"example.com/b\"\nprivate_key_file = \"b.key\"\n{b}"
    )
}

/// What several logs must not share, and keys that belong inside `[[logs]]`: each
/// refused with one line naming it. A single-log file is one log named "" at `/`.
#[test]
fn storage_sync_is_a_posix_setting_with_three_values() {
    let posix = |sync: &str| {
        Config::parse(&format!(
            "origin = \"example.com/x\"\nstorage.dir = \"x\"\nstorage.sync = \"{sync}\"\n"
        ))
    };
    for (value, mode) in [
        ("auto", tlogd_storage_posix::SyncMode::Auto),
        ("syncfs", tlogd_storage_posix::SyncMode::Syncfs),
        ("fsync", tlogd_storage_posix::SyncMode::Fsync),
    ] {
        let c = posix(value).unwrap();
        c.validate().unwrap();
        assert_eq!(c.storage.sync, mode);
    }
    let e = format!("{:#}", posix("fdatasync").unwrap_err());
    assert!(e.contains("fdatasync") && e.contains("fsync"), "{e}");
    let mysql = Config::parse(
        "origin = \"example.com/x\"\nstorage.backend = \"mysql\"\n\
         storage.url = \"mysql://u:p@db:3306/t\"\ndedup.path = \"d\"\nstorage.sync = \"fsync\"\n",
    )
    .unwrap();
    let e = mysql.validate().unwrap_err().to_string();
    assert!(e.contains("`storage.sync` is for the posix backend"), "{e}");
}

#[test]
fn several_logs_are_checked_for_what_they_must_not_share() {
    let single = Config::parse("origin = \"example.com/x\"\nstorage.dir = \"x\"\n").unwrap();
    single.validate().unwrap();
    let logs = single.served_logs();
    assert_eq!(
        (logs.len(), logs[0].name.as_str(), logs[0].label()),
        (1, "", "default")
    );
    let ok = two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n");
    Config::parse(&ok).unwrap().validate().unwrap();
    for (toml, says) in [
        (
            two_logs("storage.dir = \"x\"\n", "storage.dir = \"x\"\n"),
            "same storage.dir x",
        ),
        (
            two_logs(
                "storage.dir = \"a\"\nhost = \"h.example\"\n",
                "storage.dir = \"b\"\nhost = \"H.example\"\n",
            ),
            "same host h.example",
        ),
        (
            two_logs(
                "storage.backend = \"mysql\"\nstorage.url = \"mysql://u:p@db:3306/t\"\ndedup.path = \"d1\"\n",
                "storage.backend = \"mysql\"\nstorage.url = \"mysql://v:q@db:3306/t\"\ndedup.path = \"d2\"\n",
            ),
            "same database mysql://db:3306/t",
        ),
        (
            two_logs(
                "storage.dir = \"a\"\ndedup.path = \"d\"\n",
                "storage.dir = \"b\"\ndedup.path = \"d\"\n",
            ),
            "same dedup.path d",
        ),
        (
            two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n")
                .replace("name = \"b\"", "name = \"a\""),
            "two [[logs]] are named \"a\"",
        ),
        (
            two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n")
                .replace("name = \"b\"", "name = \"B/x\""),
            "a log's name is its path prefix",
        ),
        (
            two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n")
                .replace("private_key_file = \"b.key\"\n", ""),
            "`private_key_file` (or `private_key_files`) is required",
        ),
        (
            two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n")
                .replace("origin = \"example.com/b\"", "origin = \"example.com/a\""),
            "same origin",
        ),
        (
            two_logs("", "storage.dir = \"b\"\n"),
            "[[logs]] \"a\": `storage.dir` is required",
        ),
        (
            two_logs(
                "storage.backend = \"s3\"\nstorage.bucket = \"k\"\ndedup.path = \"d1\"\n",
                "storage.backend = \"s3\"\nstorage.bucket = \"k\"\nstorage.prefix = \"b\"\ndedup.path = \"d2\"\n",
            ),
            "one inside the other",
        ),
    ] {
        let e = Config::parse(&toml)
            .unwrap()
            .validate()
            .expect_err(says)
            .to_string();
        assert!(e.contains(says), "{says}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    for key in [
        "origin = \"example.com/x\"",
        "read_only = true",
        "[storage]\ndir = \"x\"",
    ] {
        let toml = format!(
            "{key}\n{}",
            two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n")
        );
        let e = Config::parse(&toml).expect_err(key).to_string();
        assert!(e.contains("inside each [[logs]] entry"), "{key}: {e}");
    }
}

#[test]
fn unknown_keys_are_named() {
    let e = Config::parse("origin = \"a\"\n[batching]\nmax_entrys = 5\n").unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("max_entrys"), "{msg}");
}

#[test]
fn an_origin_that_cannot_be_signed_or_stored_is_refused_naming_why() {
    let with = |o: &str| {
        let mut c = Config::parse("[storage]\ndir = \"/x\"\n").unwrap();
        c.origin = Some(o.to_string());
        c.validate().map_err(|e| format!("{e:#}"))
    };
    with("example.com/log").unwrap();
    for (origin, says) in [
        ("", "`origin` is required"),
        ("a\nb", "control character '\\n'"),
        ("ex\tample.com/log", "control character '\\t' at byte 2"),
        ("log\u{7f}", "control character '\\u{7f}'"),
        ("example.com/log ", "whitespace"),
    ] {
        let e = with(origin).unwrap_err();
        assert!(e.starts_with("`origin`"), "{e}");
        assert!(e.contains(says), "{origin:?}: {e}");
        assert_eq!(e.lines().count(), 1, "one line: {e}");
    }
    let long = "o".repeat(tlogd_core::checkpoint::MAX_ORIGIN_LEN + 1);
    let e = with(&long).unwrap_err();
    assert!(e.contains("1025 bytes long; at most 1024"), "{e}");
    assert!(!e.contains(&long), "the origin is not echoed whole: {e}");
}

/// An open listener with nobody checked is refused, unless asked for; loopback and
/// tokens need nothing more. (The env token source is not touched here: tests run
/// in one process.)
#[test]
fn a_public_listener_without_write_tokens_is_refused_unless_allowed() {
    let base = "origin = \"o\"\n[storage]\ndir = \"/x\"\n";
    let parse = |extra: &str| Config::parse(&format!("{extra}{base}")).unwrap();
    parse("").validate().unwrap();
    parse("listen = \"127.0.0.1:7000\"\n").validate().unwrap();
    parse("listen = \"[::1]:7000\"\n").validate().unwrap();
    let mut open = parse("listen = \"0.0.0.0:7000\"\n");
    if std::env::var_os(TOKENS_ENV).is_none() {
        let e = format!("{:#}", open.validate().unwrap_err());
        assert!(
            e.contains("0.0.0.0:7000 (not loopback) with no write tokens")
                && e.contains("allow_anonymous_writes"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    open.auth.allow_anonymous_writes = true;
    open.validate().unwrap();
    open.auth.allow_anonymous_writes = false;
    open.auth.bearer_tokens_file = Some("/etc/tlogd/tokens".into());
    open.validate().unwrap();
}

#[test]
fn bad_values_are_named() {
    let e = Config::parse("listen = \"nope\"\n").unwrap_err();
    assert!(format!("{e:#}").contains("listen"), "{e:#}");
    let mut c = Config::parse("origin = \"o\"\n[storage]\ndir = \"/x\"\n[log]\nformat = \"xml\"\n")
        .unwrap();
    assert!(format!("{:#}", c.validate().unwrap_err()).contains("log.format"));
    c.log.format = "json".into();
    c.storage.backend = "s4".into();
    assert!(format!("{:#}", c.validate().unwrap_err()).contains("storage.backend"));
    c.storage.backend = "mysql".into();
    assert!(format!("{:#}", c.validate().unwrap_err()).contains("storage.url"));
    c.storage.url = Some("mysql://root@127.0.0.1/t".into());
    assert!(format!("{:#}", c.validate().unwrap_err()).contains("dedup.path"));
    c.dedup.enabled = false;
    c.validate().unwrap();
    c.storage.backend = "postgres".into();
    let msg = format!("{:#}", c.validate().unwrap_err());
    assert!(msg.contains("postgres://"), "{msg}");
    c.storage.url = Some("postgres://tlogd@127.0.0.1/t".into());
    c.validate().unwrap();
    c.storage.backend = "s3".into();
    assert!(format!("{:#}", c.validate().unwrap_err()).contains("storage.bucket"));
    c.storage.bucket = Some("logs".into());
    c.validate().unwrap();
    c.storage.endpoint = Some("http://127.0.0.1:9000".into());
    assert!(format!("{:#}", c.validate().unwrap_err()).contains("allow_http"));
    c.storage.allow_http = true;
    c.validate().unwrap();
    c.storage.endpoint = Some("127.0.0.1:9000".into());
    assert!(format!("{:#}", c.validate().unwrap_err()).contains("storage.endpoint"));
    c.storage.endpoint = None;
    c.storage.backend = "gcs".into();
    c.storage.region = Some("eu-west-1".into());
    assert!(format!("{:#}", c.validate().unwrap_err()).contains("storage.region"));
    c.storage.region = None;
    c.validate().unwrap();
    c.storage.write_concurrency = 0;
    assert!(format!("{:#}", c.validate().unwrap_err()).contains("write_concurrency"));
    c.storage.write_concurrency = 1;
    c.dedup.enabled = true;
    assert!(format!("{:#}", c.validate().unwrap_err()).contains("dedup.path"));
    c.dedup.enabled = false;
    c.validate().unwrap();
    c.http.idle_timeout_ms = 0;
    let msg = format!("{:#}", c.validate().unwrap_err());
    assert!(msg.contains("http.idle_timeout_ms"), "{msg}");
}

#[test]
fn http_section_parses() {
    let c = Config::parse(
        "origin = \"o\"\n[http]\nheader_read_timeout_ms = 500\nmax_connections = 7\n",
    )
    .unwrap();
    assert_eq!(c.http.header_read_timeout_ms, 500);
    assert_eq!(c.http.max_connections, 7);
    assert_eq!(
        c.http.idle_timeout_ms,
        HttpConfig::default().idle_timeout_ms
    );
    let e = Config::parse("origin = \"o\"\n[http]\nidle_timeout = 5\n").unwrap_err();
    assert!(format!("{e:#}").contains("idle_timeout"), "{e:#}");
}

#[test]
fn http_limits_have_defaults_and_parse() {
    let d = HttpConfig::default();
    assert_eq!(d.write_timeout_ms, 30_000);
    assert_eq!(d.max_connections_per_ip, 256);
    assert_eq!(d.max_response_bytes_in_flight, 256 << 20);
    assert_eq!(d.h2_max_concurrent_streams, 100);
    assert_eq!(d.h2_keep_alive_interval_ms, 20_000);
    assert_eq!(d.h2_keep_alive_timeout_ms, 20_000);
    let loopback = d.trusted_proxies().unwrap();
    assert!(
        loopback
            .iter()
            .any(|n| n.contains("127.0.0.1".parse().unwrap()))
    );
    assert!(
        loopback
            .iter()
            .any(|n| n.contains("127.9.8.7".parse().unwrap()))
    );
    assert!(loopback.iter().any(|n| n.contains("::1".parse().unwrap())));
    assert!(
        loopback
            .iter()
            .any(|n| n.contains("::ffff:127.0.0.1".parse().unwrap()))
    );
    assert!(
        !loopback
            .iter()
            .any(|n| n.contains("10.0.0.1".parse().unwrap()))
    );
    let c = Config::parse(
        "origin = \"o\"\n[storage]\ndir = \"/x\"\n[http]\nwrite_timeout_ms = 1500\n\
         max_connections_per_ip = 3\ntrusted_proxies = [\"10.1.0.0/16\", \"2001:db8::/32\"]\n\
         max_response_bytes_in_flight = 33554432\nh2_keep_alive_interval_ms = 7\n\
         h2_keep_alive_timeout_ms = 8\n",
    )
    .unwrap();
    c.validate().unwrap();
    assert_eq!(c.http.write_timeout_ms, 1500);
    assert_eq!(c.http.max_connections_per_ip, 3);
    assert_eq!(c.http.ipv6_prefix_len, 64, "IPv6 clients by /64 by default");
    assert_eq!(c.http.max_response_bytes_in_flight, 32 << 20);
    assert_eq!(
        (
            c.http.h2_keep_alive_interval_ms,
            c.http.h2_keep_alive_timeout_ms
        ),
        (7, 8)
    );
    let t = c.http.trusted_proxies().unwrap();
    assert!(t[0].contains("10.1.200.3".parse().unwrap()));
    assert!(!t[0].contains("10.2.0.1".parse().unwrap()));
    assert!(t[1].contains("2001:db8:ffff::1".parse().unwrap()));
    assert!(!t[1].contains("2001:db9::1".parse().unwrap()));
    // An empty list trusts nobody.
    let c = Config::parse("origin = \"o\"\n[http]\ntrusted_proxies = []\n").unwrap();
    assert!(c.http.trusted_proxies().unwrap().is_empty());
}

#[test]
fn bad_http_limits_are_named_in_one_line() {
    let base = "origin = \"o\"\n[storage]\ndir = \"/x\"\n[http]\n";
    for (extra, says) in [
        (
            "trusted_proxies = [\"10.0.0.0/33\"]",
            "`http.trusted_proxies`: \"10.0.0.0/33\"",
        ),
        ("trusted_proxies = [\"10.0.0.1/8\"]", "beyond the /8 prefix"),
        (
            "trusted_proxies = [\"::1\", \"proxy.local\"]",
            "\"proxy.local\" is not",
        ),
        ("trusted_proxies = [\"::/129\"]", "0 to 128"),
        (
            "ipv6_prefix_len = 129",
            "`http.ipv6_prefix_len` is 129: an IPv6 prefix is 0 to 128 bits",
        ),
        (
            "write_timeout_ms = 0",
            "`http.write_timeout_ms` must be at least 1",
        ),
        (
            "max_connections_per_ip = 0",
            "`http.max_connections_per_ip`",
        ),
        (
            "h2_keep_alive_timeout_ms = 0",
            "`http.h2_keep_alive_timeout_ms`",
        ),
        (
            "max_response_bytes_in_flight = 1048576",
            "one full entry bundle",
        ),
    ] {
        let c = Config::parse(&format!("{base}{extra}\n")).unwrap();
        let e = format!("{:#}", c.validate().unwrap_err());
        assert!(e.contains(says), "{extra}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    assert!(
        IpCidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("203.0.113.9".parse().unwrap())
    );
    assert!(
        !IpCidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("::2".parse().unwrap())
    );
    assert!(
        IpCidr::parse("::/0")
            .unwrap()
            .contains("::2".parse().unwrap())
    );
}

#[test]
fn forwarding_is_checked() {
    let s3 = "origin = \"o\"\n[dedup]\nenabled = false\n[storage]\nbackend = \"s3\"\nbucket = \"b\"\nregion = \"r\"\n";
    let c = Config::parse(&format!(
        "{s3}[forward]\nto = \"http://10.0.0.1:8080\"\ntoken_file = \"/t\"\n"
    ))
    .unwrap();
    c.validate().unwrap();
    assert_eq!(c.served_logs()[0].forward.timeout_ms, 10_000);
    for (forward, says) in [
        ("to = \"http://a:1\"", "needs `forward.token_file`"),
        (
            "to = \"a:1\"\ntoken_file = \"/t\"",
            "not an http:// or https:// URL",
        ),
        ("timeout_ms = 0", "`forward.timeout_ms`"),
    ] {
        let c = Config::parse(&format!("{s3}[forward]\n{forward}\n")).unwrap();
        let e = format!("{:#}", c.validate().unwrap_err());
        assert!(e.contains(says), "{forward}: {e}");
    }
    let c = Config::parse(
        "origin = \"o\"\n[storage]\ndir = \"/d\"\n[forward]\nto = \"http://a:1\"\ntoken_file = \"/t\"\n",
    )
    .unwrap();
    let e = format!("{:#}", c.validate().unwrap_err());
    assert!(e.contains("a POSIX log has one frontend"), "{e}");
    assert!(Config::parse("origin = \"o\"\n[forward]\nurl = \"x\"\n").is_err());
}

#[test]
fn rfc3339_times_parse_to_epoch_milliseconds() {
    for (s, ms) in [
        ("1970-01-01T00:00:00Z", 0),
        ("2025-12-31T00:00:00Z", 1_767_139_200_000),
        ("2024-02-29T12:34:56.789Z", 1_709_210_096_789),
        ("2026-01-01T00:00:00.5z", 1_767_225_600_500),
    ] {
        assert_eq!(parse_rfc3339_ms(s).unwrap(), ms, "{s}");
    }
    for bad in [
        "2025-02-29T00:00:00Z",
        "2025-13-01T00:00:00Z",
        "2025-01-01 00:00:00Z",
        "2025-01-01T00:00:00+01:00",
        "2025-01-01T24:00:00Z",
        "2025-01-01T00:00:00.Z",
        "1969-12-31T23:59:59Z",
        "",
    ] {
        assert!(parse_rfc3339_ms(bad).is_err(), "{bad}");
    }
}

#[test]
fn ct_settings_are_checked() {
    let base =
        "origin = \"ct.example.com/2026h1\"\nstorage.dir = \"d\"\n[ct]\nroots_file = \"r.pem\"\n";
    let c = Config::parse(base).unwrap();
    c.validate().unwrap();
    let ct = c.ct.as_ref().unwrap();
    assert_eq!(ct.shard_window().unwrap(), (None, None));
    for (extra, why) in [
        (
            "not_after_start = \"2026-07-01T00:00:00Z\"\nnot_after_limit = \"2026-01-01T00:00:00Z\"\n",
            "must be before",
        ),
        ("not_after_start = \"July\"\n", "not_after_start"),
        (
            "reject_expired = true\nreject_unexpired = true\n",
            "refuse everything",
        ),
        ("allowed_ekus = [\"serverAuth\"]\n", "not a dotted OID"),
        ("old_not_before_days = 30\n", "old_not_before_per_second"),
        ("issuer_per_second = -1.0\n", "issuer_per_second"),
        ("issuer_per_second = nan\n", "issuer_per_second"),
        ("issuer_burst = 5.0\n", "needs `ct.issuer_per_second`"),
        (
            "issuer_per_second = 2.0\nissuer_burst = 0.5\n",
            "at least 1",
        ),
    ] {
        let c = Config::parse(&format!("{base}{extra}")).unwrap();
        let e = format!("{:#}", c.validate().unwrap_err());
        assert!(e.contains(why), "{extra}: {e}");
    }
    let c = Config::parse(&base.replace("ct.example.com", "https://ct.example.com")).unwrap();
    let e = format!("{:#}", c.validate().unwrap_err());
    assert!(e.contains("without the scheme"), "{e}");
    let c = Config::parse("origin = \"o\"\nstorage.dir = \"d\"\n[ct]\n").unwrap();
    let e = format!("{:#}", c.validate().unwrap_err());
    assert!(e.contains("needs its roots"), "{e}");
    for (extra, why) in [
        ("roots_url = \"ftp://x/\"\n", "roots_url"),
        ("roots_refresh_interval_s = 0\n", "roots_refresh_interval_s"),
        ("roots_reject_fingerprints = [\"abcd\"]\n", "not a SHA-256"),
    ] {
        let c = Config::parse(&format!("{base}{extra}")).unwrap();
        let e = format!("{:#}", c.validate().unwrap_err());
        assert!(e.contains(why), "{extra}: {e}");
    }
    // One URL or a list; fingerprints with colons and in capitals.
    let fp = "AB:".repeat(31) + "AB";
    let c = Config::parse(&format!(
        "origin = \"o\"\nstorage.dir = \"d\"\n[ct]\nroots_url = \"https://ccadb.example/r.csv\"\nroots_reject_fingerprints = [\"{fp}\"]\n"
    ))
    .unwrap();
    c.validate().unwrap();
    let ct = c.ct.as_ref().unwrap();
    assert_eq!(ct.roots_url, ["https://ccadb.example/r.csv"]);
    assert_eq!(ct.roots_refresh_interval_s, 3600);
    assert_eq!(
        crate::config::parse_fingerprint(&ct.roots_reject_fingerprints[0]).unwrap(),
        [0xab; 32]
    );
    let c = Config::parse(&format!(
        "{base}roots_url = [\"http://a/\", \"http://b/\"]\n"
    ))
    .unwrap();
    assert_eq!(c.ct.as_ref().unwrap().roots_url.len(), 2);
}

#[test]
fn ct_log_list_and_freeze_settings_are_checked() {
    let base =
        "origin = \"ct.example.com/2026h1\"\nstorage.dir = \"d\"\n[ct]\nroots_file = \"r.pem\"\n";
    let ct = |extra: &str| {
        let c = Config::parse(&format!("{base}{extra}")).unwrap();
        c.validate().map(|()| c.ct.clone().unwrap())
    };
    let d = ct("").unwrap();
    assert!(d.freeze_after_window);
    assert_eq!(d.freeze_at_ms().unwrap(), None, "no limit, no freeze");
    let limit = "not_after_limit = \"2026-07-01T00:00:00Z\"\n";
    let at = parse_rfc3339_ms("2026-07-08T00:00:00Z").unwrap();
    assert_eq!(ct(limit).unwrap().freeze_at_ms().unwrap(), Some(at));
    let c = ct(&format!("{limit}freeze_grace_s = 0\n")).unwrap();
    assert_eq!(
        c.freeze_at_ms().unwrap(),
        Some(at - 7 * 86_400_000),
        "no grace: at the limit"
    );
    let c = ct(&format!("{limit}freeze_after_window = false\n")).unwrap();
    assert_eq!(c.freeze_at_ms().unwrap(), None);
    let c = ct("submission_url = \"https://ct.example.com/2026h1\"\nmonitoring_url = \"https://mon.example.com/2026h1/\"\nintended_use = \"test\"\nmmd_seconds = 86400\n").unwrap();
    assert_eq!(c.intended_use.as_deref(), Some("test"));
    assert_eq!(
        log_list_url("k", c.submission_url.as_deref().unwrap()).unwrap(),
        "https://ct.example.com/2026h1/"
    );
    for (extra, why) in [
        (
            "submission_url = \"ct.example.com/x\"\n",
            "ct.submission_url",
        ),
        ("monitoring_url = \"https:///x\"\n", "ct.monitoring_url"),
        ("submission_url = \"https://a.example/?x=1\"\n", "no query"),
        ("mmd_seconds = 0\n", "ct.mmd_seconds"),
        ("intended_use = \"prod\"\n", "ct.intended_use"),
        ("description = \" \"\n", "ct.description"),
        ("friendly_name = \"a\\nb\"\n", "ct.friendly_name"),
    ] {
        let e = format!("{:#}", ct(extra).unwrap_err());
        assert!(e.contains(why), "{extra}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    assert!(Config::parse(&format!("{base}freeze_grace = 1\n")).is_err());
}

/// `[tls]` is files or ACME, never both nor half of either; ACME needs names and the
/// terms agreed to.
#[test]
fn tls_is_a_pair_of_files_or_acme_with_its_terms_agreed() {
    let base = "origin = \"o\"\n[storage]\ndir = \"/x\"\n";
    let check = |tls: &str| {
        Config::parse(&format!("{base}{tls}"))
            .map_err(|e| format!("{e:#}"))
            .and_then(|c| c.validate().map_err(|e| format!("{e:#}")))
    };
    check("[tls]\ncert_file = \"/c\"\nkey_file = \"/k\"\n").unwrap();
    let acme = "[tls.acme]\ndomains = [\"log.example.com\"]\ncache_dir = \"/a\"\n";
    check(&format!("{acme}accept_terms_of_service = true\n")).unwrap();
    for (tls, says) in [
        ("[tls]\ncert_file = \"/c\"\n", "go together"),
        ("[tls]\n", "are needed"),
        (acme, "accept_terms_of_service = true"),
        (
            "[tls.acme]\ndomains = []\ncache_dir = \"/a\"\naccept_terms_of_service = true\n",
            "needs `domains`",
        ),
        (
            "[tls.acme]\ndomains = [\"*.example.com\"]\ncache_dir = \"/a\"\naccept_terms_of_service = true\n",
            "no wildcard",
        ),
        (
            "[tls]\ncert_file = \"/c\"\nkey_file = \"/k\"\n[tls.acme]\ndomains = [\"a.b\"]\ncache_dir = \"/a\"\naccept_terms_of_service = true\n",
            "not both",
        ),
    ] {
        let e = check(tls).unwrap_err();
        assert!(e.contains(says), "{tls}: {e}");
    }
}
