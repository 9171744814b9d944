//! Cache entry decoding, through the real read path: arbitrary bytes as the
//! entry file of a key in a private cache directory, read back by the
//! store. Anything but a well-formed entry for that key is a miss, never a
//! panic; what is accepted round-trips through a write. The key text of a
//! file name is fuzzed too.
#![no_main]
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use wicp_providers::cache::key::Key;
use wicp_providers::cache::store::{Lookup, Store};

/// One private directory for every run, and a key of this process's own,
/// so parallel jobs do not meet and nothing is left behind but the
/// directory.
fn store() -> &'static (Store, Key) {
    static STORE: OnceLock<(Store, Key)> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = std::env::temp_dir().join("wicp-fuzz-cache");
        let store = Store::open(&dir, true).unwrap().unwrap();
        let key = Key::parse(&format!("{:064x}", std::process::id())).unwrap();
        (store, key)
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Some(key) = Key::parse(text)
    {
        assert_eq!(key.as_str(), text);
    }
    let (store, key) = store();
    let key = key.clone();
    let path: PathBuf = store.entry_path(&key);
    let _ = std::fs::remove_file(&path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, data))
        .unwrap();
    match store.read(&key) {
        Lookup::Found(entry) => {
            assert_eq!(entry.key, key);
            assert!(!entry.username.is_empty() && !entry.password.is_empty());
            assert!(entry.expires_at > entry.created_at);
            store.write(&entry).unwrap();
            let Lookup::Found(again) = store.read(&key) else {
                panic!("a written entry reads back");
            };
            assert_eq!(again.password.expose(), entry.password.expose());
            assert_eq!(again.registry, entry.registry);
            assert_eq!(again.expires_at, entry.expires_at);
        }
        Lookup::Missing => panic!("the file is there"),
        Lookup::Unusable(_) => {}
    }
    let _ = std::fs::remove_file(&path);
});
