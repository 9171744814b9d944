//! Writing on a node without ever leaving a half-written file: a temporary
//! file in the same directory, fsync, rename over the target, fsync of the
//! directory. The first time a file is changed its previous bytes are kept
//! beside it (`NAME.wi-credential-provider.bak`: the `.bak` suffix keeps it
//! out of a kubelet config directory, which reads only `*.json|yaml|yml`),
//! and the manifest records what was written so `node uninstall` can undo
//! exactly that.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::host::Host;
use crate::error::{Error, Result};

pub const BACKUP_SUFFIX: &str = ".wi-credential-provider.bak";
pub const MANIFEST: &str = "/var/lib/wi-credential-provider/node-install.json";

pub fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn backup_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(BACKUP_SUFFIX);
    PathBuf::from(s)
}

pub fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    let fix = if e.kind() == std::io::ErrorKind::PermissionDenied
        || e.raw_os_error() == Some(libc::EROFS)
    {
        "run as root on the node, or from a privileged pod with the host root mounted read-write (--root /host)"
    } else {
        "check the path and the free space"
    };
    Error::config(format!("cannot {what} {}: {e}", path.display())).fix(fix)
}

/// Writes `bytes` to `local` atomically with `mode`.
pub fn atomic_write(local: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = local
        .parent()
        .ok_or_else(|| Error::config(format!("{} has no directory", local.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| io_error("create", dir, e))?;
    let name = local
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.wicp-tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(|e| io_error("write", &tmp, e))?;
        f.write_all(bytes).map_err(|e| io_error("write", &tmp, e))?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| io_error("set the mode of", &tmp, e))?;
        f.sync_all().map_err(|e| io_error("sync", &tmp, e))?;
        drop(f);
        std::fs::rename(&tmp, local).map_err(|e| io_error("replace", local, e))?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The mode a replaced file keeps (0644 for a new one).
pub fn mode_of(local: &Path) -> u32 {
    std::fs::metadata(local)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644)
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A CredentialProviderConfig file; `entries` are ours.
    Config,
    /// An environment file whose variable got our flags appended.
    Environment,
    /// A file that is ours alone (a NodeConfig drop-in).
    Own,
}

/// One file changed by install.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    /// The host path.
    pub path: PathBuf,
    pub kind: Kind,
    /// The backup of the bytes before the first install (a host path);
    /// `None` when the file did not exist.
    pub backup: Option<PathBuf>,
    /// sha256 of what install last wrote.
    pub written: String,
    /// Our provider names (config files).
    #[serde(default)]
    pub entries: Vec<String>,
    /// The text appended (environment files).
    #[serde(default)]
    pub appended: String,
}

/// What `node install` put on the node.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Manifest {
    pub files: Vec<Record>,
    /// Our binary and symlinks (host paths).
    pub binaries: Vec<PathBuf>,
}

impl Manifest {
    pub fn read(host: &Host) -> Result<Option<Manifest>> {
        let local = host.path(Path::new(MANIFEST));
        match std::fs::read(&local) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                Error::config(format!(
                    "{} is not a manifest written by node install: {e}",
                    local.display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error("read", &local, e)),
        }
    }

    pub fn write(&self, host: &Host) -> Result<()> {
        let local = host.path(Path::new(MANIFEST));
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::config(format!("cannot encode the manifest: {e}")))?;
        atomic_write(&local, &bytes, 0o600)
    }

    pub fn remove(host: &Host) -> Result<()> {
        let local = host.path(Path::new(MANIFEST));
        match std::fs::remove_file(&local) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("remove", &local, e)),
        }
    }

    pub fn record(&self, path: &Path) -> Option<&Record> {
        self.files.iter().find(|r| r.path == path)
    }
}

/// Replaces host file `path` with `bytes`, keeping a backup of what was
/// there before the first install, and returns its record.
pub fn replace(
    host: &Host,
    manifest: &Manifest,
    path: &Path,
    kind: Kind,
    bytes: &[u8],
) -> Result<Record> {
    let local = host.path(path);
    let previous = manifest.record(path).cloned();
    let backup = match previous {
        Some(r) => r.backup,
        None => match std::fs::read(&local) {
            Ok(old) => {
                let b = backup_path(path);
                atomic_write(&host.path(&b), &old, mode_of(&local))?;
                Some(b)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error("read", &local, e)),
        },
    };
    atomic_write(&local, bytes, mode_of(&local))?;
    Ok(Record {
        path: path.to_path_buf(),
        kind,
        backup,
        written: sha256(bytes),
        entries: Vec::new(),
        appended: String::new(),
    })
}

/// Puts the backup back (byte-identical) or removes a file that did not
/// exist before.
pub fn restore(host: &Host, record: &Record) -> Result<()> {
    let local = host.path(&record.path);
    match &record.backup {
        Some(b) => {
            let lb = host.path(b);
            std::fs::rename(&lb, &local).map_err(|e| io_error("restore", &local, e))
        }
        None => match std::fs::remove_file(&local) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("remove", &local, e)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_and_restore_are_byte_identical() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        let p = Path::new("/etc/x.json");
        atomic_write(&host.path(p), b"{ \"a\": 1 }", 0o600).unwrap();
        let r = replace(&host, &Manifest::default(), p, Kind::Config, b"new").unwrap();
        assert_eq!(std::fs::read(host.path(p)).unwrap(), b"new");
        assert_eq!(mode_of(&host.path(p)), 0o600);
        restore(&host, &r).unwrap();
        assert_eq!(std::fs::read(host.path(p)).unwrap(), b"{ \"a\": 1 }");
        assert!(!host.path(&backup_path(p)).exists());
        let leftovers: Vec<_> = std::fs::read_dir(host.path(Path::new("/etc")))
            .unwrap()
            .collect();
        assert_eq!(leftovers.len(), 1);
    }
}
