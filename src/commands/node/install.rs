//! `node install`: discover, plan per distribution, merge, validate with
//! check-config, write atomically with backups, optionally restart the
//! kubelet and roll back if it does not come back healthy.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use yaml_serde::Value;

use super::discover::{self, BIN_DIR_FLAG, CONFIG_FLAG, Discovery};
use super::distro::{self, Distro};
use super::files::{self, Kind, Manifest, Record};
use super::host::Host;
use super::merge::{self, Format, Replace};
use super::systemd;
use super::{Target, print, rbac, restart};
use crate::commands::check_config::Finding;
use crate::commands::check_config::check::{Output, check_with};
use crate::commands::check_config::isolation::KubeletFacts;
use crate::error::{Error, Result};
use crate::options::BINARY;

/// The ready entry for each provider: the one in config-examples.
const AWS: &str =
    include_str!("../../../config-examples/aws-web-identity/credential-provider-config.yaml");
const AZURE: &str = include_str!("../../../config-examples/azure/credential-provider-config.yaml");
const GCP: &str =
    include_str!("../../../config-examples/gcp-federation/credential-provider-config.yaml");

/// Our own file in a config directory.
const DIR_FILE: &str = "wi-credential-provider";

/// The NodeConfig drop-in that keeps our flag across nodeadm's rewrites.
const NODEADM_DROP_IN: &str = "/etc/eks/nodeadm.d/90-wi-credential-provider.yaml";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadyProvider {
    Aws,
    Azure,
    Gcp,
}

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    #[command(flatten)]
    pub target: Target,

    /// Add the ready entry for this provider (the one in config-examples).
    /// Passthrough needs your registries: use --config.
    #[arg(long, value_enum, value_name = "PROVIDER")]
    pub provider: Vec<ReadyProvider>,

    /// Add the provider entries of this CredentialProviderConfig.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Remove another provider (NAME), or narrow its matchImages
    /// (NAME=PATTERN,PATTERN...), e.g. EKS's node-role ecr-credential-provider.
    #[arg(long, value_name = "NAME[=PATTERNS]")]
    pub replace: Vec<Replace>,

    /// The binary to install (default: this executable).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,

    /// Restart the kubelet if anything changed, wait for its health
    /// endpoint, and restore everything if it does not come back healthy.
    #[arg(long)]
    pub restart_kubelet: bool,

    /// How long to wait for the kubelet to be healthy after a restart.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    pub health_timeout: Duration,

    /// Show what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    crate::duration::parse(text).map_err(|e| e.to_string())
}

/// Where our entries go.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum ConfigTarget {
    /// Merge into `path`, starting from `base` (the same file, or on EKS
    /// nodeadm's config.json copied into our own file).
    File { path: PathBuf, base: PathBuf },
    /// A config directory: our own file in it.
    Directory { dir: PathBuf, path: PathBuf },
}

impl ConfigTarget {
    pub fn path(&self) -> &Path {
        match self {
            ConfigTarget::File { path, .. } | ConfigTarget::Directory { path, .. } => path,
        }
    }
}

/// A flag added to an environment file's variable.
#[derive(Clone, Debug, Serialize)]
pub struct FlagEdit {
    pub file: PathBuf,
    pub var: String,
    pub flags: Vec<(String, String)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub bin_dir: PathBuf,
    pub config: ConfigTarget,
    pub flag_edit: Option<FlagEdit>,
    /// An own file (host path, bytes) such as the nodeadm drop-in.
    #[serde(skip)]
    pub own_files: Vec<(PathBuf, Vec<u8>)>,
    pub own_file_paths: Vec<PathBuf>,
    pub notes: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub discovery: Option<Discovery>,
    pub plan: Option<Plan>,
    pub changes: Vec<String>,
    pub changed: bool,
    pub findings: Vec<Finding>,
    pub rbac: String,
    pub restart: Option<String>,
    pub error: Option<String>,
    pub dry_run: bool,
}

