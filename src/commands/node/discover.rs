//! Finding the kubelet's real credential-provider set-up, each finding with
//! where it came from. In order: explicit flags; the running kubelet's
//! command line (a process named `kubelet`, or the k3s/RKE2 agent, through
//! `/proc`: the host's own with `hostPID`); the systemd unit, its drop-ins
//! and environment files; the distribution's known defaults. A repeated
//! flag counts once, the last, as in the kubelet (pflag).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::distro::{self, Distro};
use super::host::Host;
use super::systemd::Unit;
use crate::commands::check_config::kubelet_config::{KubeletConfig, Version};

pub const CONFIG_FLAG: &str = "image-credential-provider-config";
pub const BIN_DIR_FLAG: &str = "image-credential-provider-bin-dir";

/// A value and how it was learned.
#[derive(Clone, Debug, Serialize)]
pub struct Found<T> {
    pub value: T,
    pub source: String,
}

impl<T> Found<T> {
    fn new(value: T, source: impl Into<String>) -> Self {
        Found {
            value,
            source: source.into(),
        }
    }
}

/// What the caller told us, overriding discovery.
#[derive(Clone, Debug, Default)]
pub struct Explicit {
    pub credential_config: Option<PathBuf>,
    pub bin_dir: Option<PathBuf>,
    pub kubelet_config: Option<PathBuf>,
    pub kubelet_version: Option<Version>,
    /// The proc file system to read; `None` skips process discovery.
    pub proc: Option<PathBuf>,
}

/// Where the kubelet's flags were read.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum FlagSource {
    Process { pid: u32, name: String },
    Unit { unit: String, files: Vec<PathBuf> },
    None,
}

#[derive(Clone, Debug, Serialize)]
pub struct Discovery {
    pub root: PathBuf,
    pub distro: Distro,
    pub distro_evidence: String,
    pub flags_from: FlagSource,
    pub credential_config: Option<Found<PathBuf>>,
    pub bin_dir: Option<Found<PathBuf>>,
    pub kubelet_config: Option<Found<PathBuf>>,
    pub kubelet_config_dir: Option<Found<PathBuf>>,
    pub kubelet_binary: Option<PathBuf>,
    pub kubelet_version: Option<Found<String>>,
    /// For each credential-provider flag found in the systemd set-up, the
    /// variable and file that carry it.
    pub flag_files: BTreeMap<String, (String, PathBuf)>,
    #[serde(skip)]
    pub unit: Option<Unit>,
    #[serde(skip)]
    pub kubelet: Option<KubeletConfig>,
    #[serde(skip)]
    pub version: Option<Version>,
}

impl Discovery {
    pub fn health_endpoint(&self) -> Option<(String, u16)> {
        match &self.kubelet {
            Some(k) => k.healthz(),
            None => KubeletConfig::default().healthz(),
        }
    }
}

/// Parses kubelet-style flags: `--name=value` or `--name value`; the last
/// of a repeated flag wins. k3s's `--kubelet-arg=name=value` counts as the
/// kubelet flag `name`.
pub fn parse_flags(args: &[String]) -> BTreeMap<String, String> {
    let mut flags = BTreeMap::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        let Some(body) = arg.strip_prefix("--") else {
            continue;
        };
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => match args.get(i) {
                Some(next) if !next.starts_with('-') => {
                    i += 1;
                    (body.to_string(), next.clone())
                }
                _ => (body.to_string(), "true".to_string()),
            },
        };
        if name == "kubelet-arg" {
            if let Some((n, v)) = value.trim_start_matches('-').split_once('=') {
                flags.insert(n.to_string(), v.to_string());
            }
            continue;
        }
        flags.insert(name, value);
    }
    flags
}

struct Process {
    pid: u32,
    name: String,
    args: Vec<String>,
    exe: Option<PathBuf>,
}

