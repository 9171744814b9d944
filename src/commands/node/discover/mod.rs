//! Finding the kubelet's real credential-provider set-up, each finding with
//! where it came from. In order: explicit flags; the running kubelet's
//! command line (the process systemd runs as the kubelet's unit, checked by
//! [`self::identify`], through `/proc`: the host's own with `hostPID`);
//! the systemd unit, its drop-ins and environment files; on k3s and RKE2
//! their `config.yaml` and `config.yaml.d/`; the distribution's known
//! defaults. A repeated flag counts once, the last, as in the kubelet
//! (pflag). Every file is read inside `--root`, bounded.

pub(crate) mod aks_windows;
pub(crate) mod distro;
pub(crate) mod identify;
pub(crate) mod systemd;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use self::distro::Distro;
use self::systemd::Unit;
use wicp_base::platform::Host;
use wicp_kubelet::config::configuration::{KubeletConfig, Version};

pub(crate) const CONFIG_FLAG: &str = "image-credential-provider-config";
pub(crate) const BIN_DIR_FLAG: &str = "image-credential-provider-bin-dir";

/// A value and how it was learned.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Found<T> {
    pub(crate) value: T,
    pub(crate) source: String,
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
pub(crate) struct Explicit {
    pub(crate) credential_config: Option<PathBuf>,
    pub(crate) bin_dir: Option<PathBuf>,
    pub(crate) kubelet_config: Option<PathBuf>,
    pub(crate) kubelet_version: Option<Version>,
    /// The proc file system to read; `None` skips process discovery.
    pub(crate) proc: Option<PathBuf>,
}

/// Where the kubelet's flags were read.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub(crate) enum FlagSource {
    Process {
        pid: u32,
        name: String,
    },
    Unit {
        unit: String,
        files: Vec<PathBuf>,
    },
    /// AKS Windows: `Kubernetes.Kubelet.ConfigArgs` in this file.
    ClusterConfig {
        file: PathBuf,
    },
    None,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Discovery {
    pub(crate) root: PathBuf,
    pub(crate) distro: Distro,
    pub(crate) distro_evidence: String,
    pub(crate) flags_from: FlagSource,
    pub(crate) credential_config: Option<Found<PathBuf>>,
    pub(crate) bin_dir: Option<Found<PathBuf>>,
    pub(crate) kubelet_config: Option<Found<PathBuf>>,
    pub(crate) kubelet_config_dir: Option<Found<PathBuf>>,
    pub(crate) kubelet_binary: Option<PathBuf>,
    pub(crate) kubelet_version: Option<Found<String>>,
    /// For each credential-provider flag found in the systemd set-up, the
    /// variable and file that carry it.
    pub(crate) flag_files: BTreeMap<String, (String, PathBuf)>,
    /// Processes named like the kubelet that were not taken, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) ignored_processes: Vec<String>,
    /// Why the node's process table cannot be trusted, when it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) refusal: Option<String>,
    /// Why the distribution's own record of the kubelet's flags could not
    /// be read (AKS Windows' kubeclusterconfig.json), when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) flags_unreadable: Option<String>,
    /// The kubelet flags the unit (and k3s's config files) give now: they
    /// differ from the running process's when a restart is pending.
    #[serde(skip)]
    pub(crate) unit_flags: BTreeMap<String, String>,
    /// k3s/RKE2 configuration files read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) rancher_config_files: Vec<PathBuf>,
    #[serde(skip)]
    pub(crate) unit: Option<Unit>,
    #[serde(skip)]
    pub(crate) kubelet: Option<KubeletConfig>,
    #[serde(skip)]
    pub(crate) version: Option<Version>,
}

