//! The cache directory and its files.
//!
//! The entries hold registry passwords, so the directory is handled the way
//! sudo-rs handles its root-owned timestamp records:
//!
//! - the directory is created with mode 0700 and must be a real directory
//!   (not a symlink), owned by the user running the plugin, and writable by
//!   nobody else; otherwise it is refused, because whoever can write it can
//!   plant credentials or swap files under us;
//! - files are created 0600 and opened with `O_NOFOLLOW`; after opening,
//!   the open file itself is checked (regular file, our owner, no group or
//!   other bits), so a swapped path cannot fool the check;
//! - an entry is written to a temporary file in the same directory, synced,
//!   and renamed over the old one: a reader sees the old entry or the new
//!   one, never half of one, and a crash leaves at worst a stray temporary
//!   file (which housekeeping removes) or loses the newest entry (a miss);
//! - anything unexpected in an entry (corrupt, truncated, foreign, another
//!   format) is a miss that gets rewritten, never trusted and never an
//!   error.
//!
//! File names: `<key>.json` (entry), `<key>.lock` (its lock) and
//! `.<key>.<pid>.<nanos>.tmp` (a write in progress). Other names are never
//! touched.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use serde::{Deserialize, Serialize};

use super::CACHE_DIR;
use super::key::{FORMAT_VERSION, Key};
use wicp_base::error::Error;
use wicp_base::lock::{self, Acquired};
use wicp_base::platform::{self, Facts, Open, Owner};
use wicp_base::secret::Secret;
use wicp_kubelet::request::token::ServiceAccount;

/// Entries are a few hundred bytes (an ECR password is about 2 KiB); a
/// bigger file is not ours.
const MAX_ENTRY_BYTES: u64 = 64 * 1024;

/// At most this many directory entries are looked at per scan, which
/// bounds the work a crowded directory can cause.
const MAX_SCAN: usize = 20_000;

/// One cached credential and what it is for.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: Key,
    pub provider: String,
    pub service_account: Option<ServiceAccount>,
    /// Under `--identity spiffe`: the SPIFFE ID the credential was
    /// exchanged for, shared by the service accounts it selects (so the
    /// entry names no one service account).
    pub spiffe_id: Option<String>,
    /// The registry host the credential is for (the response's auth key).
    pub registry: String,
    pub username: String,
    pub password: Secret,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds.
    pub expires_at: i64,
}

/// What reading an entry found.
// Returned by each read and matched at once, never kept in a collection:
// boxing the entry would add an allocation to every cache hit for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Lookup {
    Missing,
    Found(Entry),
    /// There is something under the entry's name that must not be used;
    /// the text says why, for a warning.
    Unusable(String),
}

/// Why the directory cannot be used.
#[derive(Debug)]
pub enum OpenError {
    /// The directory is unsafe (symlink, foreign owner, writable by others):
    /// an admin must fix it.
    Unsafe(Error),
    /// The file system said no (read-only, full, no permission): the pull
    /// goes on without the cache.
    Unavailable(String),
}

/// The names found in the directory, each with its modification time
/// (for an entry, when it was written).
#[derive(Debug, Default)]
pub struct Scan {
    pub entries: Vec<(Key, SystemTime)>,
    pub locks: Vec<(Key, SystemTime)>,
    pub temps: Vec<(PathBuf, SystemTime)>,
}

/// An opened, checked cache directory.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    owner: Owner,
}

