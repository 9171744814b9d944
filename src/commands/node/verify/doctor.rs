//! `node doctor`: change nothing, and report each part of the node's
//! credential-provider set-up with a verdict and a fix: where the kubelet
//! reads its config and how that was learned, whether our binary and every
//! provider name exist and run, check-config on the live config (with the
//! overlap and image-reuse lints), a node docker-config beside our
//! registries, what rewrites the files on this distribution, k3s's silent
//! skip, the SPIRE agent's socket for `--identity spiffe` entries, the
//! kubelet's health, and the recent failures the plugin's own metrics and
//! audit log recorded. Exit 0 when nothing fails, 1 otherwise.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;

use super::checks::{Check, Verdict, check};
use crate::commands::check_config::check::{Output, check_with};
use crate::commands::check_config::isolation::KubeletFacts;
use crate::commands::check_config::lint;
use crate::commands::node::Target;
use crate::commands::node::apply::restart;
use crate::commands::node::discover::distro::{self, Distro};
use crate::commands::node::discover::{self, Discovery};
use crate::commands::node::plan::stage;
use crate::commands::node::render::rbac;
use crate::options::BINARY;
use wicp_base::platform::Host;
use wicp_kubelet::config::Severity;
use wicp_kubelet::config::matching;
use wicp_kubelet::config::provider_config::Entry;
use wicp_net::inputs::Env;

#[derive(clap::Args, Clone, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) target: Target,
}

#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) discovery: Discovery,
    pub(crate) checks: Vec<Check>,
    pub(crate) rbac: String,
    pub(crate) ok: bool,
}

/// `env` is this process's environment, the closest stand-in for the
/// kubelet's.
pub(crate) fn run(args: &Args, env: &Env) -> ExitCode {
    let report = diagnose(&args.target, env);
    let text = match args.target.output {
        Output::Json => serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
        Output::Text => {
            let mut t = discover::render(&report.discovery);
            for c in &report.checks {
                let v = match c.verdict {
                    Verdict::Ok => "ok  ",
                    Verdict::Warn => "WARN",
                    Verdict::Fail => "FAIL",
                };
                t.push_str(&format!("{v} {}: {}", c.check, c.message));
                if let Some(fix) = &c.fix {
                    t.push_str(&format!("; fix: {fix}"));
                }
                t.push('\n');
            }
            if !report.rbac.is_empty() {
                t.push_str("\nRBAC the audiences need (kubectl apply -f -):\n---\n");
                t.push_str(&report.rbac);
            }
            t
        }
    };
    crate::commands::report(&text, report.ok)
}

pub(crate) fn diagnose(target: &Target, env: &Env) -> Report {
    let host = match target.host() {
        Ok(h) => h,
        Err(e) => {
            let d = Discovery::nothing(&target.root);
            return finish(
                d,
                vec![check(Verdict::Fail, "root", e.to_string(), None)],
                Vec::new(),
            );
        }
    };
    let d = discover::discover(&host, &target.explicit());
    let mut checks = Vec::new();
    process_checks(&d, &mut checks);
    let Some((config, bin_dir)) = discovered(&d, &mut checks) else {
        return finish(d, checks, Vec::new());
    };
    if matches!(d.distro, Distro::K3s | Distro::Rke2) {
        k3s_checks(&host, &config, &bin_dir, &mut checks);
    }
    let facts = KubeletFacts {
        env: env.clone(),
        config: d.kubelet.clone(),
        version: d.version,
    };
    let Some(staged) = stage_live(&host, &config, &bin_dir, &mut checks) else {
        return finish(d, checks, Vec::new());
    };
    checks.extend(untrusted_place(&host, "config", &config));
    let local_config = staged.config.clone();
    let local_bin = staged.bin_dir.clone();
    let report = check_with(&local_config, Some(&local_bin), &facts);
    findings_checks(&report, &staged, &mut checks);
    // Our entries, the binary, the audiences.
    let loaded = wicp_kubelet::config::provider_config::load(&local_config);
    let ours: Vec<&Entry> = loaded
        .entries
        .iter()
        .filter(|e| lint::runs_this_binary(e, Some(&local_bin)))
        .collect();
    let audiences = audiences_of(&loaded.entries);
    if ours.is_empty() {
        checks.push(check(
            Verdict::Warn,
            "entries",
            "no provider entry runs this plugin",
            Some("run `wi-credential-provider node install --provider ...`".into()),
        ));
    } else if wicp_base::platform::WINDOWS {
        // A copy of the binary under each entry's name (no links there).
        for entry in &ours {
            checks.push(binary_check(&host, &bin_dir.join(entry.name())));
        }
    } else {
        checks.push(binary_check(&host, &bin_dir.join(BINARY)));
    }
    checks.extend(super::mirrors::checks(&host, &ours, env));
    observed_checks(&host, &ours, env, &mut checks);
    keyring_checks(&host, &ours, &mut checks);
    spire_checks(&host, &ours, env, &mut checks);
    rewrite_check(&d, &config, &ours, &mut checks);
    checks.push(health_check(target, &d));
    finish(d, checks, audiences)
}

