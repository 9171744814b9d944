//! Where a systemd unit's command line comes from: the unit file, its
//! drop-ins (in systemd's order), `Environment=` and `EnvironmentFile=`,
//! with `$VAR` / `${VAR}` expanded as systemd does (`$VAR` alone as a word
//! splits on whitespace, `${VAR}` inside a word does not).
//!
//! systemd's own rules, from systemd.exec(5), systemd.syntax(7) and
//! `src/basic/env-file.c` (`parse_env_file_internal`):
//! - variables from `EnvironmentFile=` files override `Environment=`,
//!   whatever the order of the lines; files are read in the order given,
//!   a later file overriding an earlier one; an empty assignment of
//!   either resets its list;
//! - in a unit file a line ending in a backslash continues on the next,
//!   the backslash becoming a space; in an environment file an escaped
//!   newline is removed entirely, and so is one inside double quotes;
//!   single quotes keep everything; a comment line ends only at an
//!   unescaped newline;
//! - a variable whose name or value is not valid UTF-8 is ignored.
//!
//! Each word of the expanded `ExecStart` remembers the variable and file it
//! came from, so an install can edit the file that really carries a flag
//! (`KUBELET_EXTRA_ARGS` in `/etc/default/kubelet`, `NODEADM_KUBELET_ARGS`
//! in `/etc/eks/kubelet/environment`) and a report can say where each flag
//! was learned. Every file is read through [`Host`], bounded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use wicp_base::platform::Host;

/// Largest unit, drop-in or environment file read.
const MAX_UNIT_FILE: u64 = 1 << 20;