/// Our entries from --provider and --config.
pub fn our_entries(args: &Args) -> Result<Vec<Value>> {
    let mut entries = Vec::new();
    for p in &args.provider {
        let text = match p {
            ReadyProvider::Aws => AWS,
            ReadyProvider::Azure => AZURE,
            ReadyProvider::Gcp => GCP,
        };
        let doc = merge::parse(text.as_bytes(), Path::new("config-examples"))?;
        entries.extend(merge::providers(&doc));
    }
    if let Some(file) = &args.config {
        let bytes = std::fs::read(file)
            .map_err(|e| Error::config(format!("cannot read --config {}: {e}", file.display())))?;
        let doc = merge::parse(&bytes, file)?;
        let list = merge::providers(&doc);
        if list.is_empty() {
            return Err(Error::config(format!(
                "--config {} has no providers",
                file.display()
            )));
        }
        entries.extend(list);
    }
    if entries.is_empty() {
        return Err(Error::config("nothing to install")
            .fix("pass --provider aws|azure|gcp or --config FILE"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for e in &entries {
        let name = merge::entry_name(e);
        if !seen.insert(name.to_string()) {
            return Err(Error::config(format!(
                "the provider {name:?} is given twice"
            )));
        }
    }
    Ok(entries)
}

/// What to add where, when discovery found nothing to merge into.
fn nothing_found(d: &Discovery) -> Error {
    let how = match d.distro {
        Distro::Kubeadm | Distro::Unknown => format!(
            "add `--{CONFIG_FLAG}={} --{BIN_DIR_FLAG}={}` to KUBELET_EXTRA_ARGS in /etc/default/kubelet (deb) or /etc/sysconfig/kubelet (rpm), \
             or pass --kubelet-credential-config and --kubelet-bin-dir",
            distro::OWN_CONFIG,
            distro::OWN_BIN_DIR
        ),
        Distro::EksAl2023 => format!(
            "nodeadm should have set --{CONFIG_FLAG}={}: check /etc/eks/kubelet/environment",
            distro::EKS_CONFIG
        ),
        Distro::Aks => "AKS sets the flags in KUBELET_FLAGS in /etc/default/kubelet when the cluster enables credential providers".into(),
        Distro::GkeCos => "GKE sets the flags in KUBELET_OPTS in /etc/default/kubelet".into(),
        _ => "pass --kubelet-credential-config and --kubelet-bin-dir".into(),
    };
    Error::config(format!(
        "found no kubelet credential-provider set-up on {} (looked at the kubelet process, the systemd unit and the distribution's defaults); nothing was changed",
        d.distro
    ))
    .fix(how)
}

/// The env file and variable a kubeadm node's user flags go in.
fn kubeadm_extra_args(host: &Host, d: &Discovery) -> Option<FlagEdit> {
    let unit = d.unit.as_ref()?;
    let file = unit
        .env_files
        .iter()
        .find(|f| f.as_path() == Path::new("/etc/default/kubelet") && host.path(f).exists())
        .or_else(|| {
            unit.env_files
                .iter()
                .find(|f| f.as_path() == Path::new("/etc/sysconfig/kubelet"))
        })
        .or_else(|| {
            unit.env_files
                .iter()
                .find(|f| f.as_path() == Path::new("/etc/default/kubelet"))
        })?;
    Some(FlagEdit {
        file: file.clone(),
        var: "KUBELET_EXTRA_ARGS".into(),
        flags: Vec::new(),
    })
}

pub fn plan(host: &Host, d: &Discovery, replace: &[Replace]) -> Result<Plan> {
    if let Some(route) = d.distro.refusal() {
        return Err(Error::config(format!("cannot install on {}", d.distro)).fix(route));
    }
    let mut notes = Vec::new();
    if let Some(r) = d.distro.rewritten_by() {
        notes.push(r.to_string());
    }
    let found_config = d.credential_config.as_ref().map(|f| f.value.clone());
    match d.distro {
        Distro::EksAl2023 => {
            let bin_dir = d
                .bin_dir
                .as_ref()
                .map_or(PathBuf::from(distro::EKS_PROVIDER_DIR), |f| f.value.clone());
            let directory_ok = d.version.is_some_and(|v| {
                v >= crate::commands::check_config::kubelet_config::DIRECTORY_CONFIG_SINCE
            }) && replace.is_empty();
            let nodeadm_config = PathBuf::from(distro::EKS_CONFIG);
            let (config, flag_value) = if directory_ok {
                let dir = PathBuf::from(distro::EKS_PROVIDER_DIR);
                notes.push(format!(
                    "kubelet {} reads a config directory: the kubelet reads nodeadm's config.json and our own file in {}",
                    d.version.map(|v| v.to_string()).unwrap_or_default(),
                    dir.display()
                ));
                (
                    ConfigTarget::Directory {
                        path: dir.join(format!("{DIR_FILE}.json")),
                        dir: dir.clone(),
                    },
                    dir,
                )
            } else {
                let own = PathBuf::from(distro::EKS_OWN_CONFIG);
                notes.push(format!(
                    "our own complete config {} (nodeadm's entries copied in{}), outside the file nodeadm rewrites at boot",
                    own.display(),
                    if replace.is_empty() { "" } else { ", --replace applied" }
                ));
                let base = if host.path(&own).exists() {
                    own.clone()
                } else {
                    nodeadm_config
                };
                (
                    ConfigTarget::File {
                        path: own.clone(),
                        base,
                    },
                    own,
                )
            };
            let flag = format!("--{CONFIG_FLAG}={}", flag_value.display());
            let drop_in = format!(
                "# Written by `wi-credential-provider node install`: nodeadm merges this\n\
                 # NodeConfig over the user data at every boot and appends these flags\n\
                 # last, so the kubelet keeps reading this plugin's config.\n\
                 apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    flags:\n      - {flag}\n"
            );
            Ok(Plan {
                bin_dir,
                config,
                flag_edit: Some(FlagEdit {
                    file: PathBuf::from(distro::EKS_ENV_FILE),
                    var: distro::EKS_ENV_VAR.into(),
                    flags: vec![(CONFIG_FLAG.into(), flag_value.display().to_string())],
                }),
                own_files: vec![(PathBuf::from(NODEADM_DROP_IN), drop_in.into_bytes())],
                own_file_paths: vec![PathBuf::from(NODEADM_DROP_IN)],
                notes,
            })
        }
        Distro::K3s | Distro::Rke2 => {
            let config = found_config.unwrap_or_else(|| PathBuf::from(distro::RANCHER_CONFIG));
            if host.path(&config).is_dir() {
                return Err(Error::config(format!(
                    "{} is a directory: k3s/RKE2 pass the credential-provider flags only when the config is a file, so the kubelet would ignore it",
                    config.display()
                ))
                .fix("replace the directory by one config file, or pass the flag with kubelet-arg (kubelet 1.34+)"));
            }
            let bin_dir = d
                .bin_dir
                .as_ref()
                .map_or(PathBuf::from(distro::RANCHER_BIN_DIR), |f| f.value.clone());
            Ok(Plan {
                bin_dir,
                config: ConfigTarget::File {
                    path: config.clone(),
                    base: config,
                },
                flag_edit: None,
                own_files: Vec::new(),
                own_file_paths: Vec::new(),
                notes,
            })
        }
        _ => {
            let (config, bin_dir, flag_edit) = match (found_config, d.bin_dir.as_ref()) {
                (Some(c), Some(b)) => (c, b.value.clone(), None),
                (Some(_), None) | (None, Some(_)) => {
                    return Err(Error::config(format!(
                        "the kubelet has only one of --{CONFIG_FLAG} and --{BIN_DIR_FLAG}; it needs both"
                    ))
                    .fix("pass the other with --kubelet-credential-config or --kubelet-bin-dir"));
                }
                (None, None) if d.distro == Distro::Kubeadm => {
                    let Some(mut edit) = kubeadm_extra_args(host, d) else {
                        return Err(nothing_found(d));
                    };
                    edit.flags = vec![
                        (CONFIG_FLAG.into(), distro::OWN_CONFIG.into()),
                        (BIN_DIR_FLAG.into(), distro::OWN_BIN_DIR.into()),
                    ];
                    notes.push(format!(
                        "the kubelet had no credential-provider flags: adding them to {} in {}",
                        edit.var,
                        edit.file.display()
                    ));
                    (
                        PathBuf::from(distro::OWN_CONFIG),
                        PathBuf::from(distro::OWN_BIN_DIR),
                        Some(edit),
                    )
                }
                (None, None) => return Err(nothing_found(d)),
            };
            let target = if host.path(&config).is_dir() {
                if !replace.is_empty() {
                    return Err(Error::config(
                        "--replace cannot change the other files of a config directory",
                    )
                    .fix("edit or remove the other provider's file yourself"));
                }
                ConfigTarget::Directory {
                    path: config.join(format!("{DIR_FILE}.yaml")),
                    dir: config,
                }
            } else {
                ConfigTarget::File {
                    path: config.clone(),
                    base: config,
                }
            };
            Ok(Plan {
                bin_dir,
                config: target,
                flag_edit,
                own_files: Vec::new(),
                own_file_paths: Vec::new(),
                notes,
            })
        }
    }
}

/// The new bytes of an environment file with `flags` appended to `var`,
/// and the exact text inserted; `None` when the flags already hold.
pub fn append_flags(text: &str, var: &str, flags: &[(String, String)]) -> Option<(String, String)> {
    let lines: Vec<&str> = text.split('\n').collect();
    let index = lines
        .iter()
        .rposition(|l| l.trim_start().starts_with(&format!("{var}=")));
    let current = index
        .and_then(|i| lines.get(i))
        .map(|l| systemd::parse_env_file(l))
        .and_then(|v| v.into_iter().next())
        .map(|(_, v)| v)
        .unwrap_or_default();
    let have = discover::parse_flags(&systemd::split_words(&current));
    let missing: Vec<&(String, String)> = flags
        .iter()
        .filter(|(f, v)| have.get(f) != Some(v))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let words = missing
        .iter()
        .map(|(f, v)| format!("--{f}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    match index {
        Some(i) => {
            let line = lines.get(i).copied().unwrap_or("");
            let trimmed = line.trim_end();
            let (new_line, inserted) = if let Some(body) = trimmed.strip_suffix('"') {
                let sep = if body.ends_with('=') || body.ends_with('"') {
                    ""
                } else {
                    " "
                };
                let ins = format!("{sep}{words}");
                (format!("{body}{ins}\""), ins)
            } else {
                let sep = if trimmed.ends_with('=') { "" } else { " " };
                let ins = format!("{sep}{words}");
                (format!("{trimmed}{ins}"), ins)
            };
            let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
            if let Some(slot) = out.get_mut(i) {
                *slot = new_line;
            }
            Some((out.join("\n"), inserted))
        }
        None => {
            let sep = if text.is_empty() || text.ends_with('\n') {
                ""
            } else {
                "\n"
            };
            let ins = format!("{sep}{var}=\"{words}\"\n");
            Some((format!("{text}{ins}"), ins))
        }
    }
}

/// The staged copy check-config runs on: the merged config (and, for a
/// directory, the other files beside it) and a bin dir of symlinks.
struct Stage {
    dir: PathBuf,
    config: PathBuf,
    bin_dir: PathBuf,
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A private temporary directory (0700), without a dependency for it.
fn private_temp_dir() -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let dir =
        std::env::temp_dir().join(format!("wicp-node-install.{}.{nanos}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| Error::config(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

fn stage(host: &Host, plan: &Plan, bytes: &[u8], names: &[String], binary: &Path) -> Result<Stage> {
    let root = private_temp_dir()?;
    let mut stage = Stage {
        config: PathBuf::new(),
        bin_dir: root.join("bin"),
        dir: root,
    };
    let io =
        |e: std::io::Error| Error::config(format!("cannot stage the config for checking: {e}"));
    let config = match &plan.config {
        ConfigTarget::File { path, .. } => {
            let p = stage.dir.join(path.file_name().unwrap_or_default());
            std::fs::write(&p, bytes).map_err(io)?;
            p
        }
        ConfigTarget::Directory { dir: real, path } => {
            let staged = stage.dir.join("config.d");
            std::fs::create_dir(&staged).map_err(io)?;
            if let Ok(entries) = std::fs::read_dir(host.path(real)) {
                for e in entries.flatten() {
                    let name = e.file_name();
                    if e.file_type().is_ok_and(|t| !t.is_dir()) {
                        let _ = std::fs::copy(e.path(), staged.join(&name));
                    }
                }
            }
            std::fs::write(staged.join(path.file_name().unwrap_or_default()), bytes).map_err(io)?;
            staged
        }
    };
    let bin = stage.bin_dir.clone();
    std::fs::create_dir(&bin).map_err(io)?;
    let binary = std::fs::canonicalize(binary).unwrap_or_else(|_| binary.to_path_buf());
    if let Ok(entries) = std::fs::read_dir(host.path(&plan.bin_dir)) {
        for e in entries.flatten() {
            let _ = std::os::unix::fs::symlink(e.path(), bin.join(e.file_name()));
        }
    }
    for name in names {
        let link = bin.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&binary, &link).map_err(io)?;
    }
    stage.config = config;
    Ok(stage)
}

/// Runs `binary --version`: a binary for another architecture, or a
/// corrupt copy, must not be installed.
fn answers_version(binary: &Path) -> Result<()> {
    let out = std::process::Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|e| {
            Error::config(format!(
                "the binary {} cannot run here: {e}",
                binary.display()
            ))
            .fix("use the binary built for this node's architecture")
        })?;
    if !out.status.success() || !String::from_utf8_lossy(&out.stdout).starts_with(BINARY) {
        return Err(Error::config(format!(
            "{} --version did not answer as {BINARY} does",
            binary.display()
        )));
    }
    Ok(())
}

/// Installs the binary (atomically, checked with --version before it is
/// put in place) and one symlink per provider name.
fn install_binary(
    host: &Host,
    manifest: &mut Manifest,
    bin_dir: &Path,
    source: &Path,
    names: &[String],
    changes: &mut Vec<String>,
) -> Result<()> {
    let dest = bin_dir.join(BINARY);
    let local = host.path(&dest);
    let bytes = std::fs::read(source)
        .map_err(|e| Error::config(format!("cannot read the binary {}: {e}", source.display())))?;
    let same =
        std::fs::read(&local).is_ok_and(|old| old == bytes) && files::mode_of(&local) & 0o111 != 0;
    if !same {
        let dir = host.path(bin_dir);
        std::fs::create_dir_all(&dir).map_err(|e| files::io_error("create", &dir, e))?;
        let tmp = dir.join(format!(".{BINARY}.wicp-tmp.{}", std::process::id()));
        files::atomic_write(&tmp, &bytes, 0o755)?;
        if let Err(e) = answers_version(&tmp) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let _ = std::fs::remove_file(&tmp);
        let record = files::replace(host, manifest, &dest, Kind::Own, &bytes)?;
        std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o755)).map_err(|e| {
            Error::config(format!("cannot make {} executable: {e}", local.display()))
        })?;
        upsert(manifest, record);
        changes.push(format!("installed {}", dest.display()));
    }
    for name in names.iter().filter(|n| n.as_str() != BINARY) {
        let link = bin_dir.join(name);
        let local_link = host.path(&link);
        match std::fs::read_link(&local_link) {
            Ok(target) if target == Path::new(BINARY) => continue,
            Ok(_) | Err(_)
                if std::fs::symlink_metadata(&local_link).is_ok()
                    && !manifest.binaries.contains(&link) =>
            {
                return Err(Error::config(format!(
                    "{} exists and is not a symlink to {BINARY}; not replacing another provider's executable",
                    local_link.display()
                ))
                .fix("rename our entry, or remove that file if it is a leftover"));
            }
            _ => {}
        }
        let tmp = host.path(&bin_dir.join(format!(".{name}.wicp-tmp")));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(BINARY, &tmp)
            .and_then(|()| std::fs::rename(&tmp, &local_link))
            .map_err(|e| Error::config(format!("cannot link {}: {e}", local_link.display())))?;
        if !manifest.binaries.contains(&link) {
            manifest.binaries.push(link.clone());
        }
        changes.push(format!("linked {} -> {BINARY}", link.display()));
    }
    Ok(())
}

fn upsert(manifest: &mut Manifest, record: Record) {
    match manifest.files.iter_mut().find(|r| r.path == record.path) {
        Some(slot) => {
            let backup = slot.backup.clone();
            *slot = Record { backup, ..record };
        }
        None => manifest.files.push(record),
    }
}

pub fn run(args: &Args) -> ExitCode {
    let mut report = Report {
        dry_run: args.dry_run,
        ..Report::default()
    };
    let code = match install(args, &mut report) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report.error = Some(e.to_string());
            ExitCode::FAILURE
        }
    };
    let text = match args.target.output {
        Output::Json => serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
        Output::Text => render(&report),
    };
    if !print(&text) {
        return ExitCode::from(2);
    }
    if let Some(e) = &report.error {
        crate::log::write(crate::log::Level::Error, format_args!("node install: {e}"));
    }
    code
}

fn install(args: &Args, report: &mut Report) -> Result<()> {
    let host = args.target.host();
    let d = discover::discover(&host, &args.target.explicit());
    report.discovery = Some(d.clone());
    let ours = our_entries(args)?;
    let names: Vec<String> = ours
        .iter()
        .map(|e| merge::entry_name(e).to_string())
        .collect();
    let plan = plan(&host, &d, &args.replace)?;
    report.plan = Some(plan.clone());
    let binary = match &args.binary {
        Some(b) => b.clone(),
        None => std::env::current_exe().map_err(|e| {
            Error::config(format!("cannot find this executable: {e}")).fix("pass --binary PATH")
        })?,
    };

    // The merged config, in the file's own format.
    let target = plan.config.path().to_path_buf();
    let (base, replace) = match &plan.config {
        ConfigTarget::File { base, .. } => (base.clone(), args.replace.as_slice()),
        ConfigTarget::Directory { path, .. } => (path.clone(), &[][..]),
    };
    let existing = match std::fs::read(host.path(&base)) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(Error::config(format!(
                "cannot read {}: {e}",
                base.display()
            )));
        }
    };
    let merged = merge::merge(
        existing.as_deref(),
        &base,
        Format::of(&target),
        &ours,
        replace,
    )?;
    let new_bytes = match (&merged.bytes, base == target) {
        (Some(b), _) => Some(b.clone()),
        (None, true) => None,
        // A copy into our own file: written even if the meaning is the same.
        (None, false) => Some(merge::render(&merged.value, Format::of(&target))?),
    };
    let config_bytes = new_bytes.clone().or(existing.clone()).unwrap_or_default();
    report.rbac = rbac::manifest(&rbac::audiences(&merge::providers(&merged.value)));

    // Validate before anything is written.
    let staged = stage(&host, &plan, &config_bytes, &names, &binary)?;
    let facts = KubeletFacts {
        config: d.kubelet.clone(),
        version: d.version,
    };
    let checked = check_with(&staged.config, Some(&staged.bin_dir), &facts);
    let stage_dir = staged
        .config
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    report.findings = checked
        .findings
        .iter()
        .cloned()
        .map(|mut f| {
            f.file = unstage(&f.file, &stage_dir, &staged.config, &plan);
            f.file = host_path(&host, &f.file);
            f
        })
        .collect();
    if !checked.ok() {
        return Err(Error::config(format!(
            "the merged config has {} error(s) the kubelet would trip on (listed above); nothing was written",
            checked.errors
        ))
        .fix("fix the entries, or pass --replace for a provider that overlaps ours"));
    }
    answers_version(&binary)?;

    let edit = match &plan.flag_edit {
        Some(edit) => {
            let text = std::fs::read_to_string(host.path(&edit.file)).unwrap_or_default();
            append_flags(&text, &edit.var, &edit.flags).map(|(t, ins)| (edit.clone(), t, ins))
        }
        None => None,
    };
    let own: Vec<(PathBuf, Vec<u8>)> = plan
        .own_files
        .iter()
        .filter(|(p, b)| std::fs::read(host.path(p)).ok().as_ref() != Some(b))
        .cloned()
        .collect();

    if args.dry_run {
        report.changes = merged
            .changes
            .iter()
            .map(|c| format!("would: {c} in {}", target.display()))
            .collect();
        if let Some((e, _, ins)) = &edit {
            report.changes.push(format!(
                "would: append{ins} to {} in {}",
                e.var,
                e.file.display()
            ));
        }
        for (p, _) in &own {
            report.changes.push(format!("would: write {}", p.display()));
        }
        report.changed = !report.changes.is_empty();
        return Ok(());
    }

    let mut manifest = Manifest::read(&host)?.unwrap_or_default();
    let before = manifest.clone();
    // What every file this run may write holds now, so a rollback puts back
    // exactly these bytes, whether this is the first install or a later one.
    let mut touched = vec![plan.bin_dir.join(BINARY), target.clone()];
    touched.extend(own.iter().map(|(p, _)| p.clone()));
    touched.extend(edit.iter().map(|(e, _, _)| e.file.clone()));
    let previous: Vec<Previous> = touched
        .into_iter()
        .map(|path| {
            let local = host.path(&path);
            Previous {
                bytes: std::fs::read(&local).ok(),
                mode: files::mode_of(&local),
                path,
            }
        })
        .collect();
    let mut changes = Vec::new();
    let result = (|| -> Result<()> {
        install_binary(
            &host,
            &mut manifest,
            &plan.bin_dir,
            &binary,
            &names,
            &mut changes,
        )?;
        if let Some(bytes) = &new_bytes {
            let mut record = files::replace(&host, &manifest, &target, Kind::Config, bytes)?;
            record.entries = names.clone();
            upsert(&mut manifest, record);
            for c in &merged.changes {
                changes.push(format!("{c} in {}", target.display()));
            }
            if merged.changes.is_empty() {
                changes.push(format!("wrote {}", target.display()));
            }
        }
        for (path, bytes) in &own {
            let record = files::replace(&host, &manifest, path, Kind::Own, bytes)?;
            upsert(&mut manifest, record);
            changes.push(format!("wrote {}", path.display()));
        }
        if let Some((e, text, inserted)) = &edit {
            let mut record = files::replace(
                &host,
                &manifest,
                &e.file,
                Kind::Environment,
                text.as_bytes(),
            )?;
            let previous = before
                .record(&e.file)
                .map(|r| r.appended.clone())
                .unwrap_or_default();
            record.appended = format!("{previous}{inserted}");
            upsert(&mut manifest, record);
            changes.push(format!(
                "appended {:?} to {} in {}",
                inserted.trim(),
                e.var,
                e.file.display()
            ));
        }
        Ok(())
    })();
    if !changes.is_empty() || result.is_ok() {
        manifest.write(&host)?;
    }
    result?;
    report.changed = !changes.is_empty();
    report.changes = changes;

    if args.restart_kubelet {
        if !report.changed {
            report.restart = Some("nothing changed; the kubelet was left running".into());
        } else {
            let run = Run {
                before: &before,
                after: &manifest,
                previous: &previous,
            };
            restart_or_roll_back(&host, &d, &run, args.health_timeout, report)?;
        }
    } else if report.changed {
        report.restart = Some("the kubelet reads its credential-provider config only at start: restart it (or pass --restart-kubelet)".into());
    }
    Ok(())
}