/// A private copy of the live config and bin dir, for check-config to
/// read, or a failed check.
fn stage_live(
    host: &Host,
    config: &Path,
    bin_dir: &Path,
    checks: &mut Vec<Check>,
) -> Option<stage::Stage> {
    let staged_config = if host.is_dir(config) {
        stage::Config::Directory {
            dir: config,
            ours: None,
        }
    } else {
        stage::Config::File {
            path: config,
            bytes: &host
                .read_bytes(config, wicp_base::yaml::MAX_BYTES)
                .ok()
                .flatten()
                .unwrap_or_default(),
        }
    };
    let live_bytes;
    let staged_config = match staged_config {
        stage::Config::File { path, bytes } => {
            live_bytes = bytes.to_vec();
            if !host.exists(path) {
                checks.push(check(
                    Verdict::Fail,
                    "config",
                    format!(
                        "{} does not exist (or cannot be read): the kubelet refuses to start",
                        path.display()
                    ),
                    Some("run `wi-credential-provider node install`".into()),
                ));
                return None;
            }
            stage::Config::File {
                path,
                bytes: &live_bytes,
            }
        }
        other => other,
    };
    match stage::stage(host, staged_config, bin_dir, &[], None) {
        Ok(s) => Some(s),
        Err(e) => {
            checks.push(check(Verdict::Fail, "config", e.to_string(), None));
            None
        }
    }
}

/// check-config's findings on the live config, as checks.
fn findings_checks(
    report: &crate::commands::check_config::check::Report,
    staged: &stage::Stage,
    checks: &mut Vec<Check>,
) {
    for f in &report.findings {
        let mut f = f.clone();
        f.file = staged.unstage(&f.file);
        let verdict = if f.severity == Severity::Error {
            Verdict::Fail
        } else {
            Verdict::Warn
        };
        checks.push(check(
            verdict,
            &format!("check-config {}", f.rule),
            f.to_string(),
            None,
        ));
    }
    if report.ok() && report.warnings == 0 {
        checks.push(check(
            Verdict::Ok,
            "check-config",
            format!("{} providers, no finding", report.providers.len()),
            None,
        ));
    }
}

/// The audiences the entries ask tokens for, each once, in order.
fn audiences_of(entries: &[Entry]) -> Vec<String> {
    let mut audiences: Vec<String> = Vec::new();
    for e in entries {
        if let Some(a) = e
            .provider
            .token_attributes
            .as_ref()
            .map(|t| t.audience().to_string())
            && !a.is_empty()
            && !audiences.contains(&a)
        {
            audiences.push(a);
        }
    }
    audiences
}

/// What the plugin recorded: its metrics and audit log, when turned on.
fn observed_checks(host: &Host, ours: &[&Entry], env: &Env, checks: &mut Vec<Check>) {
    let (metric_dirs, audit_logs) = super::observed::configured(ours, env);
    let now = wicp_base::duration::unix_now();
    for dir in &metric_dirs {
        checks.push(super::observed::metrics_check(host, dir, now));
    }
    for log in &audit_logs {
        checks.extend(super::observed::audit_checks(host, log, now));
    }
}

