//! `config/tlogd.service` (#61): a unit systemd takes without a word, sandboxed as
//! docs/operating.md says, starting the `serve` of this build.

use std::path::Path;
use std::process::Command;

/// The unit's `[Service]` settings, `key=value` as written (the last of a repeated key).
fn setting<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim())
        .next_back()
}

#[test]
fn the_systemd_unit_verifies_and_is_sandboxed() {
    // At run time: the binary may come from a build in another clone.
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let path = Path::new(&manifest).join("../../config/tlogd.service");
    let unit = std::fs::read_to_string(&path).expect("config/tlogd.service");
    for (key, value) in [
        ("User", "tlogd"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ReadWritePaths", "/var/lib/tlogd"),
        ("StateDirectory", "tlogd"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("KillSignal", "SIGTERM"),
    ] {
        assert_eq!(setting(&unit, key), Some(value), "{key}");
    }
    let exec = setting(&unit, "ExecStart").expect("ExecStart");
    let args: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(
        args,
        [
            "/usr/local/bin/tlogd",
            "serve",
            "--config",
            "/etc/tlogd/tlogd.toml"
        ]
    );
    // systemd checks that the program exists: point it at this build's.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tlogd.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/tlogd", env!("CARGO_BIN_EXE_tlogd")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .expect("systemd-analyze (Debian's systemd; scripts/deps.sh installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // An unknown or misspelt key is only a warning to systemd (exit 0): any word fails.
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {:?}\n{stderr}",
        out.status
    );
    // The program it starts takes those arguments.
    let help = Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("--config"));
}