impl Discovery {
    /// A discovery that found nothing (the root could not be opened).
    pub(crate) fn nothing(root: &Path) -> Discovery {
        Discovery {
            root: root.to_path_buf(),
            distro: Distro::Unknown,
            distro_evidence: String::new(),
            flags_from: FlagSource::None,
            credential_config: None,
            bin_dir: None,
            kubelet_config: None,
            kubelet_config_dir: None,
            kubelet_binary: None,
            kubelet_version: None,
            flag_files: BTreeMap::new(),
            ignored_processes: Vec::new(),
            refusal: None,
            flags_unreadable: None,
            unit_flags: BTreeMap::new(),
            rancher_config_files: Vec::new(),
            unit: None,
            kubelet: None,
            version: None,
        }
    }

    pub(crate) fn health_endpoint(&self) -> Option<(String, u16)> {
        match &self.kubelet {
            Some(k) => k.healthz(),
            None => KubeletConfig::default().healthz(),
        }
    }
}

/// Parses kubelet-style flags: `--name=value` or `--name value`; the last
/// of a repeated flag wins. k3s's `--kubelet-arg=name=value` counts as the
/// kubelet flag `name`.
pub(crate) fn parse_flags(args: &[String]) -> BTreeMap<String, String> {
    let mut flags = BTreeMap::new();
    for (name, value) in flag_pairs(args) {
        if name == "kubelet-arg" {
            if let Some((n, v)) = kubelet_arg(&value) {
                flags.insert(n, v);
            }
            continue;
        }
        flags.insert(name, value);
    }
    flags
}

/// Each flag of a command line as (name, value), in order: `--name=value`,
/// `--name value`, or `--name` alone (`true`).
fn flag_pairs(args: &[String]) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        let Some(body) = arg.strip_prefix("--") else {
            continue;
        };
        pairs.push(match body.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => match args.get(i) {
                Some(next) if !next.starts_with('-') => {
                    i += 1;
                    (body.to_string(), next.clone())
                }
                _ => (body.to_string(), "true".to_string()),
            },
        });
    }
    pairs
}

/// A `--kubelet-arg` value (`name=value`, or `--name=value`) as a flag.
fn kubelet_arg(value: &str) -> Option<(String, String)> {
    let (n, v) = value.trim_start_matches('-').split_once('=')?;
    Some((n.to_string(), v.to_string()))
}

/// The k3s/RKE2 configuration files as k3s reads them
/// (`pkg/configfilearg/parser.go`): `config.yaml`, then
/// `config.yaml.d/*.yaml|*.yml` in name order; a later key replaces an
/// earlier one, `key+:` appends to it; the result is a list of flags put
/// before the command line's own, so the command line wins.
fn rancher_config_flags(host: &Host, file: &Path) -> (Vec<String>, Vec<PathBuf>) {
    let mut files = Vec::new();
    if host.is_file(file) {
        files.push(file.to_path_buf());
    }
    let dot_d = PathBuf::from(format!("{}.d", file.display()));
    if let Ok(entries) = host.read_dir(&dot_d) {
        for (name, _) in entries {
            let name = name.to_string_lossy().into_owned();
            if name.ends_with(".yaml") || name.ends_with(".yml") {
                files.push(dot_d.join(name));
            }
        }
    }
    let mut order: Vec<String> = Vec::new();
    let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut read = Vec::new();
    for f in files {
        let Ok(Some(bytes)) = host.read_bytes(&f, wicp_base::yaml::MAX_BYTES) else {
            continue;
        };
        let Ok(yaml_serde::Value::Mapping(map)) = wicp_base::yaml::parse(&bytes) else {
            continue;
        };
        read.push(f);
        for (k, v) in map {
            let Some(key) = k.as_str() else { continue };
            let (key, append) = match key.strip_suffix('+') {
                Some(k) => (k.to_string(), true),
                None => (key.to_string(), false),
            };
            let list: Vec<String> = match v {
                yaml_serde::Value::Sequence(items) => items.iter().map(scalar).collect(),
                other => vec![scalar(&other)],
            };
            if !order.contains(&key) {
                order.push(key.clone());
            }
            let slot = values.entry(key).or_default();
            if !append {
                slot.clear();
            }
            slot.extend(list);
        }
    }
    let mut flags = Vec::new();
    for key in order {
        for v in values.get(&key).into_iter().flatten() {
            flags.push(format!("--{key}={v}"));
        }
    }
    (flags, read)
}