/// A local path under the root, shown as the node's path.
pub fn host_path(host: &Host, file: &str) -> String {
    match Path::new(file).strip_prefix(host.root()) {
        Ok(rest) if !host.is_local() => Path::new("/").join(rest).display().to_string(),
        _ => file.to_string(),
    }
}

/// Maps a staged file name in a finding back to the node path.
fn unstage(file: &str, stage_dir: &Path, staged_config: &Path, plan: &Plan) -> String {
    let f = Path::new(file);
    if f == staged_config {
        return match &plan.config {
            ConfigTarget::File { path, .. } => path.display().to_string(),
            ConfigTarget::Directory { dir, .. } => dir.display().to_string(),
        };
    }
    let real_dir = match &plan.config {
        ConfigTarget::Directory { dir, .. } => dir.clone(),
        ConfigTarget::File { path, .. } => path.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    f.strip_prefix(staged_config)
        .or_else(|_| f.strip_prefix(stage_dir))
        .map(|rest| real_dir.join(rest).display().to_string())
        .unwrap_or_else(|_| file.to_string())
}

/// A file's bytes and mode before this run (`None`: it did not exist).
struct Previous {
    path: PathBuf,
    bytes: Option<Vec<u8>>,
    mode: u32,
}

/// What a rollback needs: the manifest before and after, the files before.
struct Run<'a> {
    before: &'a Manifest,
    after: &'a Manifest,
    previous: &'a [Previous],
}

