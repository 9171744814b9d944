//! `node install`: discover, plan per distribution, merge, validate with
//! check-config, write crash-safe with backups, optionally restart the
//! kubelet and roll back if it does not come back healthy. The parts:
//! [`crate::commands::node::plan`] (what changes where), [`crate::commands::node::plan::stage`] (the copy
//! check-config validates), [`crate::commands::node::apply`] (the writes and the
//! rollback); this module runs them in order and reports.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Target;
use crate::commands::check_config::check::{Output, check_with};
use crate::commands::check_config::isolation::KubeletFacts;
use crate::commands::node::apply::files::{self, Kind, Snapshot};
use crate::commands::node::apply::restart;
use crate::commands::node::apply::{self, Applied, Change};
use crate::commands::node::discover::{self, Discovery};
use crate::commands::node::plan::stage::{self, Stage};
use crate::commands::node::plan::{self, ConfigTarget, Plan};
use crate::commands::node::render::rbac;
use crate::options::BINARY;
use wicp_base::error::{Error, Result};
use wicp_base::platform::Host;
use wicp_kubelet::config::Finding;
use wicp_kubelet::config::merge::{self, Format, Replace};
use wicp_net::inputs::Env;

/// Where a failed attempt is remembered, so that the DaemonSet's retries
/// do not restart the kubelet again and again with the same change.
pub(crate) const FAILED: &str = "/var/lib/wi-credential-provider/node-install.failed";

#[derive(clap::Args, Clone, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) target: Target,

    #[command(flatten)]
    pub(crate) entries: super::Entries,

    /// Remove another provider (NAME), or narrow its matchImages
    /// (NAME=PATTERN,PATTERN...), e.g. EKS's node-role ecr-credential-provider.
    #[arg(long = wicp_kubelet::config::merge::REPLACE.long, value_name = "NAME[=PATTERNS]")]
    pub(crate) replace: Vec<Replace>,

    /// The binary to install (default: this executable).
    #[arg(long, value_name = "PATH")]
    pub(crate) binary: Option<PathBuf>,

    /// Restart the kubelet if anything changed, wait for its health
    /// endpoint (from the host's network namespace), and restore
    /// everything, once, if it does not come back healthy.
    #[arg(long)]
    pub(crate) restart_kubelet: bool,

    /// How long to wait for the kubelet to be healthy after a restart.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    pub(crate) health_timeout: Duration,

    /// Try again a change that made the kubelet unhealthy before (install
    /// remembers such a change and refuses to restart the kubelet with it
    /// again, so a retrying DaemonSet cannot restart-loop a node).
    #[arg(long)]
    pub(crate) retry: bool,

    /// Show what would change; write nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    wicp_base::duration::parse(text).map_err(|e| e.to_string())
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Report {
    pub(crate) discovery: Option<Discovery>,
    pub(crate) plan: Option<Plan>,
    pub(crate) changes: Vec<String>,
    pub(crate) changed: bool,
    pub(crate) findings: Vec<Finding>,
    pub(crate) rbac: String,
    pub(crate) restart: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) dry_run: bool,
}

/// A change that made the kubelet unhealthy.
#[derive(Debug, Serialize, Deserialize)]
struct Failed {
    fingerprint: String,
    at_unix: u64,
    why: String,
}

/// `env` is this process's environment, the closest stand-in for the
/// kubelet's.
pub(crate) fn run(args: &Args, env: &Env) -> ExitCode {
    let mut report = Report {
        dry_run: args.dry_run,
        ..Report::default()
    };
    let failed = install(args, env, &mut report).err();
    report.error = failed.as_ref().map(ToString::to_string);
    let text = match args.target.output {
        Output::Json => serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
        Output::Text => render(&report),
    };
    crate::commands::report_change("node install", &text, failed.as_ref())
}

/// Reads the binary to install, bounded.
fn read_binary(path: &Path) -> Result<Vec<u8>> {
    let file = std::fs::File::open(path)
        .map_err(|e| Error::config(format!("cannot read the binary {}: {e}", path.display())))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::config(format!("cannot read the binary {}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(Error::config(format!(
            "the binary {} is not a regular file",
            path.display()
        )));
    }
    let mut bytes = Vec::new();
    file.take(files::MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::config(format!("cannot read the binary {}: {e}", path.display())))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > files::MAX_FILE {
        return Err(Error::config(format!(
            "the binary {} is too large",
            path.display()
        )));
    }
    Ok(bytes)
}