/// The kubelet process, or else the k3s agent/server that embeds it.
fn find_process(proc: &Path) -> Option<Process> {
    let mut k3s = None;
    let mut entries: Vec<(u32, PathBuf)> = std::fs::read_dir(proc)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((pid, e.path()))
        })
        .collect();
    entries.sort();
    for (pid, dir) in entries {
        let Ok(raw) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        let argv: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
        let Some(argv0) = argv.first() else {
            continue;
        };
        let base = Path::new(argv0)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let comm = std::fs::read_to_string(dir.join("comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let exe = std::fs::read_link(dir.join("exe")).ok();
        let process = Process {
            pid,
            name: base.clone(),
            args: argv.get(1..).unwrap_or(&[]).to_vec(),
            exe,
        };
        if base == "kubelet" || comm == "kubelet" {
            return Some(Process {
                name: "kubelet".into(),
                ..process
            });
        }
        let is_agent = |w: &str| matches!(w, "agent" | "server");
        let by_argv = (base == "k3s" || base == "rke2") && argv.get(1).is_some_and(|w| is_agent(w));
        let by_comm = comm.starts_with("k3s-") || comm.starts_with("rke2");
        if k3s.is_none() && (by_argv || by_comm) {
            k3s = Some(process);
        }
    }
    k3s
}

/// Runs `kubelet --version`, bounded: the answer decides the route on
/// EKS (directory configs from 1.34).
fn kubelet_version(host: &Host, binary: &Path) -> Option<Version> {
    let path = host.path(binary);
    if !path.is_file() {
        return None;
    }
    let mut child = std::process::Command::new(&path)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    Version::parse(&String::from_utf8_lossy(&out.stdout))
}

/// Runs discovery under `host`.
pub fn discover(host: &Host, explicit: &Explicit) -> Discovery {
    let (distro, distro_evidence) = Distro::detect(host);
    let mut d = Discovery {
        root: host.root().to_path_buf(),
        distro,
        distro_evidence,
        flags_from: FlagSource::None,
        credential_config: None,
        bin_dir: None,
        kubelet_config: None,
        kubelet_config_dir: None,
        kubelet_binary: None,
        kubelet_version: None,
        flag_files: BTreeMap::new(),
        unit: Unit::load(host, "kubelet.service"),
        kubelet: None,
        version: None,
    };
    // The running process, else the unit.
    let mut flags = BTreeMap::new();
    let mut from = String::new();
    if let Some(process) = explicit.proc.as_deref().and_then(find_process) {
        from = format!("the command line of {} (pid {})", process.name, process.pid);
        flags = parse_flags(&process.args);
        if process.name == "kubelet" {
            d.kubelet_binary = process.exe.clone();
        }
        d.flags_from = FlagSource::Process {
            pid: process.pid,
            name: process.name,
        };
    } else if let Some(unit) = &d.unit {
        from = format!(
            "systemd unit {} ({})",
            unit.name,
            display_paths(&unit.files)
        );
        flags = parse_flags(&unit.args());
        d.kubelet_binary = unit.exec_start.first().map(|w| PathBuf::from(&w.text));
        d.flags_from = FlagSource::Unit {
            unit: unit.name.clone(),
            files: unit.files.clone(),
        };
    }
    if let Some(unit) = &d.unit {
        for word in &unit.exec_start {
            for flag in [CONFIG_FLAG, BIN_DIR_FLAG] {
                if word.text.starts_with(&format!("--{flag}"))
                    && let Some(var) = &word.var
                {
                    d.flag_files
                        .insert(flag.to_string(), (var.clone(), word.file.clone()));
                }
            }
        }
    }
    let pick = |explicit: &Option<PathBuf>, flag: &str, option: &str| -> Option<Found<PathBuf>> {
        if let Some(p) = explicit {
            return Some(Found::new(p.clone(), format!("--{option}")));
        }
        flags
            .get(flag)
            .map(|v| Found::new(PathBuf::from(v), format!("--{flag} in {from}")))
    };
    d.credential_config = pick(
        &explicit.credential_config,
        CONFIG_FLAG,
        "kubelet-credential-config",
    );
    d.bin_dir = pick(&explicit.bin_dir, BIN_DIR_FLAG, "kubelet-bin-dir");
    d.kubelet_config = pick(&explicit.kubelet_config, "config", "kubelet-config");
    d.kubelet_config_dir = flags
        .get("config-dir")
        .map(|v| Found::new(PathBuf::from(v), format!("--config-dir in {from}")));
    // k3s and RKE2 pass their built-in defaults only when both exist.
    if matches!(distro, Distro::K3s | Distro::Rke2) {
        let why = "k3s/RKE2 built-in default (k3s pkg/cli/cmds/agent.go)";
        if d.credential_config.is_none() {
            d.credential_config = Some(Found::new(PathBuf::from(distro::RANCHER_CONFIG), why));
        }
        if d.bin_dir.is_none() {
            d.bin_dir = Some(Found::new(PathBuf::from(distro::RANCHER_BIN_DIR), why));
        }
    }
    if let Some(file) = &d.kubelet_config {
        d.kubelet = KubeletConfig::read(
            &host.path(&file.value),
            d.kubelet_config_dir
                .as_ref()
                .map(|f| host.path(&f.value))
                .as_deref(),
        )
        .ok();
    }
    if let Some(v) = explicit.kubelet_version {
        d.version = Some(v);
        d.kubelet_version = Some(Found::new(v.to_string(), "--kubelet-version"));
    } else if let Some(binary) = d.kubelet_binary.clone()
        && let Some(v) = kubelet_version(host, &binary)
    {
        d.version = Some(v);
        d.kubelet_version = Some(Found::new(
            v.to_string(),
            format!("{} --version", binary.display()),
        ));
    }
    d
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(list: &[&str]) -> Vec<String> {
        list.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn flags_last_wins() {
        let f = parse_flags(&s(&[
            "--image-credential-provider-config=/a",
            "--v",
            "2",
            "--image-credential-provider-config",
            "/b",
            "--kubelet-arg=image-credential-provider-bin-dir=/bin",
            "--hairpin",
        ]));
        assert_eq!(f[CONFIG_FLAG], "/b");
        assert_eq!(f[BIN_DIR_FLAG], "/bin");
        assert_eq!(f["v"], "2");
        assert_eq!(f["hairpin"], "true");
    }
}