/// What is known of the kubelet's process and the distribution.
fn process_checks(d: &Discovery, checks: &mut Vec<Check>) {
    if let Some(why) = &d.refusal {
        checks.push(check(
            Verdict::Fail,
            "kubelet-process",
            format!("cannot identify the kubelet: {why}"),
            Some("look at the kubelet's unit and its main process (systemctl status kubelet); nothing found through another process is run".into()),
        ));
    }
    for i in &d.ignored_processes {
        checks.push(check(
            Verdict::Warn,
            "kubelet-process",
            format!("ignored: {i}"),
            None,
        ));
    }
    pending_restart(d, checks);
    if let Some(route) = d.distro.refusal() {
        checks.push(check(
            Verdict::Fail,
            "distribution",
            format!(
                "{}: this plugin cannot be installed by a DaemonSet or node install here",
                d.distro
            ),
            Some(route.to_string()),
        ));
    }
}

/// The config and bin dir the kubelet uses, or a failed check.
fn discovered(d: &Discovery, checks: &mut Vec<Check>) -> Option<(PathBuf, PathBuf)> {
    match (&d.credential_config, &d.bin_dir) {
        (Some(c), Some(b)) => {
            checks.push(check(
                Verdict::Ok,
                "discovery",
                format!(
                    "the kubelet reads {} (from {}) and runs plugins from {}",
                    c.value.display(),
                    c.source,
                    b.value.display()
                ),
                None,
            ));
            Some((c.value.clone(), b.value.clone()))
        }
        _ => {
            checks.push(check(
                Verdict::Fail,
                "discovery",
                match (&d.flags_unreadable, d.distro) {
                    (Some(why), _) => format!("the kubelet's flags cannot be read: {why}"),
                    (None, Distro::AksWindows) => format!("the kubelet has no credential-provider config and bin dir (flags not found in Kubernetes.Kubelet.ConfigArgs of {})", distro::AKS_WINDOWS_CLUSTER_CONFIG),
                    _ => "the kubelet has no credential-provider config and bin dir (flags not found in the process, the systemd unit or the distribution's defaults)".to_string(),
                },
                Some("run `wi-credential-provider node install`".into()),
            ));
            None
        }
    }
}

/// k3s and RKE2 pass the flags only for one config file and an existing
/// bin dir.
fn k3s_checks(host: &Host, config: &Path, bin_dir: &Path, checks: &mut Vec<Check>) {
    if host.is_dir(config) {
        checks.push(check(
            Verdict::Fail,
            "k3s",
            format!(
                "{} is a directory: k3s/RKE2 then silently pass no credential-provider flags",
                config.display()
            ),
            Some("use one config file".into()),
        ));
    } else if !host.is_file(config) || !host.is_dir(bin_dir) {
        checks.push(check(Verdict::Fail, "k3s", "k3s/RKE2 pass the flags only when the config file and the bin dir both exist; one is missing, so no plugin runs", Some("run `wi-credential-provider node install`".into())));
    }
}

/// The node keyring: docker config files the kubelet reads beside
/// plugins, which must not serve a registry our entries serve.
fn keyring_checks(host: &Host, ours: &[&Entry], checks: &mut Vec<Check>) {
    for keyring in [
        "/var/lib/kubelet/config.json",
        "/.docker/config.json",
        "/root/.docker/config.json",
    ] {
        let Ok(Some(bytes)) = host.read_bytes(Path::new(keyring), wicp_base::yaml::MAX_BYTES)
        else {
            continue;
        };
        let hosts: Vec<String> = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| {
                v.get("auths")
                    .and_then(|a| a.as_object())
                    .map(|m| m.keys().cloned().collect())
            })
            .unwrap_or_default();
        for h in hosts {
            let key = h
                .trim_start_matches("https://")
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_string();
            let hit: Vec<String> = ours
                .iter()
                .flat_map(|e| e.provider.match_images().iter().map(move |p| (e, p)))
                .filter(|(_, p)| matching::overlaps(p, &key))
                .map(|(e, p)| format!("{p:?} ({})", e.name()))
                .collect();
            if !hit.is_empty() {
                checks.push(check(
                    Verdict::Fail,
                    "overlap.node-keyring",
                    format!("{keyring} holds a node-wide credential for {key:?}, which {} also serve: pods denied their own access pull with it, and the image is recorded as open to every pod", hit.join(", ")),
                    Some(format!("remove {key:?} from {keyring}, or keep tenant images off that registry")),
                ));
            }
        }
    }
}

