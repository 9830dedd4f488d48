//! What an open does to the disk before the log serves: directories created durably,
//! the commit protocol finished after a crash ([`recover`]; crate docs, "Recovery";
//! invariant 4), and the slots of an earlier release rewritten in this one's format.

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use tlogd_core::tile::TileId;

use crate::edge::tile_end;
use crate::error::{OpenError, io_err};
use crate::slot::{Committed, SLOTS, encode_slot, write_in_place};
use crate::store::STAGED_DIR;
use crate::sync::{SyncMethod, sync_paths};

/// The commit protocol, finished at open after a crash, before anything is served or
/// committed: the steps are the crate docs' "Recovery"; invariant 3 makes the carried
/// tiles (`carried`, the newest slot's, of a tree of `size`) the ones to write, and
/// invariant 4 tells a staged tile to rename from one to delete.
pub(crate) fn recover(
    root: &Path,
    root_dir: &File,
    sync: SyncMethod,
    private: &Path,
    size: u64,
    carried: &[(TileId, Vec<u8>)],
) -> Result<(), OpenError> {
    let staged = private.join(STAGED_DIR);
    let carried_ids: HashSet<TileId> = carried.iter().map(|(id, _)| *id).collect();
    let mut changed = 0u64;
    // Directories a tile was renamed into: synced at the end (`fsync` mode).
    let mut renamed_into = BTreeSet::new();
    let mut stack = vec![staged.clone()];
    while let Some(dir) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(OpenError::Io(dir, e)),
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(&staged).unwrap_or(&path);
            let id = rel
                .to_str()
                .and_then(|r| TileId::parse(r).ok())
                .filter(|id| id.is_full());
            let synced_and_committed = id
                .filter(|id| tile_end(id) <= size && !carried_ids.contains(id))
                .is_some();
            if synced_and_committed {
                let public = root.join(rel);
                if let Some(parent) = public.parent() {
                    create_dirs_durably(parent)?;
                    renamed_into.insert(parent.to_path_buf());
                }
                fs::rename(&path, &public).map_err(io_err(&public))?;
                changed += 1;
            } else {
                fs::remove_file(&path).map_err(io_err(&path))?;
            }
        }
    }
    // Written to temp files and synced before any is renamed: a crash in the middle
    // must not leave a torn file at a public path either.
    let mut renames = Vec::new();
    for (i, (id, bytes)) in carried.iter().enumerate() {
        let public = root.join(id.path());
        match fs::read(&public) {
            Ok(b) if b == *bytes => continue,
            Ok(_) => tracing::warn!(
                path = %public.display(),
                "a public tile differs from the committed one the state carries; replacing it"
            ),
            Err(_) => {}
        }
        if let Some(parent) = public.parent() {
            create_dirs_durably(parent)?;
            renamed_into.insert(parent.to_path_buf());
        }
        let tmp = private.join("tmp").join(format!("recovered-{i}"));
        fs::write(&tmp, bytes).map_err(io_err(&tmp))?;
        renames.push((tmp, public));
    }
    let temps: Vec<PathBuf> = renames.iter().map(|(t, _)| t.clone()).collect();
    if !renames.is_empty() {
        sync_paths(sync, root_dir, &temps).map_err(io_err(root))?;
    }
    for (tmp, public) in &renames {
        fs::rename(tmp, public).map_err(io_err(public))?;
    }
    changed += renames.len() as u64;
    if changed > 0 || !carried.is_empty() {
        // With their ancestors: a directory a killed process created may exist without
        // being durable (`fsync` mode syncs each new directory's parent only once it
        // has renamed into it).
        let mut dirs = BTreeSet::new();
        for d in renamed_into {
            dirs.extend(
                d.ancestors()
                    .take_while(|a| a.starts_with(root))
                    .map(Path::to_path_buf),
            );
        }
        let dirs: Vec<PathBuf> = dirs.into_iter().collect();
        sync_paths(sync, root_dir, &dirs).map_err(io_err(root))?;
    }
    if changed > 0 {
        tracing::warn!(
            tiles = changed,
            "published the committed tiles a crash left unpublished"
        );
    }
    Ok(())
}

/// `fs::create_dir_all(dir)`, and then the entry of every directory it created made
/// durable by an fsync of its parent: a new log directory (and its `.tlogd`) whose
/// name a power cut loses takes the whole log with it. Found by `benches/power-cuts.sh`
/// on faultfs, which keeps a new name only once its directory is fsynced, as POSIX
/// promises (ext4 in its default mode happens to commit it within seconds).
pub(crate) fn create_dirs_durably(dir: &Path) -> Result<(), OpenError> {
    let mut created = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at {
        if d.as_os_str().is_empty() || d.exists() {
            break;
        }
        created.push(d.to_path_buf());
        at = d.parent();
    }
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    for d in &created {
        let parent = match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(parent)
            .and_then(|f| f.sync_all())
            .map_err(io_err(parent))?;
    }
    Ok(())
}

/// Rewrite both slots of a log last committed by an earlier release in this release's
/// format, holding the committed state: a downgraded binary then refuses the log
/// (it reads neither slot) instead of falling back to an older commit in the slot the
/// first new commit did not overwrite.
pub(crate) fn upgrade_slots(
    private: &Path,
    origin: &str,
    committed: &mut Committed,
) -> Result<(), OpenError> {
    let Some(tree) = committed.tree else {
        return Ok(());
    };
    for _ in SLOTS {
        let seq = committed.seq + 1;
        let slot = private.join(SLOTS[(seq % 2) as usize]);
        write_in_place(
            &slot,
            &encode_slot(origin, seq, &tree, &committed.edge, &[]).pieces(),
        )
        .and_then(|f| f.sync_data())
        .map_err(io_err(&slot))?;
        committed.seq = seq;
    }
    tracing::info!("state slots rewritten in this release's format");
    Ok(())
}
