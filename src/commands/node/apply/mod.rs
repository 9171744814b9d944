//! Applying a validated plan, crash-safe (see [`self::files`]): the
//! manifest names every change before the first one, backups are taken
//! from the bytes that were validated, and each file is replaced
//! atomically. A rollback puts back exactly what this run found.

pub(crate) mod files;
pub(crate) mod restart;

use std::path::{Path, PathBuf};
use std::time::Duration;

use self::files::{Kind, Manifest, Record, Snapshot};
use crate::options::BINARY;
use wicp_base::error::{Error, Result};
use wicp_base::platform::Host;

/// One file a run writes.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub(crate) path: PathBuf,
    pub(crate) kind: Kind,
    pub(crate) bytes: Vec<u8>,
    pub(crate) mode: u32,
    /// What the file held when it was read for validation.
    pub(crate) before: Snapshot,
    /// Our provider names (configs).
    pub(crate) entries: Vec<String>,
    /// The text inserted (environment files).
    pub(crate) inserted: String,
    /// What the change does, for the report.
    pub(crate) said: Vec<String>,
}

/// What a run did, for its rollback.
pub(crate) struct Applied {
    pub(crate) before: Manifest,
    pub(crate) after: Manifest,
    pub(crate) changes: Vec<Change>,
    pub(crate) links_added: Vec<PathBuf>,
}

