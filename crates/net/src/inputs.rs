//! What the process takes from its surroundings, read once at start and
//! passed down: nothing below `main` looks at the environment on its own.
//!
//! The kubelet runs the plugin with its own environment plus the provider
//! entry's `env`; `check-config` and `explain` build the same value from an
//! entry's `env` over their own environment, so they see what the binary
//! would see without changing the process.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Environment variables, as the process received them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Env {
    vars: BTreeMap<String, String>,
}

impl Env {
    /// The environment of these variables (the process's, as `main` read
    /// it once), without those whose name or value is not UTF-8.
    pub fn from_os(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        let vars = vars
            .into_iter()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Env { vars }
    }

    /// An environment of exactly these variables; a later pair wins.
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        Env {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// `self` with `over` laid on top, as the kubelet lays a provider
    /// entry's `env` over its own environment.
    pub fn overlaid<'a>(&self, over: impl IntoIterator<Item = &'a (String, String)>) -> Self {
        let mut vars = self.vars.clone();
        for (k, v) in over {
            vars.insert(k.clone(), v.clone());
        }
        Env { vars }
    }

    /// A variable's value, when set (possibly empty).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }
}

/// Names only: values may be credentials (`AWS_SECRET_ACCESS_KEY`).
impl fmt::Debug for Env {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

/// Everything a provider may read besides its own flags.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub env: Env,
    /// How upstreams are reached: the proxy settings of `env`, the extra
    /// CA certificates of `--ca-file`, and the trust store, loaded at the first client built
    /// (never on a cache hit) and shared by every client after it.
    pub net: Arc<crate::Settings>,
}

impl Inputs {
    /// The inputs of a process whose environment is `env`, with
    /// `--ca-file` and `--cache-dir` (where the trust store's prepared
    /// anchors are kept).
    pub fn new(env: Env, ca_file: Option<PathBuf>, cache_dir: Option<PathBuf>) -> Self {
        let net = crate::Settings::from_lookup(
            |name| env.get(name).map(str::to_string),
            ca_file,
            cache_dir,
        );
        Inputs {
            env,
            net: Arc::new(net),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_wins_and_debug_hides_values() {
        let base = Env::from_pairs([("A", "1"), ("SECRET", "hunter2")]);
        let env = base.overlaid(&[("A".to_string(), "2".to_string())]);
        assert_eq!(env.get("A"), Some("2"));
        assert_eq!(base.get("A"), Some("1"));
        assert_eq!(env.get("B"), None);
        let shown = format!("{env:?}");
        assert!(
            shown.contains("SECRET") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