/// The config change: the merged bytes for `plan`'s target, validated.
struct ConfigChange {
    target: PathBuf,
    before: Snapshot,
    bytes: Option<Vec<u8>>,
    said: Vec<String>,
}

fn config_change(
    host: &Host,
    plan: &Plan,
    args: &Args,
    ours: &[yaml_serde::Value],
) -> Result<(ConfigChange, yaml_serde::Value)> {
    let target = plan.config.path().to_path_buf();
    let (base, replace) = match &plan.config {
        ConfigTarget::File { base, .. } => (base.clone(), args.replace.as_slice()),
        ConfigTarget::Directory { path, .. } => (path.clone(), &[][..]),
    };
    let before = Snapshot::take(host, &target)?;
    // What the kubelet reads: through a link, if the config is one.
    let existing = if base == target && before.bytes.is_some() {
        before.bytes.clone()
    } else {
        host.read_bytes(&base, wicp_base::yaml::MAX_BYTES)
            .map_err(|e| Error::config(format!("cannot read {}: {e}", base.display())))?
    };
    let mut ours = ours.to_vec();
    let carried = existing
        .as_deref()
        .and_then(|bytes| merge::parse(bytes, &base).ok())
        .and_then(|doc| plan::carry_identity_binding(&doc, &mut ours));
    let merged = merge::merge(
        existing.as_deref(),
        &base,
        Format::of(&target),
        &ours,
        replace,
    )?;
    let replaced_link = matches!(before.state, files::State::Symlink { .. });
    let bytes = match (&merged.bytes, base == target && !replaced_link) {
        (Some(b), _) => Some(b.clone()),
        (None, true) => None,
        // A copy into our own file, or a link replaced by a file: written
        // even if the meaning is the same.
        (None, false) => Some(merge::render(&merged.value, Format::of(&target))?),
    };
    let mut said: Vec<String> = merged
        .changes
        .iter()
        .map(|c| format!("{c} in {}", target.display()))
        .collect();
    if said.is_empty() && bytes.is_some() {
        said.push(format!("wrote {}", target.display()));
    }
    said.extend(carried);
    Ok((
        ConfigChange {
            target,
            before,
            bytes,
            said,
        },
        merged.value,
    ))
}