/// For each SPIRE admin socket our `--identity spiffe` entries name (each
/// once), whether there is one where the plugin will dial: every pull of
/// those entries fails without it. Only that something other than a file
/// or directory is there is checked, inside the root; the doctor connects
/// to nothing it found. On Windows the agent listens on a named pipe, which
/// is no path under the root: not checked.
fn spire_checks(host: &Host, ours: &[&Entry], env: &Env, checks: &mut Vec<Check>) {
    use wicp_base::platform::Kind;
    if wicp_base::platform::WINDOWS {
        return;
    }
    let mut sockets: Vec<(PathBuf, String)> = Vec::new();
    for (name, options) in super::checks::entry_options(ours, env) {
        if let Ok(Some(spiffe)) = options.identity.spiffe() {
            match sockets.iter_mut().find(|(s, _)| s == spiffe.socket) {
                Some((_, names)) => names.push_str(&format!(", {name}")),
                None => sockets.push((spiffe.socket.to_path_buf(), name)),
            }
        }
    }
    for (socket, names) in sockets {
        let shown = socket.display();
        let (verdict, said, fix) = match host.kind(&socket) {
            Some(Kind::Other) => (
                Verdict::Ok,
                format!("the SPIRE admin socket {shown} of {names} is there"),
                None,
            ),
            Some(Kind::File | Kind::Dir | Kind::Symlink) => (
                Verdict::Fail,
                format!("{shown}, the SPIRE admin socket of {names}, is not a socket"),
                Some(format!("point --spire-admin-socket at the agent's admin_socket_path, or remove what is at {shown}")),
            ),
            None => (
                Verdict::Fail,
                format!("no SPIRE admin socket at {shown}, which {names} pull through: every pull of theirs fails"),
                Some("run the SPIRE agent on this node with admin_socket_path set there (docs/spiffe.md), or correct --spire-admin-socket".to_string()),
            ),
        };
        checks.push(check(verdict, "spire.socket", said, fix));
    }
}

/// Whether something rewrites the config our entries are in.
fn rewrite_check(d: &Discovery, config: &Path, ours: &[&Entry], checks: &mut Vec<Check>) {
    if d.distro == Distro::EksAl2023 && config == Path::new(distro::EKS_CONFIG) && !ours.is_empty()
    {
        checks.push(check(
            Verdict::Fail,
            "rewritten-at-boot",
            format!("our entries are in {}, which nodeadm rewrites at every boot", distro::EKS_CONFIG),
            Some("run `wi-credential-provider node install`: it writes its own file and a NodeConfig drop-in in /etc/eks/nodeadm.d/".into()),
        ));
    } else if d.distro == Distro::GkeCos && config.starts_with("/etc") {
        checks.push(check(
            Verdict::Warn,
            "rewritten-at-boot",
            format!("{} is on COS's /etc tmpfs, rebuilt by configure-helper.sh at every boot", config.display()),
            Some("keep the installer DaemonSet: it re-applies and restarts the kubelet after each boot".into()),
        ));
    } else if let Some(r) = d.distro.rewritten_by() {
        checks.push(check(Verdict::Ok, "rewritten-at-boot", r, None));
    }
}

/// The kubelet's health endpoint answers.
fn health_check(target: &Target, d: &Discovery) -> Check {
    match d.health_endpoint() {
        Some((address, port)) => match restart::probe_on_host(target.proc_dir(), &address, port) {
            Ok(()) => check(
                Verdict::Ok,
                "health",
                format!("http://{address}:{port}/healthz answers ok"),
                None,
            ),
            Err(e) => check(
                Verdict::Fail,
                "health",
                format!("http://{address}:{port}/healthz: {e}"),
                Some(format!(
                    "look at the kubelet's log ({}): \"Failed to register CRI auth plugins\" means the credential-provider config is refused",
                    match d.distro.windows_service() {
                        Some(_) => r"C:\k\kubelet.err.log",
                        None => "journalctl -u kubelet",
                    }
                )),
            ),
        },
        None => check(
            Verdict::Warn,
            "health",
            "the kubelet's health endpoint is off (healthzPort: 0)",
            None,
        ),
    }
}