fn scalar(v: &yaml_serde::Value) -> String {
    match v {
        yaml_serde::Value::String(s) => s.clone(),
        yaml_serde::Value::Bool(b) => b.to_string(),
        yaml_serde::Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

/// The kubelet flags of a k3s/RKE2 command line: its own
/// `--image-credential-provider-*` flags, overridden by `--kubelet-arg`
/// values whatever their order (k3s applies extra kubelet args last).
fn rancher_kubelet_flags(args: &[String]) -> BTreeMap<String, String> {
    let mut own = parse_flags_plain(args);
    own.remove("kubelet-arg");
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for flag in [CONFIG_FLAG, BIN_DIR_FLAG] {
        if let Some(v) = own.get(flag) {
            out.insert(flag.to_string(), v.clone());
        }
    }
    out.extend(kubelet_args(args));
    out
}

/// `--kubelet-arg=name=value` (or `--kubelet-arg name=value`) pairs.
fn kubelet_args(args: &[String]) -> BTreeMap<String, String> {
    flag_pairs(args)
        .into_iter()
        .filter(|(name, _)| name == "kubelet-arg")
        .filter_map(|(_, value)| kubelet_arg(&value))
        .collect()
}

/// [`parse_flags`] without the k3s `--kubelet-arg` folding.
fn parse_flags_plain(args: &[String]) -> BTreeMap<String, String> {
    flag_pairs(args).into_iter().collect()
}

/// Runs discovery under `host`.
pub(crate) fn discover(host: &Host, explicit: &Explicit) -> Discovery {
    let (distro, distro_evidence) = Distro::detect(host);
    let unit = distro.units().iter().find_map(|u| Unit::load(host, u));
    let mut d = Discovery {
        distro,
        distro_evidence,
        unit,
        ..Discovery::nothing(host.root())
    };
    let rancher = matches!(distro, Distro::K3s | Distro::Rke2);
    let unit_args = d.unit.as_ref().map(Unit::args).unwrap_or_default();
    let unit_exe = d
        .unit
        .as_ref()
        .and_then(|u| u.exec_start.first())
        .map(|w| PathBuf::from(&w.text));
    let flags_of = |args: &[String]| kubelet_flags(host, distro, args);
    let (unit_flags, unit_files) = flags_of(&unit_args);
    d.unit_flags = unit_flags.clone();
    // The running process, when one checks out, else the unit.
    let mut flags = BTreeMap::new();
    let mut from = String::new();
    let identified = explicit
        .proc
        .as_deref()
        .map(|proc| identify::identify(host, proc, distro.units(), unit_exe.as_deref()))
        .unwrap_or_default();
    d.ignored_processes = identified.ignored;
    d.refusal = identified.refusal;
    if let Some(process) = identified.kubelet {
        from = format!(
            "the command line of {} (pid {}, {})",
            process.name, process.pid, process.evidence
        );
        let (f, files) = flags_of(&process.args);
        flags = f;
        d.rancher_config_files = files;
        if process.name == "kubelet" {
            d.kubelet_binary = Some(process.exe.clone());
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
        flags = unit_flags;
        d.rancher_config_files = unit_files;
        if !rancher {
            d.kubelet_binary = unit_exe.clone();
        }
        d.flags_from = FlagSource::Unit {
            unit: unit.name.clone(),
            files: unit.files.clone(),
        };
    } else if rancher {
        let (f, files) = flags_of(&[]);
        flags = f;
        d.rancher_config_files = files;
    } else if distro == Distro::AksWindows {
        (flags, from) = aks_windows_flags(host, explicit, &mut d);
    }
    if rancher && !d.rancher_config_files.is_empty() {
        from = format!("{from}, with {}", display_paths(&d.rancher_config_files));
    }
    if let Some(unit) = &d.unit {
        d.flag_files = flag_files(unit);
    }
    locate(&mut d, explicit, &flags, &from);
    d.kubelet = d
        .kubelet_config
        .as_ref()
        .and_then(|file| {
            let drop_ins = d.kubelet_config_dir.as_ref().map(|f| f.value.as_path());
            read_kubelet_config(host, &file.value, drop_ins).ok()
        })
        .map(|config| config.with_flags(&flags))
        .or_else(|| KubeletConfig::from_flags(&flags));
    kubelet_version(host, explicit, &mut d);
    d
}

/// AKS Windows: the kubelet's flags from `kubeclusterconfig.json`, with
/// where they were read, and its version from the same file (unless the
/// admin gave one); an unreadable file is noted in `d`.
fn aks_windows_flags(
    host: &Host,
    explicit: &Explicit,
    d: &mut Discovery,
) -> (BTreeMap<String, String>, String) {
    let cluster = match self::aks_windows::read(host) {
        Ok(cluster) => cluster,
        Err(why) => {
            d.flags_unreadable = Some(why);
            return (BTreeMap::new(), String::new());
        }
    };
    let file = PathBuf::from(distro::AKS_WINDOWS_CLUSTER_CONFIG);
    let from = format!("Kubernetes.Kubelet.ConfigArgs in {}", file.display());
    let flags = parse_flags(&cluster.kubelet_argv());
    d.unit_flags = flags.clone();
    d.flags_from = FlagSource::ClusterConfig { file };
    if explicit.kubelet_version.is_none()
        && let Some(v) = cluster.release.as_deref().and_then(Version::parse)
    {
        d.version = Some(v);
        d.kubelet_version = Some(Found::new(
            v.to_string(),
            format!(
                "Kubernetes.Source.Release in {}",
                distro::AKS_WINDOWS_CLUSTER_CONFIG
            ),
        ));
    }
    (flags, from)
}

/// The kubelet's flags as `args` (a unit's or a process's command line)
/// give them now, with, for k3s and RKE2, their config files' flags and the
/// files read.
fn kubelet_flags(
    host: &Host,
    distro: Distro,
    args: &[String],
) -> (BTreeMap<String, String>, Vec<PathBuf>) {
    if !matches!(distro, Distro::K3s | Distro::Rke2) {
        return (parse_flags(args), Vec::new());
    }
    let config_file = parse_flags_plain(args)
        .get("config")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(distro.rancher_config_file()));
    let (mut all, files) = rancher_config_flags(host, &config_file);
    all.extend(args.iter().skip_while(|a| !a.starts_with('-')).cloned());
    (rancher_kubelet_flags(&all), files)
}

/// Where the unit sets our two flags through an environment variable:
/// the variable and the file that sets it, by flag.
fn flag_files(unit: &Unit) -> BTreeMap<String, (String, PathBuf)> {
    let mut files = BTreeMap::new();
    for word in &unit.exec_start {
        for flag in [CONFIG_FLAG, BIN_DIR_FLAG] {
            if word.text.starts_with(&format!("--{flag}"))
                && let Some(var) = &word.var
            {
                files.insert(flag.to_string(), (var.clone(), word.file.clone()));
            }
        }
    }
    files
}

/// The files the kubelet reads, each with where it was found: the admin's
/// explicit option, else the kubelet's flag (`flags`, read from `from`),
/// else for k3s/RKE2 their built-in defaults.
fn locate(d: &mut Discovery, explicit: &Explicit, flags: &BTreeMap<String, String>, from: &str) {
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
    if matches!(d.distro, Distro::K3s | Distro::Rke2) {
        let why = "k3s/RKE2 built-in default (k3s pkg/cli/cmds/agent.go)";
        if d.credential_config.is_none() {
            d.credential_config = Some(Found::new(PathBuf::from(distro::RANCHER_CONFIG), why));
        }
        if d.bin_dir.is_none() {
            d.bin_dir = Some(Found::new(PathBuf::from(distro::RANCHER_BIN_DIR), why));
        }
    }
}

/// The kubelet's version: the admin's `--kubelet-version`, else what the
/// kubelet binary identified by its process or unit answers (never one
/// merely found, and not when identification was refused).
fn kubelet_version(host: &Host, explicit: &Explicit, d: &mut Discovery) {
    if let Some(v) = explicit.kubelet_version {
        d.version = Some(v);
        d.kubelet_version = Some(Found::new(v.to_string(), "--kubelet-version"));
    } else if d.refusal.is_none()
        && let Some(binary) = d.kubelet_binary.clone()
        && let Some(v) = identify::version_of(host, &binary).and_then(|t| Version::parse(&t))
    {
        d.version = Some(v);
        d.kubelet_version = Some(Found::new(
            v.to_string(),
            format!("{} --version", binary.display()),
        ));
    }
}

/// The KubeletConfiguration and its drop-ins (`*.conf` of `--config-dir`),
/// read inside the root with the bounded reader.
fn read_kubelet_config(
    host: &Host,
    file: &Path,
    drop_in_dir: Option<&Path>,
) -> wicp_base::error::Result<KubeletConfig> {
    let mut paths = vec![file.to_path_buf()];
    if let Some(dir) = drop_in_dir
        && let Ok(entries) = host.read_dir(dir)
    {
        for (name, _) in entries {
            if Path::new(&name).extension().is_some_and(|e| e == "conf") {
                paths.push(dir.join(name));
            }
        }
    }
    let mut documents = Vec::new();
    for p in paths {
        match host.read_bytes(&p, wicp_base::yaml::MAX_BYTES) {
            Ok(Some(bytes)) => documents.push((p, bytes)),
            Ok(None) => {
                return Err(wicp_base::error::Error::config(format!(
                    "the KubeletConfiguration {} does not exist",
                    p.display()
                )));
            }
            Err(e) => {
                return Err(wicp_base::error::Error::config(format!(
                    "cannot read the KubeletConfiguration {}: {e}",
                    p.display()
                )));
            }
        }
    }
    KubeletConfig::from_documents(documents)
}

/// The discovery part of a text report (install and doctor).
pub(crate) fn render(d: &Discovery) -> String {
    let mut t = format!("distribution: {} ({})\n", d.distro, d.distro_evidence);
    let line = |label: &str, f: &Option<Found<PathBuf>>| match f {
        Some(f) => format!("{label}: {} (from {})\n", f.value.display(), f.source),
        None => format!("{label}: not found\n"),
    };
    t.push_str(&line("credential-provider config", &d.credential_config));
    t.push_str(&line("credential-provider bin dir", &d.bin_dir));
    t.push_str(&line("KubeletConfiguration", &d.kubelet_config));
    if let Some(v) = &d.kubelet_version {
        t.push_str(&format!(
            "kubelet version: {} (from {})\n",
            v.value, v.source
        ));
    }
    for i in &d.ignored_processes {
        t.push_str(&format!("ignored: {i}\n"));
    }
    t
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

    #[test]
    fn k3s_config_files_then_the_command_line_then_kubelet_arg() {
        let (_dir, host) = wicp_base::platform::test_root(&[
            (
                "/etc/rancher/k3s/config.yaml",
                b"image-credential-provider-config: /a.yaml\nkubelet-arg:\n  - v=2\n",
            ),
            (
                "/etc/rancher/k3s/config.yaml.d/50-creds.yaml",
                b"image-credential-provider-bin-dir: /opt/bin\nkubelet-arg+:\n  - image-credential-provider-config=/from-kubelet-arg.yaml\n",
            ),
        ]);
        let (flags, files) = rancher_config_flags(&host, Path::new("/etc/rancher/k3s/config.yaml"));
        assert_eq!(files.len(), 2);
        let mut all = flags;
        all.push("--image-credential-provider-bin-dir=/cli/bin".into());
        let f = rancher_kubelet_flags(&all);
        assert_eq!(f[CONFIG_FLAG], "/from-kubelet-arg.yaml");
        assert_eq!(f[BIN_DIR_FLAG], "/cli/bin");
        assert_eq!(f["v"], "2");
    }

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