impl Store {
    /// Opens `dir`, creating it (mode 0700, parents too) when `create` is
    /// set. Without `create`, a missing directory is `Ok(None)`.
    pub fn open(dir: &Path, create: bool) -> Result<Option<Store>, OpenError> {
        let owner = platform::running_owner().map_err(|e| {
            OpenError::Unavailable(format!("cannot tell which user runs the plugin: {e}"))
        })?;
        let meta = match platform::facts_at(dir) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                platform::create_private_dir_all(dir).map_err(|e| {
                    OpenError::Unavailable(format!(
                        "cannot create the cache directory {}: {e}",
                        dir.display()
                    ))
                })?;
                platform::facts_at(dir).map_err(|e| {
                    OpenError::Unavailable(format!("cannot inspect {}: {e}", dir.display()))
                })?
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(OpenError::Unavailable(format!(
                    "cannot inspect the cache directory {}: {e}",
                    dir.display()
                )));
            }
        };
        check_dir(dir, &meta, &owner).map_err(OpenError::Unsafe)?;
        Ok(Some(Store {
            dir: dir.to_path_buf(),
            owner,
        }))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn entry_path(&self, key: &Key) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    pub fn lock_path(&self, key: &Key) -> PathBuf {
        self.dir.join(format!("{key}.lock"))
    }

    /// Reads the entry for `key`.
    pub fn read(&self, key: &Key) -> Lookup {
        let path = self.entry_path(key);
        let file = match platform::open(&path, &Open::read().no_follow()) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Lookup::Missing,
            Err(e) if platform::is_refused_link(&e) => {
                return Lookup::Unusable("it is a symbolic link".into());
            }
            Err(e) => return Lookup::Unusable(format!("cannot open it: {e}")),
        };
        let len = match self.check_file(&file) {
            Ok(len) => len,
            Err(why) => return Lookup::Unusable(why),
        };
        let mut bytes =
            Vec::with_capacity(usize::try_from(len.min(MAX_ENTRY_BYTES) + 1).unwrap_or(0));
        if let Err(e) = file.take(MAX_ENTRY_BYTES + 1).read_to_end(&mut bytes) {
            return Lookup::Unusable(format!("cannot read it: {e}"));
        }
        let lookup = if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_ENTRY_BYTES {
            Lookup::Unusable(format!("it is larger than {MAX_ENTRY_BYTES} bytes"))
        } else {
            match parse(&bytes, key) {
                Ok(entry) => Lookup::Found(entry),
                Err(why) => Lookup::Unusable(why),
            }
        };
        bytes.fill(0);
        lookup
    }

    /// Writes `entry` atomically: temporary file, fsync, rename. An entry
    /// larger than a read accepts (`MAX_ENTRY_BYTES`) is not written
    /// (`ErrorKind::FileTooLarge`): it would be refused on every read, and
    /// each pull would exchange again and warn about it.
    pub fn write(&self, entry: &Entry) -> io::Result<()> {
        let mut bytes = serialize(entry)?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_ENTRY_BYTES {
            let size = bytes.len();
            bytes.fill(0);
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!(
                    "the entry would be {size} bytes, more than the {MAX_ENTRY_BYTES} a read accepts"
                ),
            ));
        }
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let temp = self
            .dir
            .join(format!(".{}.{}.{nanos}.tmp", entry.key, std::process::id()));
        let written = (|| {
            let mut file = platform::open(&temp, &Open::create_new(0o600))?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            drop(file);
            // The directory is not synced after the rename: that would only
            // make the new name durable, and losing it in a crash is a miss.
            platform::rename(&temp, &self.entry_path(&entry.key))
        })();
        bytes.fill(0);
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        written
    }

    /// Removes the entry for `key`; `Ok(false)` if there was none.
    pub fn remove(&self, key: &Key) -> io::Result<bool> {
        match std::fs::remove_file(self.entry_path(key)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Locks `key`, waiting until `until` at the latest.
    pub fn lock(&self, key: &Key, until: Instant) -> io::Result<Acquired> {
        lock::acquire(&self.lock_path(key), &self.owner, until)
    }

    /// Locks `key` only if it is free now.
    pub fn try_lock(&self, key: &Key) -> io::Result<Acquired> {
        lock::try_acquire(&self.lock_path(key), &self.owner)
    }

    /// Lists the cache's own files, at most [`MAX_SCAN`] names.
    pub fn scan(&self) -> io::Result<Scan> {
        let mut scan = Scan::default();
        for item in std::fs::read_dir(&self.dir)?.take(MAX_SCAN) {
            let item = item?;
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            let modified = || {
                item.metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH)
            };
            if let Some(key) = name.strip_suffix(".json").and_then(Key::parse) {
                scan.entries.push((key, modified()));
            } else if let Some(key) = name.strip_suffix(".lock").and_then(Key::parse) {
                scan.locks.push((key, modified()));
            } else if is_temp_name(name) {
                scan.temps.push((item.path(), modified()));
            }
        }
        scan.entries.sort();
        scan.locks.sort();
        Ok(scan)
    }

    /// The checks on an opened entry file; its length if it passes.
    fn check_file(&self, file: &File) -> Result<u64, String> {
        let facts = platform::facts(file).map_err(|e| format!("cannot inspect it: {e}"))?;
        if !facts.is_file() {
            return Err("it is not a regular file".into());
        }
        if !facts.owner.trusted_by(&self.owner) {
            return Err(format!(
                "it is owned by {}, not by {} which runs the plugin",
                facts.owner, self.owner
            ));
        }
        if facts.access.shared {
            return Err(format!(
                "its {} lets other users read or write it",
                facts.access.shown()
            ));
        }
        Ok(facts.len)
    }
}