fn restart_or_roll_back(
    host: &Host,
    d: &Discovery,
    run: &Run<'_>,
    timeout: Duration,
    report: &mut Report,
) -> Result<()> {
    let unit = restart::unit_to_restart(host, d.distro.units());
    restart::systemctl(host, &["restart", unit])?;
    let Some((address, port)) = d.health_endpoint() else {
        report.restart = Some(format!(
            "restarted {unit}; its health endpoint is off (healthzPort: 0), so health was not checked"
        ));
        return Ok(());
    };
    match restart::wait_healthy(&address, port, timeout) {
        Ok(()) => {
            report.restart = Some(format!(
                "restarted {unit}; healthy at http://{address}:{port}/healthz"
            ));
            Ok(())
        }
        Err(why) => {
            let restored = roll_back(host, run);
            let again = restart::systemctl(host, &["restart", unit]);
            let health = restart::wait_healthy(&address, port, timeout);
            report.restart = Some(format!(
                "restarted {unit}, which did not come back healthy ({why}); rolled back ({restored}) and restarted it again: {}",
                match (again, health) {
                    (Ok(()), Ok(())) => "healthy again".to_string(),
                    (Err(e), _) => format!("restart failed: {e}"),
                    (Ok(()), Err(e)) => format!("still unhealthy: {e}"),
                }
            ));
            Err(Error::config(format!(
                "the kubelet was not healthy after the install ({why}); the previous files were restored"
            ))
            .fix("run `wi-credential-provider node doctor` and the kubelet's journal (journalctl -u kubelet) to see why"))
        }
    }
}