/// The unit directories, in systemd's precedence order (first wins for the
/// unit file itself; drop-ins of every directory apply).
pub(crate) const UNIT_DIRS: [&str; 5] = [
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// A variable's value and the file that set it.
#[derive(Clone, Debug)]
pub(crate) struct Var {
    pub(crate) value: String,
    pub(crate) file: PathBuf,
}

/// One word of the expanded command line and where it came from.
#[derive(Clone, Debug)]
pub(crate) struct Word {
    pub(crate) text: String,
    /// The variable the word came from, if any.
    pub(crate) var: Option<String>,
    /// The file that set the word (the env file, or the unit file).
    pub(crate) file: PathBuf,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Unit {
    pub(crate) name: String,
    /// Host paths of the unit file and its drop-ins, in the order applied.
    pub(crate) files: Vec<PathBuf>,
    /// `EnvironmentFile=` entries (host paths), in order.
    pub(crate) env_files: Vec<PathBuf>,
    /// Environment files that exist but are not valid UTF-8 throughout:
    /// systemd ignores their bad assignments, and install never edits them.
    pub(crate) not_utf8: Vec<PathBuf>,
    pub(crate) vars: BTreeMap<String, Var>,
    pub(crate) exec_start: Vec<Word>,
}

/// The unit file `name` in the first unit directory that has it, then
/// its `.conf` drop-ins in name order (one of the same name in a higher
/// directory wins); `None` without a unit file.
fn unit_files(host: &Host, name: &str) -> Option<Vec<PathBuf>> {
    let file = UNIT_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| host.is_file(p))?;
    let mut files = vec![file];
    let mut drop_ins: BTreeMap<String, PathBuf> = BTreeMap::new();
    for dir in UNIT_DIRS.iter().rev() {
        let d = Path::new(dir).join(format!("{name}.d"));
        if let Ok(entries) = host.read_dir(&d) {
            for (entry, _) in entries {
                let file_name = entry.to_string_lossy().into_owned();
                if file_name.ends_with(".conf") {
                    // A drop-in of the same name in a higher directory wins.
                    drop_ins.insert(file_name.clone(), d.join(&file_name));
                }
            }
        }
    }
    files.extend(drop_ins.into_values());
    Some(files)
}

impl Unit {
    /// Reads unit `name` (`kubelet.service`) under the host root. `None`
    /// when no unit file exists.
    pub(crate) fn load(host: &Host, name: &str) -> Option<Unit> {
        let files = unit_files(host, name)?;
        let mut unit = Unit {
            name: name.to_string(),
            files: files.clone(),
            ..Unit::default()
        };
        let mut environment: BTreeMap<String, Var> = BTreeMap::new();
        let mut exec_start_raw: Option<(String, PathBuf)> = None;
        for file in &files {
            let Ok(Some(bytes)) = host.read_bytes(file, MAX_UNIT_FILE) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
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
                    "Environment" if value.is_empty() => environment.clear(),
                    "Environment" => {
                        for assignment in split_words(value) {
                            if let Some((k, v)) = assignment.split_once('=') {
                                environment.insert(
                                    k.to_string(),
                                    Var {
                                        value: v.to_string(),
                                        file: file.clone(),
                                    },
                                );
                            }
                        }
                    }
                    "EnvironmentFile" if value.is_empty() => unit.env_files.clear(),
                    "EnvironmentFile" => {
                        unit.env_files
                            .push(PathBuf::from(value.trim_start_matches('-')));
                    }
                    _ => {}
                }
            }
        }
        // Files after Environment=, in order: later wins (systemd.exec(5)).
        unit.vars = environment;
        unit.read_environment_files(host);
        if let Some((raw, file)) = exec_start_raw {
            unit.exec_start = expand(&raw, &file, &unit.vars);
        }
        Some(unit)
    }

    /// The variables of its `EnvironmentFile=`s, in order, over those of
    /// `Environment=`: later wins (systemd.exec(5)).
    fn read_environment_files(&mut self, host: &Host) {
        for path in self.env_files.clone() {
            let Ok(Some(bytes)) = host.read_bytes(&path, MAX_UNIT_FILE) else {
                continue;
            };
            if std::str::from_utf8(&bytes).is_err() {
                self.not_utf8.push(path.clone());
            }
            for (k, v) in parse_env_bytes(&bytes) {
                self.vars.insert(
                    k,
                    Var {
                        value: v,
                        file: path.clone(),
                    },
                );
            }
        }
    }

    /// The command-line words after the program.
    pub(crate) fn args(&self) -> Vec<String> {
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
pub(crate) fn split_words(text: &str) -> Vec<String> {
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

/// An environment file as systemd reads it (`parse_env_file_internal`):
/// `KEY=VALUE` assignments, `#` and `;` comments, quotes and escapes; an
/// assignment whose name or value is not UTF-8, or whose name is not a
/// valid variable name, is dropped.
fn parse_env_bytes(bytes: &[u8]) -> Vec<(String, String)> {
    #[derive(Clone, Copy, PartialEq)]
    enum S {
        PreKey,
        Key,
        PreValue,
        Value,
        ValueEscape,
        Single,
        Double,
        DoubleEscape,
        Comment,
        CommentEscape,
    }
    let mut out = Vec::new();
    let mut state = S::PreKey;
    let mut key: Vec<u8> = Vec::new();
    let mut value: Vec<u8> = Vec::new();
    // Where trailing whitespace of an unquoted value starts.
    let mut value_end = 0usize;
    let push = |key: &mut Vec<u8>, value: &mut Vec<u8>, out: &mut Vec<(String, String)>| {
        let k = std::mem::take(key);
        let v = std::mem::take(value);
        let k = String::from_utf8(k).ok();
        let v = String::from_utf8(v).ok();
        if let (Some(k), Some(v)) = (k, v) {
            let k = k.trim_end().to_string();
            let valid = !k.is_empty()
                && !k.starts_with(|c: char| c.is_ascii_digit())
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if valid {
                out.push((k, v));
            }
        }
    };
    for &c in bytes {
        let newline = c == b'\n' || c == b'\r';
        let space = matches!(c, b' ' | b'\t') || newline;
        state = match state {
            S::PreKey if c == b'#' || c == b';' => S::Comment,
            S::PreKey if space => S::PreKey,
            S::PreKey => {
                key.push(c);
                S::Key
            }
            S::Key if newline => {
                key.clear();
                S::PreKey
            }
            S::Key if c == b'=' => S::PreValue,
            S::Key => {
                key.push(c);
                S::Key
            }
            S::PreValue if newline => {
                value_end = 0;
                push(&mut key, &mut value, &mut out);
                S::PreKey
            }
            S::PreValue if c == b'\'' => S::Single,
            S::PreValue if c == b'"' => S::Double,
            S::PreValue if c == b'\\' => S::ValueEscape,
            S::PreValue if space => S::PreValue,
            S::PreValue | S::Value if !newline && c != b'\\' => {
                value.push(c);
                if !space {
                    value_end = value.len();
                }
                S::Value
            }
            S::Value if newline => {
                value.truncate(value_end);
                value_end = 0;
                push(&mut key, &mut value, &mut out);
                S::PreKey
            }
            S::Value => S::ValueEscape,
            S::PreValue => S::PreValue,
            S::ValueEscape => {
                if !newline {
                    value.push(c);
                    value_end = value.len();
                }
                S::Value
            }
            S::Single if c == b'\'' => {
                value_end = value.len();
                S::PreValue
            }
            S::Single => {
                value.push(c);
                S::Single
            }
            S::Double if c == b'"' => {
                value_end = value.len();
                S::PreValue
            }
            S::Double if c == b'\\' => S::DoubleEscape,
            S::Double => {
                value.push(c);
                S::Double
            }
            S::DoubleEscape => {
                if matches!(c, b'"' | b'\\' | b'`' | b'$') {
                    value.push(c);
                } else if !newline {
                    value.push(b'\\');
                    value.push(c);
                }
                S::Double
            }
            S::Comment if c == b'\\' => S::CommentEscape,
            S::Comment if newline => S::PreKey,
            S::Comment => S::Comment,
            S::CommentEscape => S::Comment,
        };
    }
    match state {
        S::Value => {
            value.truncate(value_end);
            push(&mut key, &mut value, &mut out);
        }
        S::PreValue | S::ValueEscape | S::Single | S::Double | S::DoubleEscape => {
            push(&mut key, &mut value, &mut out);
        }
        S::PreKey | S::Key | S::Comment | S::CommentEscape => {}
    }
    out
}

/// [`parse_env_bytes`] on text.
pub(crate) fn parse_env_file(text: &str) -> Vec<(String, String)> {
    parse_env_bytes(text.as_bytes())
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
    fn environment_files_override_environment_and_continue_lines_as_systemd_does() {
        // A drop-in read after the unit sets Environment=: the file still wins.
        let (dir, host) = wicp_base::platform::test_root(&[
            ("/etc/systemd/system/kubelet.service", b"[Service]\nEnvironmentFile=-/etc/default/kubelet\nExecStart=/usr/bin/kubelet $KUBELET_EXTRA_ARGS\n"),
            ("/etc/systemd/system/kubelet.service.d/90-extra.conf", b"[Service]\nEnvironment=KUBELET_EXTRA_ARGS=--from-drop-in=1\n"),
            ("/etc/default/kubelet", b"KUBELET_EXTRA_ARGS=--a=1 \\\n--image-credential-provider-config=/etc/x.yaml\n"),
        ]);
        let unit = Unit::load(&host, "kubelet.service").unwrap();
        assert_eq!(
            unit.args(),
            ["--a=1", "--image-credential-provider-config=/etc/x.yaml"]
        );
        assert_eq!(unit.exec_start[1].file, Path::new("/etc/default/kubelet"));
        assert!(unit.not_utf8.is_empty());
        std::fs::write(
            dir.path().join("etc/default/kubelet"),
            b"KUBELET_EXTRA_ARGS=--a=\xff\n",
        )
        .unwrap();
        let unit = Unit::load(&host, "kubelet.service").unwrap();
        assert_eq!(unit.not_utf8, [PathBuf::from("/etc/default/kubelet")]);
        // systemd drops the bad assignment: Environment= shows through.
        assert_eq!(unit.args(), ["--from-drop-in=1"]);
    }

    #[test]
    fn env_file_syntax() {
        let vars = parse_env_file("A='x y' \nB=\"q\\\"\\\n w\"\n# c \\\n C=1\nD = 2 \n3E=bad\nF\n");
        assert_eq!(
            vars,
            [
                ("A".to_string(), "x y".to_string()),
                ("B".to_string(), "q\" w".to_string()),
                ("D".to_string(), "2".to_string()),
            ]
        );
    }

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
        let (_dir, host) = wicp_base::platform::test_root(&[
            (
                "/usr/lib/systemd/system/kubelet.service",
                b"[Service]\nExecStart=/usr/bin/kubelet\n",
            ),
            (
                "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
                b"[Service]\nEnvironment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"\n\
                 EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\nEnvironmentFile=-/etc/default/kubelet\n\
                 ExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS\n",
            ),
            (
                "/etc/default/kubelet",
                b"KUBELET_EXTRA_ARGS=--image-credential-provider-config=/etc/x.yaml\n",
            ),
        ]);
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
