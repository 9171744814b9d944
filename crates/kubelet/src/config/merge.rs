//! Putting our provider entries into an existing `CredentialProviderConfig`
//! in its own format: JSON stays JSON, YAML stays YAML, every other entry
//! keeps its fields, values and place. An entry with one of our names is
//! replaced where it stands; another provider is removed or narrowed only
//! when asked (`--replace NAME` or `--replace NAME=PATTERN,...`).
//!
//! The document is read into an order-keeping value (JSON is read as YAML,
//! of which it is a subset), changed, and written back only if its meaning
//! changed: a file already holding our entries is left byte for byte, which
//! is what makes a second install a no-op.

use std::path::Path;

use yaml_serde::{Mapping, Value};

use wicp_base::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

impl Format {
    /// By extension; `.json` is JSON, anything else YAML.
    pub fn of(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => Format::Json,
            _ => Format::Yaml,
        }
    }
}

/// `node install --replace`: the flag is declared here, beside the rule it
/// sets, and read by the command line (`long = REPLACE.long`).
pub static REPLACE: wicp_base::flags::FlagSpec = wicp_base::flags::FlagSpec {
    long: "replace",
    env: "",
    takes: wicp_base::flags::Takes::One,
    value: "NAME",
    default: "",
    help: "",
};

/// What `--replace` does to another provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replace {
    pub name: String,
    /// `None` removes the entry; `Some` narrows its `matchImages` to these.
    pub narrow_to: Option<Vec<String>>,
}

impl std::str::FromStr for Replace {
    type Err = String;
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let (name, narrow_to) = match text.split_once('=') {
            Some((n, patterns)) => {
                let list: Vec<String> = patterns
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect();
                if list.is_empty() {
                    return Err(format!(
                        "{text:?}: give at least one pattern after '=', or none to remove the entry"
                    ));
                }
                (n, Some(list))
            }
            None => (text, None),
        };
        if name.is_empty() || name.contains(['/', ' ']) {
            return Err(format!("{name:?} is not a provider name"));
        }
        Ok(Replace {
            name: name.to_string(),
            narrow_to,
        })
    }
}

/// The result of a merge.
#[derive(Debug)]
pub struct Merged {
    /// The bytes to write, or `None` when the file already says this.
    pub bytes: Option<Vec<u8>>,
    pub value: Value,
    /// What changed, one line each (`added wi-credential-provider-aws`).
    pub changes: Vec<String>,
}

/// Parses a config with the bounded reader's rules (depth, merge keys),
/// so that what is merged is what the kubelet reads.
pub fn parse(bytes: &[u8], what: &Path) -> Result<Value> {
    let strict = std::str::from_utf8(bytes)
        .map_err(|_| "the file is not UTF-8".to_string())
        .and_then(wicp_base::yaml::check_strict_keys);
    strict
        .and_then(|()| wicp_base::yaml::parse(bytes))
        .map_err(|e| {
            Error::config(format!("cannot read {}: {e}", what.display()))
                .fix("fix the file first: the kubelet would refuse it too")
        })
}

/// The provider entries of a config document.
pub fn providers(doc: &Value) -> Vec<Value> {
    doc.get("providers")
        .and_then(Value::as_sequence)
        .cloned()
        .unwrap_or_default()
}

pub fn entry_name(entry: &Value) -> &str {
    entry.get("name").and_then(Value::as_str).unwrap_or("")
}

/// Whether two provider names are one entry: the same, or the same but
/// for a `.exe` (any case). A Windows kubelet before 1.30 registers a
/// plugin by its exact name and runs `name.exe`, so AKS-style configs
/// name it without the extension and ours with it (kubernetes #120291).
pub fn same_provider(a: &str, b: &str) -> bool {
    fn stem(name: &str) -> &str {
        match name
            .len()
            .checked_sub(4)
            .and_then(|at| name.get(at..).map(|ext| (at, ext)))
        {
            Some((at, ext)) if ext.eq_ignore_ascii_case(".exe") => name.get(..at).unwrap_or(name),
            _ => name,
        }
    }
    a == b || stem(a) == stem(b)
}

/// A new, empty config document.
pub fn empty_document() -> Value {
    let mut map = Mapping::new();
    map.insert("apiVersion".into(), "kubelet.config.k8s.io/v1".into());
    map.insert("kind".into(), "CredentialProviderConfig".into());
    map.insert("providers".into(), Value::Sequence(Vec::new()));
    Value::Mapping(map)
}