/// Puts back every file this run changed, byte for byte, removes what it
/// created, and restores the manifest.
fn roll_back(host: &Host, run: &Run<'_>) -> String {
    let mut done = Vec::new();
    for p in run.previous.iter().rev() {
        let local = host.path(&p.path);
        let now = std::fs::read(&local).ok();
        if now == p.bytes {
            continue;
        }
        let result = match &p.bytes {
            Some(bytes) => files::atomic_write(&local, bytes, p.mode),
            None => std::fs::remove_file(&local).map_err(|e| files::io_error("remove", &local, e)),
        };
        match result {
            Ok(()) => done.push(format!("restored {}", p.path.display())),
            Err(e) => done.push(format!("FAILED to restore {}: {e}", p.path.display())),
        }
    }
    // Backups made by this run (a first install) are no longer needed.
    for record in &run.after.files {
        if run.before.record(&record.path).is_none()
            && let Some(b) = &record.backup
        {
            let _ = std::fs::remove_file(host.path(b));
        }
    }
    for link in run
        .after
        .binaries
        .iter()
        .filter(|l| !run.before.binaries.contains(l))
    {
        let _ = std::fs::remove_file(host.path(link));
    }
    let _ = if run.before.files.is_empty() && run.before.binaries.is_empty() {
        Manifest::remove(host)
    } else {
        run.before.write(host)
    };
    done.join(", ")
}

