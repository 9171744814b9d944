//! Where a systemd unit's command line comes from: the unit file, its
//! drop-ins (in systemd's order), `Environment=` and `EnvironmentFile=`,
//! with `$VAR` / `${VAR}` expanded as systemd does (`$VAR` alone as a word
//! splits on whitespace, `${VAR}` inside a word does not).
//!
//! Each word of the expanded `ExecStart` remembers the variable and file it
//! came from, so an install can edit the file that really carries a flag
//! (`KUBELET_EXTRA_ARGS` in `/etc/default/kubelet`, `NODEADM_KUBELET_ARGS`
//! in `/etc/eks/kubelet/environment`) and a report can say where each flag
//! was learned.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::host::Host;

/// The unit directories, in systemd's precedence order (first wins for the
/// unit file itself; drop-ins of every directory apply).
pub const UNIT_DIRS: [&str; 5] = [
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// A variable's value and the file that set it.
#[derive(Clone, Debug)]
pub struct Var {
    pub value: String,
    pub file: PathBuf,
}

/// One word of the expanded command line and where it came from.
#[derive(Clone, Debug)]
pub struct Word {
    pub text: String,
    /// The variable the word came from, if any.
    pub var: Option<String>,
    /// The file that set the word (the env file, or the unit file).
    pub file: PathBuf,
}

#[derive(Clone, Debug, Default)]
pub struct Unit {
    pub name: String,
    /// Host paths of the unit file and its drop-ins, in the order applied.
    pub files: Vec<PathBuf>,
    /// `EnvironmentFile=` entries (host paths), in order, and whether each
    /// must exist (no `-` prefix).
    pub env_files: Vec<PathBuf>,
    pub vars: BTreeMap<String, Var>,
    pub exec_start: Vec<Word>,
}

impl Unit {
    /// Reads unit `name` (`kubelet.service`) under the host root. `None`
    /// when no unit file exists.
    pub fn load(host: &Host, name: &str) -> Option<Unit> {
        let file = UNIT_DIRS
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| host.path(p).is_file())?;
        let mut files = vec![file];
        let mut drop_ins: BTreeMap<String, PathBuf> = BTreeMap::new();
        for dir in UNIT_DIRS.iter().rev() {
            let d = Path::new(dir).join(format!("{name}.d"));
            if let Ok(entries) = std::fs::read_dir(host.path(&d)) {
                for e in entries.flatten() {
                    let file_name = e.file_name().to_string_lossy().into_owned();
                    if file_name.ends_with(".conf") {
                        // A drop-in of the same name in a higher directory wins.
                        drop_ins.insert(file_name.clone(), d.join(&file_name));
                    }
                }
            }
        }
        files.extend(drop_ins.into_values());
        let mut unit = Unit {
            name: name.to_string(),
            files: files.clone(),
            ..Unit::default()
        };
        let mut exec_start_raw: Option<(String, PathBuf)> = None;
        for file in &files {
            let Ok(text) = std::fs::read_to_string(host.path(file)) else {
                continue;
            };
            let mut section = String::new();
            for line in logical_lines(&text) {
                let line = line.trim();
                if line.starts_with('[') {
                    section = line.to_string();
                    continue;
                }
                if section != "[Service]" {
                    continue;
                }
                let Some((key, value)) = line.split_once('=') else {
                    continue;
                };
                let (key, value) = (key.trim(), value.trim());
                match key {
                    "ExecStart" if value.is_empty() => exec_start_raw = None,
                    "ExecStart" => exec_start_raw = Some((value.to_string(), file.clone())),
                    "Environment" => {
                        for assignment in split_words(value) {
                            if let Some((k, v)) = assignment.split_once('=') {
                                unit.vars.insert(
                                    k.to_string(),
                                    Var {
                                        value: v.to_string(),
                                        file: file.clone(),
                                    },
                                );
                            }
                        }
                    }
                    "EnvironmentFile" => {
                        let path = PathBuf::from(value.trim_start_matches('-'));
                        unit.env_files.push(path.clone());
                        if let Ok(text) = std::fs::read_to_string(host.path(&path)) {
                            for (k, v) in parse_env_file(&text) {
                                unit.vars.insert(
                                    k,
                                    Var {
                                        value: v,
                                        file: path.clone(),
                                    },
                                );
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        if let Some((raw, file)) = exec_start_raw {
            unit.exec_start = expand(&raw, &file, &unit.vars);
        }
        Some(unit)
    }

    /// The command-line words after the program.
    pub fn args(&self) -> Vec<String> {
        self.exec_start
            .iter()
            .skip(1)
            .map(|w| w.text.clone())
            .collect()
    }
}

/// Joins lines ending in a backslash, drops comments.
fn logical_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if current.is_empty()
            && (line.trim_start().starts_with('#') || line.trim_start().starts_with(';'))
        {
            continue;
        }
        if let Some(stripped) = line.strip_suffix('\\') {
            current.push_str(stripped);
            current.push(' ');
        } else {
            current.push_str(line);
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Splits on whitespace, honouring double and single quotes.
pub fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => current.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            None => {
                current.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(current);
    }
    words
}

/// An environment file as systemd reads it: `KEY=VALUE` lines, `#`
/// comments, values optionally quoted.
pub fn parse_env_file(text: &str) -> Vec<(String, String)> {
    logical_lines(text)
        .iter()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("export ").unwrap_or(line);
            let (k, v) = line.split_once('=')?;
            let v = v.trim();
            let v = if v.len() >= 2
                && ((v.starts_with('"') && v.ends_with('"'))
                    || (v.starts_with('\'') && v.ends_with('\'')))
            {
                v.get(1..v.len() - 1).unwrap_or("")
            } else {
                v
            };
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

fn expand(raw: &str, unit_file: &Path, vars: &BTreeMap<String, Var>) -> Vec<Word> {
    let raw = raw.trim_start_matches(['-', '@', ':', '+', '!']);
    let mut words = Vec::new();
    for word in split_words(raw) {
        let name = word
            .strip_prefix('$')
            .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        if let Some(name) = name {
            if let Some(var) = vars.get(name) {
                for part in split_words(&var.value) {
                    words.push(Word {
                        text: part,
                        var: Some(name.to_string()),
                        file: var.file.clone(),
                    });
                }
            }
            continue;
        }
        let mut text = word.clone();
        let mut var_used = None;
        while let Some(start) = text.find("${") {
            let Some(len) = text.get(start..).and_then(|t| t.find('}')) else {
                break;
            };
            let name = text.get(start + 2..start + len).unwrap_or("").to_string();
            let value = vars.get(&name).map(|v| v.value.clone()).unwrap_or_default();
            if vars.contains_key(&name) {
                var_used = Some(name.clone());
            }
            text.replace_range(start..start + len + 1, &value);
        }
        let file = var_used
            .as_ref()
            .and_then(|n| vars.get(n))
            .map_or(unit_file.to_path_buf(), |v| v.file.clone());
        words.push(Word {
            text,
            var: var_used,
            file,
        });
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_files() {
        let vars = parse_env_file(
            "# comment\nKUBELET_EXTRA_ARGS=\nKUBELET_FLAGS=--a=b --c d\nQ=\"x y\"\n",
        );
        assert_eq!(vars[0], ("KUBELET_EXTRA_ARGS".into(), "".into()));
        assert_eq!(vars[1].1, "--a=b --c d");
        assert_eq!(vars[2].1, "x y");
    }

    #[test]
    fn kubeadm_drop_in() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        let write = |p: &str, text: &str| {
            let path = host.path(Path::new(p));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(
            "/usr/lib/systemd/system/kubelet.service",
            "[Service]\nExecStart=/usr/bin/kubelet\n",
        );
        write(
            "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
            "[Service]\nEnvironment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"\n\
             EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\nEnvironmentFile=-/etc/default/kubelet\n\
             ExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS\n",
        );
        write(
            "/etc/default/kubelet",
            "KUBELET_EXTRA_ARGS=--image-credential-provider-config=/etc/x.yaml\n",
        );
        let unit = Unit::load(&host, "kubelet.service").unwrap();
        assert_eq!(unit.files.len(), 2);
        assert_eq!(
            unit.args(),
            [
                "--config=/var/lib/kubelet/config.yaml",
                "--image-credential-provider-config=/etc/x.yaml"
            ]
        );
        let last = unit.exec_start.last().unwrap();
        assert_eq!(last.var.as_deref(), Some("KUBELET_EXTRA_ARGS"));
        assert_eq!(last.file, Path::new("/etc/default/kubelet"));
    }
}