/// Merges `ours` into `existing` (its bytes, or `None` for a new file).
pub fn merge(
    existing: Option<&[u8]>,
    path: &Path,
    format: Format,
    ours: &[Value],
    replace: &[Replace],
) -> Result<Merged> {
    let before = match existing {
        Some(bytes) => Some(parse(bytes, path)?),
        None => None,
    };
    let mut doc = before.clone().unwrap_or_else(empty_document);
    let mut changes = Vec::new();
    let Some(map) = doc.as_mapping_mut() else {
        return Err(Error::config(format!(
            "{} is not a CredentialProviderConfig document",
            path.display()
        )));
    };
    // Our entries need the v1 config API (tokenAttributes).
    if map.get("apiVersion").and_then(Value::as_str) != Some("kubelet.config.k8s.io/v1")
        && ours.iter().any(|e| e.get("tokenAttributes").is_some())
    {
        map.insert("apiVersion".into(), "kubelet.config.k8s.io/v1".into());
        changes.push("set apiVersion kubelet.config.k8s.io/v1 (tokenAttributes needs it)".into());
    }
    let list = providers(&Value::Mapping(map.clone()));
    let mut out: Vec<Value> = Vec::new();
    let mut placed = vec![false; ours.len()];
    for entry in list {
        let name = entry_name(&entry).to_string();
        if let Some(i) = ours
            .iter()
            .position(|o| same_provider(entry_name(o), &name))
        {
            if let (Some(mine), Some(slot)) = (ours.get(i), placed.get_mut(i))
                && !*slot
            {
                if *mine != entry {
                    changes.push(format!("replaced {name}"));
                }
                out.push(mine.clone());
                *slot = true;
            }
            continue;
        }
        out.extend(replaced(entry, &name, replace, ours, &mut changes)?);
    }
    for (mine, done) in ours.iter().zip(&placed) {
        if !done {
            changes.push(format!("added {}", entry_name(mine)));
            out.push(mine.clone());
        }
    }
    // A --replace naming no provider is not an error: a second install
    // finds the entry already removed.
    map.insert("providers".into(), Value::Sequence(out));
    if before.as_ref() == Some(&doc) {
        return Ok(Merged {
            bytes: None,
            value: doc,
            changes: Vec::new(),
        });
    }
    let bytes = render(&doc, format)?;
    Ok(Merged {
        bytes: Some(bytes),
        value: doc,
        changes,
    })
}

/// What becomes of another provider's `entry` (called `name`) under
/// `--replace`: kept, removed, or narrowed to the patterns given. Refused
/// when that would take from the kubelet's config a `matchImages` pattern
/// no entry of `ours` covers ([`uncovered`]): pulls from those registries
/// would then match no provider at all, which an install must not do
/// without a word (an AKS custom cloud's `*<registry suffix>`).
fn replaced(
    entry: Value,
    name: &str,
    replace: &[Replace],
    ours: &[Value],
    changes: &mut Vec<String>,
) -> Result<Option<Value>> {
    let Some(rule) = replace.iter().find(|r| same_provider(&r.name, name)) else {
        return Ok(Some(entry));
    };
    let kept = rule.narrow_to.as_deref().unwrap_or_default();
    let dropped = uncovered(&entry, kept, ours);
    if !dropped.is_empty() {
        let keep: Vec<&str> = kept
            .iter()
            .map(String::as_str)
            .chain(dropped.iter().map(String::as_str))
            .collect();
        return Err(Error::config(format!(
            "--replace {} would take {} from {name}, and no entry being installed matches {}: \
             pulls from those registries would find no credential provider; nothing was changed",
            rule_text(rule),
            dropped.join(", "),
            if dropped.len() == 1 { "it" } else { "them" }
        ))
        .with(wicp_base::error::Fact::Flag((&REPLACE).into()))
        .fix(format!(
            "keep {name} for them: --replace {name}={}; or install an entry that serves them (--config)",
            keep.join(",")
        )));
    }
    Ok(match rule {
        Replace {
            narrow_to: None, ..
        } => {
            changes.push(format!("removed {name} (--replace)"));
            None
        }
        Replace {
            narrow_to: Some(patterns),
            ..
        } => {
            let mut narrowed = entry;
            if let Some(m) = narrowed.as_mapping_mut() {
                let list =
                    Value::Sequence(patterns.iter().map(|p| Value::from(p.as_str())).collect());
                if m.get("matchImages") != Some(&list) {
                    changes.push(format!("narrowed {name} to {}", patterns.join(", ")));
                }
                m.insert("matchImages".into(), list);
            }
            Some(narrowed)
        }
    })
}