/// `.<key>.<pid>.<nanos>.tmp`
fn is_temp_name(name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|rest| rest.strip_suffix(".tmp"))
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(key, _)| Key::parse(key).is_some())
}

/// Refuses a directory others could tamper with
/// ([`wicp_base::file::check_own_dir`]), naming `--cache-dir` as the
/// setting at fault.
fn check_dir(dir: &Path, meta: &Facts, owner: &Owner) -> Result<(), Error> {
    refuse_unsafe_dir(dir, meta, owner)
        .map_err(|e| e.with(wicp_base::error::Fact::Flag((&CACHE_DIR).into())))
}

fn refuse_unsafe_dir(dir: &Path, meta: &Facts, owner: &Owner) -> Result<(), Error> {
    use wicp_base::file::UnsafeDir;
    let shown = dir.display();
    match wicp_base::file::check_own_dir(meta, owner) {
        Ok(()) => Ok(()),
        Err(UnsafeDir::Link) => Err(Error::cache(format!(
            "the cache directory {shown} is a symbolic link, which the plugin refuses to follow"
        ))
        .fix("point --cache-dir at the directory itself: whoever can change the link could redirect the cache to a directory of their own")),
        Err(UnsafeDir::NotADirectory) => Err(Error::cache(format!(
            "the cache directory {shown} is not a directory"
        ))
        .fix("point --cache-dir at a directory, or at a path that does not exist yet (the plugin creates it with mode 0700)")),
        Err(UnsafeDir::Owner(theirs)) => Err(Error::cache(format!(
            "the cache directory {shown} is owned by {theirs}, but the plugin runs as {owner}"
        ))
        .fix(if platform::WINDOWS {
            "point --cache-dir at a directory owned by SYSTEM or Administrators, or at a path that does not exist yet (the plugin creates it private)".to_string()
        } else {
            format!(
                "chown {} {shown}, or point --cache-dir at a directory owned by the user the kubelet runs the plugin as",
                owner.0
            )
        })),
        Err(UnsafeDir::Writable(permissions)) => Err(Error::cache(format!(
            "the cache directory {shown} is writable by group or others ({permissions})"
        ))
        .fix(if platform::WINDOWS {
            format!("remove every write permission for other users from {shown} (icacls {shown} /inheritance:r /grant:r SYSTEM:(OI)(CI)F Administrators:(OI)(CI)F), or let the plugin create the directory")
        } else {
            format!("chmod 0700 {shown}")
        })),
    }
}

#[derive(Serialize, Deserialize)]
struct WireServiceAccount {
    namespace: String,
    name: String,
    uid: String,
}