/// Runs `binary --version` on a private copy of `bytes`: a binary for
/// another architecture, or a corrupt copy, is not installed, and the
/// bytes checked are the bytes installed.
pub(crate) fn answers_version(bytes: &[u8], shown: &Path) -> Result<()> {
    let dir = crate::commands::node::plan::stage::private_temp_dir("wicp-binary")?;
    let copy = dir.join(wicp_base::platform::executable_name(BINARY));
    let result = (|| {
        wicp_base::platform::write_executable(&copy, bytes)
            .map_err(|e| Error::config(format!("cannot check the binary: {e}")))?;
        let out = crate::commands::node::exec::run(&copy, &["--version"], Duration::from_secs(10))
            .map_err(|e| {
                Error::config(format!(
                    "the binary {} cannot run here: {e}",
                    shown.display()
                ))
                .fix("use the binary built for this node's architecture")
            })?;
        if !out.status.success() || !String::from_utf8_lossy(&out.stdout).starts_with(BINARY) {
            return Err(Error::config(format!(
                "{} --version did not answer as {BINARY} does",
                shown.display()
            )));
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Refuses to put a provider-name link where another provider's
/// executable is.
pub(crate) fn check_links(host: &Host, manifest: &Manifest, links: &[PathBuf]) -> Result<()> {
    for link in links {
        match host.read_link(link) {
            Some(target) if target == Path::new(BINARY) => {}
            _ if host.kind_no_follow(link).is_some() && !manifest.binaries.contains(link) => {
                return Err(Error::config(format!(
                    "{} exists and is not a symlink to {BINARY}; not replacing another provider's executable",
                    link.display()
                ))
                .fix("rename our entry, or remove that file if it is a leftover"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes `changes` and `links` (names linked to our binary) with the
/// manifest written first, naming the directories this run creates (and
/// `lock_created`, those taking the caller's lock created) so that a
/// rollback and uninstall take them away again. Holds no lock itself: the
/// caller does.
pub(crate) fn apply(
    host: &Host,
    mut changes: Vec<Change>,
    links: &[PathBuf],
    lock_created: &[PathBuf],
) -> Result<Applied> {
    let before = Manifest::read(host)?.unwrap_or_default();
    let mut after = before.clone();
    files::sweep_temporaries(host, Path::new(files::MANIFEST));
    for change in &changes {
        files::sweep_temporaries(host, &change.path);
        let now = Snapshot::take(host, &change.path)?;
        if now.state != change.before.state {
            return Err(Error::config(format!(
                "{} changed while this install ran; nothing was written",
                change.path.display()
            ))
            .fix("run node install again"));
        }
        let sha = files::sha256(&change.bytes);
        match after.record_mut(&change.path) {
            Some(record) => {
                record.will_write(sha);
                if !change.entries.is_empty() {
                    record.entries = change.entries.clone();
                }
                record.appended.push_str(&change.inserted);
            }
            None => after.files.push(Record {
                path: change.path.clone(),
                kind: change.kind.clone(),
                original: Some(now.state.clone()),
                backup: now.bytes.as_ref().map(|_| files::backup_path(&change.path)),
                written: sha,
                also_written: Vec::new(),
                entries: change.entries.clone(),
                appended: change.inserted.clone(),
            }),
        }
    }
    let links_added: Vec<PathBuf> = links
        .iter()
        .filter(|l| !after.binaries.contains(l))
        .cloned()
        .collect();
    after.binaries.extend(links_added.iter().cloned());
    record_created_dirs(host, &mut after, &changes, links, lock_created);
    // The intent: from here on, uninstall knows every change.
    after.write(host)?;
    for change in &mut changes {
        if let Some(record) = after.record(&change.path) {
            files::ensure_backup(host, record, &change.before)?;
        }
        host.write(&change.path, &change.bytes, change.mode)
            .map_err(|e| files::io_error("write", &change.path, e))?;
    }
    for link in links {
        if host.read_link(link).as_deref() != Some(Path::new(BINARY)) {
            host.symlink(
                link,
                Path::new(BINARY),
                wicp_base::platform::Existing::Replace,
            )
            .map_err(|e| files::io_error("link", link, e))?;
        }
    }
    Ok(Applied {
        before,
        after,
        changes,
        links_added,
    })
}

/// Adds to `manifest` the directories this run is about to create (for
/// `changes` and `links`), and those taking the lock created.
fn record_created_dirs(
    host: &Host,
    manifest: &mut Manifest,
    changes: &[Change],
    links: &[PathBuf],
    lock_created: &[PathBuf],
) {
    let paths = changes
        .iter()
        .map(|c| c.path.as_path())
        .chain(links.iter().map(PathBuf::as_path));
    for dir in lock_created
        .iter()
        .cloned()
        .chain(paths.flat_map(|p| wicp_base::platform::missing_dirs(host, p)))
    {
        if !manifest.directories.contains(&dir) {
            manifest.directories.push(dir);
        }
    }
}

/// Puts back every file this run changed, byte for byte, removes what it
/// created, and restores the manifest. Returns what it did.
pub(crate) fn roll_back(host: &Host, run: &Applied) -> String {
    let mut done = Vec::new();
    for change in run.changes.iter().rev() {
        let now = Snapshot::take(host, &change.path).ok();
        if now.as_ref().map(|n| &n.state) == Some(&change.before.state) {
            continue;
        }
        match change.before.restore(host, &change.path) {
            Ok(()) => done.push(format!("restored {}", change.path.display())),
            Err(e) => done.push(format!("FAILED to restore {}: {e}", change.path.display())),
        }
    }
    // Backups made by this run (a first install) are no longer needed.
    for record in &run.after.files {
        if run.before.record(&record.path).is_none()
            && let Some(b) = &record.backup
        {
            let _ = host.remove(b);
        }
    }
    for link in &run.links_added {
        if host.read_link(link).as_deref() == Some(Path::new(BINARY)) {
            let _ = host.remove(link);
        }
    }
    // The directories this run created, innermost first, when empty (our
    // state directory still holds the lock: the lock takes it when it goes).
    for dir in run.after.directories.iter().rev() {
        if !run.before.directories.contains(dir) && host.remove_dir(dir).unwrap_or(false) {
            done.push(format!("removed {}", dir.display()));
        }
    }
    let _ = if run.before.is_empty() {
        Manifest::remove(host)
    } else {
        run.before.write(host)
    };
    if done.is_empty() {
        "nothing had changed".into()
    } else {
        done.join(", ")
    }
}