/// `--replace` as written.
fn rule_text(rule: &Replace) -> String {
    match &rule.narrow_to {
        None => rule.name.clone(),
        Some(patterns) => format!("{}={}", rule.name, patterns.join(",")),
    }
}

/// The `matchImages` patterns of `entry` that replacing it (keeping only
/// `kept`) would drop and that no entry of `ours` covers: the same
/// pattern (in any case), or one of ours that matches it with each `*`
/// standing for a label (`*.azurecr.io` covers `contoso.azurecr.io`).
fn uncovered(entry: &Value, kept: &[String], ours: &[Value]) -> Vec<String> {
    let patterns_of = |e: &Value| -> Vec<String> {
        e.get("matchImages")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let mine: Vec<String> = ours.iter().flat_map(patterns_of).collect();
    patterns_of(entry)
        .into_iter()
        .filter(|p| !kept.iter().any(|k| k.eq_ignore_ascii_case(p)))
        .filter(|p| {
            let probe = p.replace('*', "x");
            !mine
                .iter()
                .any(|m| m.eq_ignore_ascii_case(p) || crate::config::matching::matches(m, &probe))
        })
        .collect()
}

pub fn render(doc: &Value, format: Format) -> Result<Vec<u8>> {
    let text = match format {
        Format::Json => {
            serde_json::to_string_pretty(doc)
                .map_err(|e| Error::config(format!("cannot write JSON: {e}")))?
                + "\n"
        }
        Format::Yaml => yaml_serde::to_string(doc)
            .map_err(|e| Error::config(format!("cannot write YAML: {e}")))?,
    };
    Ok(text.into_bytes())
}

/// Removes the entries named `names` (uninstall when the file changed
/// since install): the rest keeps its meaning and order.
pub fn remove(bytes: &[u8], path: &Path, names: &[String]) -> Result<(Vec<u8>, usize)> {
    let mut doc = parse(bytes, path)?;
    let list = providers(&doc);
    let kept: Vec<Value> = list
        .iter()
        .filter(|e| !names.iter().any(|n| same_provider(n, entry_name(e))))
        .cloned()
        .collect();
    let removed = list.len() - kept.len();
    if let Some(map) = doc.as_mapping_mut() {
        map.insert("providers".into(), Value::Sequence(kept));
    }
    Ok((render(&doc, Format::of(path))?, removed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round-4 item 2: a config the kubelet refuses (a key a merge key
    /// already set, set again) is refused here too, naming the key and its
    /// line, instead of being rewritten into a form the kubelet accepts
    /// (which uninstall would then undo back into the refused one).
    #[test]
    fn a_name_and_its_exe_twin_are_one_entry() {
        assert!(same_provider(
            "acr-credential-provider",
            "acr-credential-provider.EXE"
        ));
        assert!(same_provider("a.exe", "a.exe"));
        assert!(!same_provider("a", "b.exe"));
        assert!(!same_provider(".exe", "x"));
        let existing = b"apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - name: wi-credential-provider-azure\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n    matchImages: [\"*.azurecr.io\"]\n    defaultCacheDuration: 1m\n";
        let ours = providers(&parse(existing, Path::new("x")).unwrap())
            .into_iter()
            .map(|mut e| {
                if let Some(m) = e.as_mapping_mut() {
                    m.insert("name".into(), "wi-credential-provider-azure.exe".into());
                }
                e
            })
            .collect::<Vec<_>>();
        let merged = merge(
            Some(existing),
            Path::new("x.yaml"),
            Format::Yaml,
            &ours,
            &[],
        )
        .unwrap();
        let names: Vec<String> = providers(&merged.value)
            .iter()
            .map(|e| entry_name(e).to_string())
            .collect();
        assert_eq!(names, vec!["wi-credential-provider-azure.exe".to_string()]);
        assert_eq!(
            merged.changes,
            vec!["replaced wi-credential-provider-azure".to_string()]
        );
    }

    #[test]
    fn a_config_the_kubelet_refuses_for_a_merged_key_is_not_merged_into() {
        let existing = b"apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - &base\n    name: a\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n    matchImages: [\"a.io\"]\n    defaultCacheDuration: \"10m\"\n  - <<: *base\n    name: b\n";
        let path = Path::new("/etc/kubernetes/credential-provider.yaml");
        let Err(e) = merge(Some(existing), path, Format::Yaml, &[], &[]) else {
            panic!("merged into a config the kubelet refuses");
        };
        let shown = e.to_string();
        assert!(
            shown.contains("line 10: key \"name\" already set in map"),
            "{shown}"
        );
        assert!(shown.contains("the kubelet would refuse it too"), "{shown}");
    }
}