#[derive(Deserialize)]
struct WireFormat {
    format: Option<serde_json::Value>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEntry {
    format: u32,
    key: String,
    provider: String,
    #[serde(rename = "serviceAccount")]
    service_account: Option<WireServiceAccount>,
    /// Absent but under `--identity spiffe`, so that other entries read as
    /// they always did.
    #[serde(rename = "spiffeId", default, skip_serializing_if = "Option::is_none")]
    spiffe_id: Option<String>,
    registry: String,
    #[serde(rename = "createdAt")]
    created_at: i64,
    #[serde(rename = "expiresAt")]
    expires_at: i64,
    username: String,
    password: String,
}

fn serialize(entry: &Entry) -> io::Result<Vec<u8>> {
    let wire = WireEntry {
        format: FORMAT_VERSION,
        key: entry.key.to_string(),
        provider: entry.provider.clone(),
        service_account: entry.service_account.as_ref().map(|sa| WireServiceAccount {
            namespace: sa.namespace.clone(),
            name: sa.name.clone(),
            uid: sa.uid.clone(),
        }),
        spiffe_id: entry.spiffe_id.clone(),
        registry: entry.registry.clone(),
        created_at: entry.created_at,
        expires_at: entry.expires_at,
        username: entry.username.clone(),
        password: entry.password.expose().to_string(),
    };
    let mut bytes = serde_json::to_vec(&wire).map_err(io::Error::other)?;
    let WireEntry { mut password, .. } = wire;
    // Best effort, as in Secret's Drop.
    password.clear();
    bytes.push(b'\n');
    Ok(bytes)
}

/// Parses an entry file, checking that it is the entry for `key`. Errors
/// describe the problem without quoting the file (it holds a password).
fn parse(bytes: &[u8], key: &Key) -> Result<Entry, String> {
    let format = serde_json::from_slice::<WireFormat>(bytes)
        .map_err(|e| format!("it is not a JSON entry ({})", category(&e)))?
        .format;
    match format {
        Some(serde_json::Value::Number(n)) if n.as_u64() == Some(u64::from(FORMAT_VERSION)) => {}
        Some(serde_json::Value::Number(n)) => {
            return Err(format!(
                "it has format {n}, this binary reads format {FORMAT_VERSION}"
            ));
        }
        _ => return Err("it has no format version".into()),
    }
    let wire: WireEntry = serde_json::from_slice(bytes)
        .map_err(|e| format!("it is not a valid entry ({})", category(&e)))?;
    if wire.key != key.as_str() {
        return Err("it names another key than its file name".into());
    }
    if wire.password.is_empty() || wire.username.is_empty() {
        return Err("it has an empty username or password".into());
    }
    if wire.expires_at <= wire.created_at {
        return Err("it expires before it was created".into());
    }
    Ok(Entry {
        key: key.clone(),
        provider: wire.provider,
        service_account: wire.service_account.map(|sa| ServiceAccount {
            namespace: sa.namespace,
            name: sa.name,
            uid: sa.uid,
        }),
        spiffe_id: wire.spiffe_id,
        registry: wire.registry,
        username: wire.username,
        password: Secret::new(wire.password),
        created_at: wire.created_at,
        expires_at: wire.expires_at,
    })
}

fn category(e: &serde_json::Error) -> &'static str {
    match e.classify() {
        serde_json::error::Category::Eof => "truncated",
        serde_json::error::Category::Data => "a field is missing or has the wrong type",
        _ => "malformed",
    }
}

/// Entries, keys and stores for the tests of the cache and of what reads
/// it (the `test-support` feature, which only dev-dependencies turn on).
#[cfg(any(test, feature = "test-support"))]
#[allow(clippy::unwrap_used)]
pub mod test_support {
    use super::*;

    pub fn entry(key: &Key) -> Entry {
        Entry {
            key: key.clone(),
            provider: "aws".into(),
            service_account: Some(ServiceAccount {
                namespace: "team-a".into(),
                name: "puller".into(),
                uid: "uid-1".into(),
            }),
            spiffe_id: None,
            registry: "123456789012.dkr.ecr.eu-west-1.amazonaws.com".into(),
            username: "AWS".into(),
            password: Secret::new("s3cr3t-password-value"),
            created_at: 1_000,
            expires_at: 4_600,
        }
    }

    pub fn key(c: char) -> Key {
        Key::parse(&c.to_string().repeat(64)).unwrap()
    }

