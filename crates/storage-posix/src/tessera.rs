//! Adopting a directory written by Trillian Tessera's POSIX storage (crate docs,
//! "Adopting a Tessera log"): its locks taken, its tree state and public edge read and
//! checked against each other and against its checkpoint.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use tlogd_core::engine::TreeState;
use tlogd_core::tile::{self, TileKind};

use crate::edge::edge_ids;
use crate::error::{OpenError, io_err};
use crate::slot::Committed;

/// Tessera's integrated tree state, relative to the log root.
pub(crate) const TESSERA_TREE_STATE: &str = ".state/treeState";
/// Tessera's state format version file, and the only version this release reads.
const TESSERA_VERSION: &str = ".state/version";
const TESSERA_VERSION_SUPPORTED: &str = "1";
/// The locks Tessera's POSIX storage takes (`flock`) to integrate, publish and GC.
const TESSERA_LOCKS: [&str; 3] = [
    ".state/treeState.lock",
    ".state/publish.lock",
    ".state/gcState.lock",
];

/// Take Tessera's locks if this is (or was) a Tessera directory, so no Tessera process
/// can integrate into it while tlogd has it open.
pub(crate) fn lock_tessera(root: &Path) -> Result<Vec<File>, OpenError> {
    if !root.join(".state").is_dir() {
        return Ok(Vec::new());
    }
    let mut held = Vec::new();
    for name in TESSERA_LOCKS {
        let path = root.join(name);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        // SAFETY: valid fd.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == -1 {
            let e = io::Error::last_os_error();
            return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                OpenError::TesseraLocked(root.to_path_buf(), path)
            } else {
                OpenError::Io(path, e)
            });
        }
        held.push(f);
    }
    Ok(held)
}

/// Tessera's `.state/treeState`: `{"size":N,"root":"<base64 of 32 bytes>"}`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TesseraTreeState {
    size: u64,
    root: String,
}

/// Read a Tessera log's state and public edge, and check they agree (crate docs,
/// "Adopting a Tessera log").
pub(crate) fn adopt_tessera(root: &Path, origin: &str) -> Result<Committed, OpenError> {
    use base64::Engine as _;
    let refuse = |m: String| OpenError::Tessera(root.to_path_buf(), m);
    match fs::read_to_string(root.join(TESSERA_VERSION)) {
        Ok(v) if v.trim() == TESSERA_VERSION_SUPPORTED => {}
        Ok(v) => {
            return Err(refuse(format!(
                "{TESSERA_VERSION} is {:?}; only version {TESSERA_VERSION_SUPPORTED} is supported",
                v.trim()
            )));
        }
        // Tessera wrote no version file before it introduced version 1.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(OpenError::Io(root.join(TESSERA_VERSION), e)),
    }
    let state_path = root.join(TESSERA_TREE_STATE);
    let text = fs::read(&state_path).map_err(io_err(&state_path))?;
    let ts: TesseraTreeState = serde_json::from_slice(&text).map_err(|e| {
        refuse(format!(
            "{TESSERA_TREE_STATE} is not a Tessera tree state: {e}"
        ))
    })?;
    let state_root: tlogd_core::hash::Hash = base64::engine::general_purpose::STANDARD
        .decode(ts.root.as_bytes())
        .ok()
        .and_then(|r| r.try_into().ok())
        .ok_or_else(|| {
            refuse(format!(
                "{TESSERA_TREE_STATE}: root is not base64 of 32 bytes"
            ))
        })?;
    let state = TreeState::new(ts.size, state_root);
    // The edge at that size, from the public files.
    let mut edge = Vec::new();
    for id in edge_ids(state.size, TileKind::Entries) {
        let path = root.join(id.path());
        let bytes = fs::read(&path).map_err(|e| {
            refuse(format!(
                "{TESSERA_TREE_STATE} says size {} but {} cannot be read: {e}",
                state.size,
                id.path()
            ))
        })?;
        edge.push((id, bytes));
    }
    let mut levels: Vec<Vec<tlogd_core::hash::Hash>> = Vec::new();
    for (id, bytes) in &edge {
        if let TileKind::Hash { level } = id.kind {
            let hashes = tile::parse_hash_tile(bytes, id.width)
                .map_err(|e| refuse(format!("{}: {e}", id.path())))?;
            let l = level as usize;
            if levels.len() <= l {
                levels.resize(l + 1, Vec::new());
            }
            levels[l] = hashes;
        }
    }
    let tree = tlogd_core::merkle::TileTree::from_edge(state.size, levels.clone())
        .map_err(|e| refuse(format!("edge tiles at size {}: {e}", state.size)))?;
    if tree.root() != state.root {
        return Err(refuse(format!(
            "{TESSERA_TREE_STATE} and the public tiles disagree: the edge tiles at size {} hash to root {}, the tree state says {}",
            state.size,
            base64::engine::general_purpose::STANDARD.encode(tree.root()),
            ts.root
        )));
    }
    if let Some((id, bytes)) = edge.iter().find(|(id, _)| id.kind == TileKind::Entries) {
        let entries = tlogd_core::bundle::parse_bundle(bytes)
            .map_err(|e| refuse(format!("{}: {e}", id.path())))?;
        let level0 = levels.first().map(Vec::as_slice).unwrap_or_default();
        let agree = entries.len() == level0.len()
            && entries
                .iter()
                .zip(level0)
                .all(|(e, h)| tlogd_core::hash::leaf_hash(e) == *h);
        if !agree {
            return Err(refuse(format!(
                "{} does not match the level-0 tile at size {}",
                id.path(),
                state.size
            )));
        }
    }
    check_tessera_checkpoint(root, origin, &state).map_err(refuse)?;
    Ok(Committed {
        tree: Some(state),
        edge: Arc::new(edge),
        seq: 0,
    })
}