/// Our binary answers `--version` within a deadline, and is root's: the
/// file in the bin dir is run only when it is a regular file owned by root
/// and not writable by group or others.
fn binary_check(host: &Host, shown: &Path) -> Check {
    let missing = |why: String| {
        check(
            Verdict::Fail,
            "binary",
            format!("{} {why}", shown.display()),
            Some("reinstall with node install".into()),
        )
    };
    if let Some(refused) = untrusted_place(host, "binary", shown) {
        return refused;
    }
    let local = match host.local(shown) {
        Ok(l) => l,
        Err(e) => return missing(format!("cannot be found: {e}")),
    };
    let meta = match wicp_base::platform::facts_followed(&local) {
        Ok(m) => m,
        Err(e) => return missing(format!("cannot be read: {e}")),
    };
    // On Windows the account running us (SYSTEM in the DaemonSet, which
    // is what install writes as) is as trusted as Administrators.
    let trusted = meta.owner.is_administrator()
        || (wicp_base::platform::WINDOWS
            && wicp_base::platform::running_owner().is_ok_and(|me| me == meta.owner));
    if !meta.is_file() || !trusted || meta.access.others_write {
        return check(
            Verdict::Fail,
            "binary",
            format!(
                "{} is not a root-owned file writable only by root ({}, {}); not run",
                shown.display(),
                meta.owner,
                meta.access.shown()
            ),
            Some(if wicp_base::platform::WINDOWS {
                "reinstall with node install, which writes it with a DACL for SYSTEM and Administrators only".into()
            } else {
                "reinstall with node install, which writes it root:root 0755".into()
            }),
        );
    }
    match crate::commands::node::exec::run(
        &local,
        &["--version"],
        std::time::Duration::from_secs(10),
    ) {
        Ok(out) if out.status.success() => check(
            Verdict::Ok,
            "binary",
            format!(
                "{} answers: {}",
                shown.display(),
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
            ),
            None,
        ),
        Ok(out) => check(
            Verdict::Fail,
            "binary",
            format!("{} --version exited {}", shown.display(), out.status),
            Some("reinstall with node install".into()),
        ),
        Err(e) => check(
            Verdict::Fail,
            "binary",
            e,
            Some("reinstall with node install (the binary for this node's architecture)".into()),
        ),
    }
}

/// A failed check `name` when a directory on the way to `path` (or a link
/// followed there) is another user's or writable by others: whoever
/// controls it can swap what the kubelet reads or runs as root. The same
/// rule `node install` refuses to write by.
fn untrusted_place(host: &Host, name: &'static str, path: &Path) -> Option<Check> {
    let e = host.check_place(path).err()?;
    Some(check(
        Verdict::Fail,
        name,
        format!(
            "{} is below a place another user controls: {e}",
            path.display()
        ),
        Some(crate::commands::node::install::UNTRUSTED_PLACE_FIX.into()),
    ))
}

/// The running kubelet reads other files than its unit names now: the
/// unit (or an environment file) changed and the kubelet was not
/// restarted, so what doctor checks is not what runs.
fn pending_restart(d: &Discovery, checks: &mut Vec<Check>) {
    let discover::FlagSource::Process { pid, .. } = &d.flags_from else {
        return;
    };
    if d.unit.is_none() {
        return;
    }
    for (flag, found) in [
        (discover::CONFIG_FLAG, &d.credential_config),
        (discover::BIN_DIR_FLAG, &d.bin_dir),
    ] {
        let running = found
            .as_ref()
            .filter(|f| f.source.contains("the command line of"))
            .map(|f| f.value.display().to_string());
        let unit = d.unit_flags.get(flag).cloned();
        if running != unit {
            checks.push(check(
                Verdict::Warn,
                "restart-pending",
                format!(
                    "the running kubelet (pid {pid}) has --{flag}={}, but its unit now gives {}: a restart is pending, and the kubelet will read the other file then",
                    running.unwrap_or_else(|| "(unset)".into()),
                    unit.map(|u| format!("--{flag}={u}")).unwrap_or_else(|| "none".into())
                ),
                Some("restart the kubelet (systemctl restart kubelet) when ready, then run doctor again".into()),
            ));
        }
    }
}

fn finish(d: Discovery, checks: Vec<Check>, audiences: Vec<String>) -> Report {
    let ok = !checks.iter().any(|c| c.verdict == Verdict::Fail);
    let rbac = rbac::manifest(&audiences);
    Report {
        discovery: d,
        checks,
        rbac,
        ok,
    }
}