    /// A store in a fresh directory, which lives as long as the first value.
    pub fn store() -> (tempfile::TempDir, Store) {
        let parent = tempfile::tempdir().unwrap();
        let store = Store::open(&parent.path().join("cache"), true)
            .unwrap()
            .unwrap();
        (parent, store)
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn keys(found: &[(Key, SystemTime)]) -> Vec<Key> {
        found.iter().map(|(k, _)| k.clone()).collect()
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    /// Reading `k` finds an entry it must not use, for a reason that says
    /// `why`; `what` names the case.
    fn assert_unusable(store: &Store, k: &Key, why: &str, what: &str) {
        let Lookup::Unusable(found) = store.read(k) else {
            panic!("{what}");
        };
        assert!(found.contains(why), "{what}: {found}");
    }
    #[test]
    fn creates_the_directory_0700_and_files_0600() {
        let (_parent, store) = store();
        assert_eq!(mode(store.dir()), 0o700);
        let k = key('a');
        store.write(&entry(&k)).unwrap();
        assert_eq!(mode(&store.entry_path(&k)), 0o600);
        let Acquired::Held(_lock) = store.try_lock(&k).unwrap() else {
            panic!("free");
        };
        assert_eq!(mode(&store.lock_path(&k)), 0o600);
    }

    #[test]
    fn round_trip_and_overwrite() {
        let (_parent, store) = store();
        let k = key('b');
        assert!(matches!(store.read(&k), Lookup::Missing));
        store.write(&entry(&k)).unwrap();
        let Lookup::Found(read) = store.read(&k) else {
            panic!("written entry must be found");
        };
        assert_eq!(read.password.expose(), "s3cr3t-password-value");
        assert_eq!(read.username, "AWS");
        assert_eq!(read.service_account.unwrap().uid, "uid-1");
        assert_eq!((read.created_at, read.expires_at), (1_000, 4_600));

        let mut newer = entry(&k);
        newer.password = Secret::new("second");
        store.write(&newer).unwrap();
        let Lookup::Found(read) = store.read(&k) else {
            panic!("overwritten entry must be found");
        };
        assert_eq!(read.password.expose(), "second");
        // No temporary file is left behind.
        let scan = store.scan().unwrap();
        assert_eq!(keys(&scan.entries), vec![k]);
        assert!(scan.temps.is_empty());
    }

    #[test]
    fn unusable_entries_are_explained_without_their_content() {
        let (_parent, store) = store();
        let k = key('c');
        let path = store.entry_path(&k);
        let good = String::from_utf8(serialize(&entry(&k)).unwrap()).unwrap();
        let cases: Vec<(String, &str)> = vec![
            (good[..good.len() / 2].to_string(), "truncated"),
            ("".into(), "truncated"),
            ("not json at all s3cr3t".into(), "malformed"),
            (good.replace("\"format\":1", "\"format\":2"), "format 2"),
            (good.replace("\"format\":1,", ""), "no format version"),
            (good.replace("\"username\":\"AWS\",", ""), "missing"),
            (
                good.replace("\"registry\"", "\"extra\":1,\"registry\""),
                "not a valid entry",
            ),
            (
                good.replace(&"c".repeat(64), &"d".repeat(64)),
                "another key",
            ),
            (good.replace("4600", "900"), "expires before"),
            (
                good.replace("s3cr3t-password-value", ""),
                "empty username or password",
            ),
        ];
        for (content, why) in cases {
            std::fs::write(&path, &content).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            match store.read(&k) {
                Lookup::Unusable(reason) => {
                    assert!(reason.contains(why), "{content:?}: {reason}");
                    assert!(!reason.contains("s3cr3t"), "{reason}");
                }
                other => panic!("{content:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn refuses_entries_that_are_not_private_regular_files() {
        let (_parent, store) = store();
        let k = key('e');
        store.write(&entry(&k)).unwrap();
        let path = store.entry_path(&k);

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_unusable(
            &store,
            &k,
            "mode 0644",
            "a world-readable entry must not be used",
        );

        std::fs::remove_file(&path).unwrap();
        let elsewhere = store.dir().join("planted");
        std::fs::write(&elsewhere, serialize(&entry(&k)).unwrap()).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_unusable(
            &store,
            &k,
            "symbolic link",
            "a symlinked entry must not be followed",
        );
        // Writing replaces the link itself, not its target.
        store.write(&entry(&k)).unwrap();
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());

        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert_unusable(
            &store,
            &k,
            "not a regular file",
            "a directory is not an entry",
        );
    }

    #[test]
    fn refuses_unsafe_directories() {
        let parent = tempfile::tempdir().unwrap();
        let real = parent.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();

        let link = parent.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let Err(OpenError::Unsafe(e)) = Store::open(&link, true) else {
            panic!("a symlinked directory must be refused");
        };
        assert!(e.to_string().contains("symbolic link"), "{e}");

        for mode in [0o770, 0o702, 0o777] {
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(mode)).unwrap();
            let Err(OpenError::Unsafe(e)) = Store::open(&real, true) else {
                panic!("mode {mode:o} must be refused");
            };
            assert!(e.to_string().contains("writable by group or others"), "{e}");
            assert!(e.to_string().contains("chmod 0700"), "{e}");
        }
        // Readable by others is allowed: the files themselves are 0600.
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(Store::open(&real, true).unwrap().is_some());

        let file = parent.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let Err(OpenError::Unsafe(e)) = Store::open(&file, true) else {
            panic!("a file is not a directory");
        };
        assert!(e.to_string().contains("not a directory"), "{e}");
    }

    /// Needs root, as the tests run here: the directory is given to another
    /// user for real.
    #[test]
    fn refuses_a_directory_owned_by_another_user() {
        let uid = wicp_base::platform::running_owner().unwrap().0;
        assert_eq!(uid, 0, "this test chowns a directory and must run as root");
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("cache");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&dir, Some(4242), Some(4242)).unwrap();
        let Err(OpenError::Unsafe(e)) = Store::open(&dir, true) else {
            panic!("a directory of uid 4242 must be refused");
        };
        assert!(e.to_string().contains("owned by uid 4242"), "{e}");
        assert!(e.to_string().contains("chown 0"), "{e}");

        // An entry file of another user inside our directory is not trusted.
        let (_parent, store) = store();
        let k = key('f');
        store.write(&entry(&k)).unwrap();
        std::os::unix::fs::chown(store.entry_path(&k), Some(4242), None).unwrap();
        assert_unusable(
            &store,
            &k,
            "owned by uid 4242",
            "a foreign entry must not be used",
        );
    }

    #[test]
    fn missing_directory_without_create_is_none() {
        let parent = tempfile::tempdir().unwrap();
        assert!(
            Store::open(&parent.path().join("nope"), false)
                .unwrap()
                .is_none()
        );
        assert!(!parent.path().join("nope").exists());
    }

    #[test]
    fn scan_only_sees_its_own_names() {
        let (_parent, store) = store();
        let k = key('1');
        store.write(&entry(&k)).unwrap();
        let Acquired::Held(_lock) = store.try_lock(&k).unwrap() else {
            panic!("free");
        };
        let temp = store.dir().join(format!(".{k}.99.123.tmp"));
        std::fs::write(&temp, b"{").unwrap();
        for other in ["README", "x.json", ".x.tmp", &format!("{k}.json.bak")] {
            std::fs::write(store.dir().join(other), b"").unwrap();
        }
        let scan = store.scan().unwrap();
        assert_eq!(keys(&scan.entries), vec![k.clone()]);
        assert_eq!(keys(&scan.locks), vec![k]);
        assert_eq!(scan.temps.len(), 1);
        assert_eq!(scan.temps[0].0, temp);
    }

    #[test]
    fn serialized_entry_layout() {
        let k = key('2');
        let text = String::from_utf8(serialize(&entry(&k)).unwrap()).unwrap();
        assert_eq!(
            text,
            format!(
                "{{\"format\":1,\"key\":\"{k}\",\"provider\":\"aws\",\
                 \"serviceAccount\":{{\"namespace\":\"team-a\",\"name\":\"puller\",\"uid\":\"uid-1\"}},\
                 \"registry\":\"123456789012.dkr.ecr.eu-west-1.amazonaws.com\",\
                 \"createdAt\":1000,\"expiresAt\":4600,\"username\":\"AWS\",\
                 \"password\":\"s3cr3t-password-value\"}}\n"
            )
        );
    }
}