/// The public checkpoint of a Tessera log being adopted must be of this log and name a
/// prefix of the adopted tree: its root is recomputed from the tiles at its size. Its
/// signature is the engine's to check (it knows the key).
fn check_tessera_checkpoint(root: &Path, origin: &str, state: &TreeState) -> Result<(), String> {
    use tlogd_core::checkpoint::Checkpoint;
    let bytes = match fs::read(root.join("checkpoint")) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("checkpoint: {e}")),
    };
    let cp = tlogd_core::note::Note::parse(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|n| Checkpoint::parse(&n.text).map_err(|e| e.to_string()))
        .map_err(|e| format!("checkpoint: {e}"))?;
    if cp.origin != origin {
        return Err(format!(
            "its checkpoint is for the log {:?}, not {origin:?}",
            cp.origin
        ));
    }
    if cp.size > state.size {
        return Err(format!(
            "the checkpoint names size {} but {TESSERA_TREE_STATE} only {}",
            cp.size, state.size
        ));
    }
    let mut tiles = std::collections::HashMap::new();
    for id in tlogd_core::proof::tree_root_tiles(cp.size) {
        // A partial may be gone once its full tile exists (tlog-tiles "Partial Tiles").
        let (got, bytes) = match fs::read(root.join(id.path())) {
            Ok(b) => (id, b),
            Err(_) => match fs::read(root.join(id.full().path())) {
                Ok(b) => (id.full(), b),
                Err(e) => return Err(format!("{} cannot be read: {e}", id.path())),
            },
        };
        let mut hashes =
            tile::parse_hash_tile(&bytes, got.width).map_err(|e| format!("{}: {e}", got.path()))?;
        hashes.truncate(id.width as usize);
        tiles.insert(id, hashes);
    }
    let cp_root = tlogd_core::proof::tree_root(cp.size, &tiles)
        .map_err(|e| format!("checkpoint of size {}: {e}", cp.size))?;
    if cp_root != cp.root {
        return Err(format!(
            "the checkpoint and the public tiles disagree: the tiles at size {} hash to another root than the checkpoint's",
            cp.size
        ));
    }
    Ok(())
}