fn validate(
    host: &Host,
    plan: &Plan,
    config: &ConfigChange,
    names: &[String],
    binary: &Path,
    facts: &KubeletFacts,
    report: &mut Report,
) -> Result<()> {
    let current;
    let bytes: &[u8] = match &config.bytes {
        Some(b) => b,
        None => {
            current = host
                .read_bytes(&config.target, wicp_base::yaml::MAX_BYTES)
                .ok()
                .flatten()
                .unwrap_or_default();
            &current
        }
    };
    let staged: Stage = match &plan.config {
        ConfigTarget::File { path, .. } => stage::stage(
            host,
            stage::Config::File { path, bytes },
            &plan.bin_dir,
            names,
            Some(binary),
        )?,
        ConfigTarget::Directory { dir, path } => stage::stage(
            host,
            stage::Config::Directory {
                dir,
                ours: Some((path, bytes)),
            },
            &plan.bin_dir,
            names,
            Some(binary),
        )?,
    };
    let checked = check_with(&staged.config, Some(&staged.bin_dir), facts);
    report.findings = checked
        .findings
        .iter()
        .cloned()
        .map(|mut f| {
            f.file = staged.unstage(&f.file);
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
    Ok(())
}

/// Every change the plan makes, each with what the file held when read,
/// and the provider-name links to our binary to add. On Windows each name
/// gets a copy of the binary instead of a link (a Windows link needs a
/// privilege, and a kubelet before 1.30 needs the `.exe` file itself);
/// one not installed by us is not replaced (`manifest`).
fn changes(
    host: &Host,
    plan: &Plan,
    config: ConfigChange,
    names: &[String],
    binary: &[u8],
    manifest: &files::Manifest,
) -> Result<(Vec<Change>, Vec<PathBuf>)> {
    let mut out = Vec::new();
    // The binaries first: the config names them.
    if wicp_base::platform::WINDOWS {
        for name in names {
            out.extend(copy_change(
                host,
                &plan.bin_dir.join(name),
                binary,
                manifest,
            )?);
        }
    } else {
        out.extend(binary_change(host, &plan.bin_dir.join(BINARY), binary)?);
    }
    if let Some(bytes) = config.bytes {
        let mode = match &config.before.state {
            files::State::File { mode, .. } => *mode,
            _ => 0o644,
        };
        out.push(Change {
            path: config.target.clone(),
            kind: Kind::Config,
            bytes,
            mode,
            before: config.before,
            entries: names.to_vec(),
            inserted: String::new(),
            said: config.said,
        });
    }
    for (path, bytes) in &plan.own_files {
        let now = Snapshot::take(host, path)?;
        if now.bytes.as_ref() != Some(bytes) {
            out.push(Change {
                path: path.to_path_buf(),
                kind: Kind::Own,
                bytes: bytes.clone(),
                mode: 0o644,
                before: now,
                entries: Vec::new(),
                inserted: String::new(),
                said: vec![format!("wrote {}", path.display())],
            });
        }
    }
    if let Some(edit) = &plan.flag_edit {
        out.extend(flag_change(host, edit)?);
    }
    let links: Vec<PathBuf> = names
        .iter()
        .filter(|n| n.as_str() != BINARY && !wicp_base::platform::WINDOWS)
        .map(|n| plan.bin_dir.join(n))
        .filter(|l| host.read_link(l).as_deref() != Some(Path::new(BINARY)))
        .collect();
    Ok((out, links))
}

/// A copy of our binary under a provider's name (Windows), unless the
/// very same is there; refused over another provider's executable.
fn copy_change(
    host: &Host,
    dest: &Path,
    binary: &[u8],
    manifest: &files::Manifest,
) -> Result<Option<Change>> {
    let now = Snapshot::take(host, dest)?;
    let ours = manifest.record(dest).is_some();
    match &now.state {
        files::State::File { sha256, .. } if !ours && *sha256 != files::sha256(binary) => {
            Err(Error::config(format!(
                "{} exists and was not installed by node install; not replacing another provider's executable",
                dest.display()
            ))
            .fix("rename our entry with --config, or remove that file if it is a copy of this plugin installed by hand"))
        }
        _ => binary_change(host, dest, binary),
    }
}

/// Installing our binary as `dest` (0755), unless the very same is there.
fn binary_change(host: &Host, dest: &Path, binary: &[u8]) -> Result<Option<Change>> {
    let dest = dest.to_path_buf();
    let now = Snapshot::take(host, &dest)?;
    // Windows has no execute bit: a file there is 0600 (private DACL) or
    // 0644 (the folder's), and the bytes decide.
    let same = matches!(&now.state, files::State::File { sha256, mode }
        if *sha256 == files::sha256(binary) && (*mode == 0o755 || wicp_base::platform::WINDOWS));
    if same {
        return Ok(None);
    }
    Ok(Some(Change {
        path: dest.clone(),
        kind: Kind::Own,
        bytes: binary.to_vec(),
        // On Windows a private DACL (SYSTEM, which runs the kubelet, and
        // Administrators) rather than the folder's inherited one.
        mode: if wicp_base::platform::WINDOWS {
            0o700
        } else {
            0o755
        },
        before: now,
        entries: Vec::new(),
        inserted: String::new(),
        said: vec![format!("installed {}", dest.display())],
    }))
}

/// Appending our flags to the kubelet's environment file, unless they
/// already hold.
fn flag_change(host: &Host, edit: &plan::FlagEdit) -> Result<Option<Change>> {
    let now = Snapshot::take(host, &edit.file)?;
    let bytes = now.bytes.clone().unwrap_or_default();
    let text = String::from_utf8(bytes).map_err(|_| {
        Error::config(format!(
            "{} is not valid UTF-8: systemd ignores its bad lines, and install does not edit it",
            edit.file.display()
        ))
        .fix("make the file valid UTF-8, then run again")
    })?;
    let Some((new, inserted)) = plan::append_flags(&text, &edit.var, &edit.flags, &edit.inherited)
    else {
        return Ok(None);
    };
    let mode = match &now.state {
        files::State::File { mode, .. } => *mode,
        _ => 0o644,
    };
    Ok(Some(Change {
        path: edit.file.clone(),
        kind: Kind::Environment,
        bytes: new.into_bytes(),
        mode,
        before: now,
        entries: Vec::new(),
        inserted: inserted.clone(),
        said: vec![format!(
            "appended {:?} to {} in {}",
            inserted.trim(),
            edit.var,
            edit.file.display()
        )],
    }))
}

/// The binary to install (`--binary`, else this executable), read.
fn binary_to_install(asked: Option<&Path>) -> Result<(PathBuf, Vec<u8>)> {
    let path = match asked {
        Some(b) => b.to_path_buf(),
        None => std::env::current_exe().map_err(|e| {
            Error::config(format!("cannot find this executable: {e}")).fix("pass --binary PATH")
        })?,
    };
    let bytes = read_binary(&path)?;
    Ok((path, bytes))
}

/// What makes a directory fit to hold what the kubelet runs as root.
pub(crate) const UNTRUSTED_PLACE_FIX: &str = if wicp_base::platform::WINDOWS {
    "give the folder to SYSTEM or Administrators and let no other account write it \
     (icacls <folder> /inheritance:r /grant:r SYSTEM:(OI)(CI)F Administrators:(OI)(CI)F Users:(OI)(CI)RX), then run again"
} else {
    "make the directory root's and writable only by root (chown root:root <dir>; chmod go-w <dir>), then run again"
};

/// Refuses, before anything is written, a plan that would write below a
/// directory another user controls: the binary the kubelet runs as root,
/// its config, our drop-ins and environment edit, and our own state
/// (manifest, lock, backups beside each file) all go where only root may
/// change them, up the whole path inside the root (links followed are
/// checked too). SECURITY.md's rule: trust only what a tenant cannot forge.
fn check_places(host: &Host, plan: &Plan, names: &[String]) -> Result<()> {
    let mut places: Vec<PathBuf> = std::iter::once(BINARY.to_string())
        .chain(names.iter().cloned())
        .map(|n| plan.bin_dir.join(n))
        .collect();
    places.push(plan.config.path().to_path_buf());
    places.extend(plan.own_files.iter().map(|(p, _)| p.clone()));
    places.extend(plan.flag_edit.iter().map(|e| e.file.clone()));
    places.extend([PathBuf::from(files::MANIFEST), PathBuf::from(files::LOCK)]);
    for place in &places {
        host.check_place(place).map_err(|e| {
            Error::config(format!(
                "will not write {}: {e}; nothing was changed",
                place.display()
            ))
            .fix(UNTRUSTED_PLACE_FIX)
        })?;
    }
    Ok(())
}

/// What the changes and links do, one line each, as done.
fn described(changes: &[Change], links: &[PathBuf]) -> Vec<String> {
    changes
        .iter()
        .flat_map(|c| c.said.clone())
        .chain(
            links
                .iter()
                .map(|l| format!("linked {} -> {BINARY}", l.display())),
        )
        .collect()
}

/// "wrote X" as "write X", for a dry run.
fn as_intent(done: &str) -> String {
    for (past, present) in [
        ("wrote ", "write "),
        ("installed ", "install "),
        ("appended ", "append "),
        ("linked ", "link "),
    ] {
        if let Some(rest) = done.strip_prefix(past) {
            return format!("{present}{rest}");
        }
    }
    done.to_string()
}

/// What identifies a set of changes, for the failure memo.
fn fingerprint(changes: &[Change], links: &[PathBuf]) -> String {
    let mut text = String::new();
    for c in changes {
        text.push_str(&format!(
            "{}\0{}\n",
            c.path.display(),
            files::sha256(&c.bytes)
        ));
    }
    for l in links {
        text.push_str(&format!("{}\n", l.display()));
    }
    files::sha256(text.as_bytes())
}

fn install(args: &Args, env: &Env, report: &mut Report) -> Result<()> {
    let host = args.target.host()?;
    let d = discover::discover(&host, &args.target.explicit());
    report.discovery = Some(d.clone());
    d.distro.refuse()?;
    if let Some(why) = &d.refusal {
        return Err(Error::config(format!("cannot identify the kubelet: {why}; nothing was changed"))
            .fix("look at the node: the kubelet's unit, its main process and the processes named kubelet (ps -ef); or pass --proc none with --kubelet-credential-config and --kubelet-bin-dir"));
    }
    let ours = args.entries.read()?;
    let names: Vec<String> = ours
        .iter()
        .map(|e| merge::entry_name(e).to_string())
        .collect();
    let plan = plan::plan(&host, &d, &args.replace)?;
    report.plan = Some(plan.clone());
    check_places(&host, &plan, &names)?;
    let (binary_path, binary) = binary_to_install(args.binary.as_deref())?;
    // Everything below reads what it writes under the lock.
    let lock = if args.dry_run {
        None
    } else {
        Some(files::lock(&host)?)
    };
    let (config, merged) = config_change(&host, &plan, args, &ours)?;
    report.rbac = rbac::manifest(&rbac::audiences(&merge::providers(&merged)));
    let facts = KubeletFacts {
        env: env.clone(),
        config: d.kubelet.clone(),
        version: d.version,
    };
    validate(&host, &plan, &config, &names, &binary_path, &facts, report)?;
    apply::answers_version(&binary, &binary_path)?;
    let manifest = files::Manifest::read(&host)?.unwrap_or_default();
    let (changes, links) = changes(&host, &plan, config, &names, &binary, &manifest)?;
    apply::check_links(&host, &manifest, &links)?;

    if args.dry_run {
        report.changes = described(&changes, &links)
            .iter()
            .map(|s| format!("would: {}", as_intent(s)))
            .collect();
        report.changed = !report.changes.is_empty();
        return Ok(());
    }
    if changes.is_empty() && links.is_empty() {
        report.restart = args
            .restart_kubelet
            .then(|| "nothing changed; the kubelet was left running".to_string());
        return Ok(());
    }
    let fingerprint = fingerprint(&changes, &links);
    if args.restart_kubelet && !args.retry {
        refuse_a_known_failure(&host, &d, &fingerprint)?;
    }
    let said = described(&changes, &links);
    let lock_created = lock.as_ref().map_or(&[][..], files::Lock::created);
    let applied = apply::apply(&host, changes, &links, lock_created)?;
    report.changed = true;
    report.changes = said;
    if args.restart_kubelet {
        restart_or_roll_back(
            &host,
            &d,
            &args.target,
            &applied,
            args.health_timeout,
            &fingerprint,
            report,
        )
    } else {
        report.restart = Some("the kubelet reads its credential-provider config only at start: restart it (or pass --restart-kubelet)".into());
        Ok(())
    }
}

/// Where the kubelet's log is, for a fix.
fn kubelet_log(d: &Discovery) -> &'static str {
    match d.distro.windows_service() {
        Some(_) => r"C:\k\kubelet.err.log, written by the NSSM service",
        None => "journalctl -u kubelet",
    }
}

fn refuse_a_known_failure(host: &Host, d: &Discovery, fingerprint: &str) -> Result<()> {
    let Ok(Some(bytes)) = host.read_bytes(Path::new(FAILED), 64 * 1024) else {
        return Ok(());
    };
    let Ok(failed) = serde_json::from_slice::<Failed>(&bytes) else {
        return Ok(());
    };
    if failed.fingerprint != fingerprint {
        return Ok(());
    }
    Err(Error::config(format!(
        "this exact change made the kubelet unhealthy before (at unix time {}: {}) and was rolled back; not restarting the kubelet with it again",
        failed.at_unix, failed.why
    ))
    .fix(format!(
        "find why in the kubelet's log ({}), change the config, or pass --retry (or remove {FAILED}) to try the same change once more",
        kubelet_log(d)
    )))
}

fn restart_or_roll_back(
    host: &Host,
    d: &Discovery,
    target: &Target,
    applied: &Applied,
    timeout: Duration,
    fingerprint: &str,
    report: &mut Report,
) -> Result<()> {
    let proc = target.proc_dir();
    let outcome = restart::restart_kubelet(host, d, &target.proc)
        .map_err(|e| e.to_string())
        .and_then(|unit| match d.health_endpoint() {
            None => Ok(format!(
                "restarted {unit}; its health endpoint is off (healthzPort: 0), so health was not checked"
            )),
            Some((address, port)) => restart::wait_healthy(proc, &address, port, timeout)
                .map(|()| format!("restarted {unit}; healthy at http://{address}:{port}/healthz")),
        });
    match outcome {
        Ok(said) => {
            let _ = host.remove(Path::new(FAILED));
            report.restart = Some(said);
            Ok(())
        }
        Err(why) => {
            // Exactly once: put every file back, restart once more, and
            // remember the change so a retry does not do it all again.
            let restored = apply::roll_back(host, applied);
            let failed = Failed {
                fingerprint: fingerprint.to_string(),
                at_unix: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|t| t.as_secs())
                    .unwrap_or_default(),
                why: why.clone(),
            };
            if let Ok(bytes) = serde_json::to_vec_pretty(&failed) {
                let _ = host.write(Path::new(FAILED), &bytes, 0o600);
            }
            let again = restart::restart_kubelet(host, d, &target.proc);
            let health = match (&again, d.health_endpoint()) {
                (Ok(_), Some((a, p))) => restart::wait_healthy(proc, &a, p, timeout),
                _ => Ok(()),
            };
            report.restart = Some(format!(
                "restarted the kubelet, which did not come back healthy ({why}); rolled back ({restored}) and restarted {}",
                match (again, health) {
                    (Ok(unit), Ok(())) => format!("{unit} again: healthy again"),
                    (Err(e), _) => format!("it again: restart failed: {e}"),
                    (Ok(unit), Err(e)) => format!("{unit} again: still unhealthy: {e}"),
                }
            ));
            Err(Error::config(format!(
                "the kubelet was not healthy after the install ({why}); the previous files were restored, and this change will not be retried"
            ))
            .fix(format!("run `wi-credential-provider node doctor` and read the kubelet's log ({}); fix the config and run again, or pass --retry", kubelet_log(d))))
        }
    }
}