fn render(report: &Report) -> String {
    let mut t = String::new();
    if let Some(d) = &report.discovery {
        t.push_str(&super::doctor::render_discovery(d));
    }
    if let Some(p) = &report.plan {
        t.push_str(&format!("bin dir: {}\n", p.bin_dir.display()));
        match &p.config {
            ConfigTarget::File { path, base } if path == base => {
                t.push_str(&format!("config: merge into {}\n", path.display()))
            }
            ConfigTarget::File { path, base } => t.push_str(&format!(
                "config: {} (a copy of {} with our entries)\n",
                path.display(),
                base.display()
            )),
            ConfigTarget::Directory { dir, path } => t.push_str(&format!(
                "config: directory {}, our own file {}\n",
                dir.display(),
                path.display()
            )),
        }
        for n in &p.notes {
            t.push_str(&format!("note: {n}\n"));
        }
    }
    for f in &report.findings {
        t.push_str(&format!("{f} [{}]\n", f.rule));
    }
    for c in &report.changes {
        t.push_str(&format!("{c}\n"));
    }
    if report.error.is_none() && !report.changed {
        t.push_str("nothing to change: the node already has this installation\n");
    }
    if let Some(r) = &report.restart {
        t.push_str(&format!("{r}\n"));
    }
    if let Some(e) = &report.error {
        t.push_str(&format!("error: {e}\n"));
    }
    if !report.rbac.is_empty() && report.error.is_none() {
        t.push_str("\nThe kubelets need this RBAC to request tokens for the audiences (kubectl apply -f -):\n---\n");
        t.push_str(&report.rbac);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(f, v)| (f.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn appends_to_an_empty_unquoted_value() {
        let (text, ins) = append_flags(
            "KUBELET_EXTRA_ARGS=\n",
            "KUBELET_EXTRA_ARGS",
            &flags(&[("a", "1"), ("b", "2")]),
        )
        .unwrap();
        assert_eq!(text, "KUBELET_EXTRA_ARGS=--a=1 --b=2\n");
        assert_eq!(ins, "--a=1 --b=2");
    }

    #[test]
    fn appends_inside_quotes_and_without_a_trailing_newline() {
        let (text, ins) =
            append_flags("X=1\nARGS=\"--v=2\"", "ARGS", &flags(&[("a", "1")])).unwrap();
        assert_eq!(text, "X=1\nARGS=\"--v=2 --a=1\"");
        assert_eq!(ins, " --a=1");
        let (text, _) = append_flags(
            "NODEADM_KUBELET_ARGS=--a=0 --v=2",
            "NODEADM_KUBELET_ARGS",
            &flags(&[("a", "1")]),
        )
        .unwrap();
        assert_eq!(text, "NODEADM_KUBELET_ARGS=--a=0 --v=2 --a=1");
    }

    #[test]
    fn nothing_when_the_last_value_already_holds() {
        assert!(append_flags("ARGS=--a=0 --a=1\n", "ARGS", &flags(&[("a", "1")])).is_none());
        assert!(append_flags("ARGS=--a 1\n", "ARGS", &flags(&[("a", "1")])).is_none());
    }

    #[test]
    fn adds_a_missing_variable() {
        let (text, ins) = append_flags("OTHER=1", "ARGS", &flags(&[("a", "1")])).unwrap();
        assert_eq!(text, "OTHER=1\nARGS=\"--a=1\"\n");
        assert_eq!(ins, "\nARGS=\"--a=1\"\n");
    }

    #[test]
    fn replace_values_parse() {
        let r: Replace = "ecr-credential-provider=a.io, b.io".parse().unwrap();
        assert_eq!(
            r.narrow_to,
            Some(vec!["a.io".to_string(), "b.io".to_string()])
        );
        assert!("x=".parse::<Replace>().is_err());
        assert!("a/b".parse::<Replace>().is_err());
    }
}