fn render(report: &Report) -> String {
    let mut t = String::new();
    if let Some(d) = &report.discovery {
        t.push_str(&discover::render(d));
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
    use crate::commands::node::plan;

    fn flags(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(f, v)| (f.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn appends_to_an_empty_unquoted_value() {
        let (text, ins) = plan::append_flags(
            "KUBELET_EXTRA_ARGS=\n",
            "KUBELET_EXTRA_ARGS",
            &flags(&[("a", "1"), ("b", "2")]),
            "",
        )
        .unwrap();
        assert_eq!(text, "KUBELET_EXTRA_ARGS=--a=1 --b=2\n");
        assert_eq!(ins, "--a=1 --b=2");
    }

    /// `--a=1` appended to `var` in `text`, with `inherited` carried over.
    fn append_a1(text: &str, var: &str, inherited: &str) -> Option<(String, String)> {
        plan::append_flags(text, var, &flags(&[("a", "1")]), inherited)
    }

    #[test]
    fn appends_inside_quotes_and_without_a_trailing_newline() {
        let (text, ins) = append_a1("X=1\nARGS=\"--v=2\"", "ARGS", "").unwrap();
        assert_eq!(text, "X=1\nARGS=\"--v=2 --a=1\"");
        assert_eq!(ins, " --a=1");
        let (text, _) = append_a1(
            "NODEADM_KUBELET_ARGS=--a=0 --v=2",
            "NODEADM_KUBELET_ARGS",
            "",
        )
        .unwrap();
        assert_eq!(text, "NODEADM_KUBELET_ARGS=--a=0 --v=2 --a=1");
    }

    #[test]
    fn nothing_when_the_last_value_already_holds() {
        assert!(append_a1("ARGS=--a=0 --a=1\n", "ARGS", "").is_none());
        assert!(append_a1("ARGS=--a 1\n", "ARGS", "").is_none());
    }

    #[test]
    fn adds_a_missing_variable() {
        let (text, ins) = append_a1("OTHER=1", "ARGS", "").unwrap();
        assert_eq!(text, "OTHER=1\nARGS=\"--a=1\"\n");
        assert_eq!(ins, "\nARGS=\"--a=1\"\n");
    }

    #[test]
    fn a_continued_line_is_extended_at_its_end_and_an_inherited_value_kept() {
        let (text, _) = append_a1("ARGS=--v=2 \\\n  --b=1\nX=1\n", "ARGS", "").unwrap();
        assert_eq!(text, "ARGS=--v=2 \\\n  --b=1 --a=1\nX=1\n");
        let (text, _) = append_a1("X=1\n", "ARGS", "--d=\"q\"").unwrap();
        assert_eq!(text, "X=1\nARGS=\"--d=\\\"q\\\" --a=1\"\n");
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
