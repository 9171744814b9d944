//! Which process is the node's kubelet, decided only by facts a tenant
//! cannot forge. A pod can run a process named `kubelet` (or `k3s`) with
//! any command line, and with `hostPID` the installer sees it; taking the
//! first such PID would let a tenant choose the config we write and the
//! binary we run as root. So a process counts only when:
//!
//! 1. systemd names it: the `MainPID` of the kubelet's unit (`k3s`,
//!    `rke2-*` on those distributions), asked through `systemctl show`;
//!    without an answer from systemd, every process named `kubelet` is a
//!    candidate and all of them must pass the checks below and agree;
//! 2. its mount namespace is PID 1's (a container has its own);
//! 3. its cgroup is the unit's (`ControlGroup` from systemd), and never
//!    under `kubepods` (every pod's cgroup is);
//! 4. its executable is owned by root, not writable by group or others,
//!    and is the very file (device and inode) that the unit's `ExecStart`
//!    (without a unit, the process's own executable path) names inside
//!    `--root`.
//!
//! When systemd's answer fails a check, install and doctor stop with the
//! reason: a node where the kubelet unit's main process is not what it
//! claims is not one to write kubelet configuration on.

use std::path::{Path, PathBuf};
use std::time::Duration;
use wicp_base::platform;

use serde::Serialize;

use wicp_base::platform::Host;

/// The kubelet (or the k3s/RKE2 process that embeds it), verified.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Kubelet {
    pub(crate) pid: u32,
    /// `kubelet`, `k3s` or `rke2`.
    pub(crate) name: String,
    /// The command line after the program.
    pub(crate) args: Vec<String>,
    /// The host path of its executable, checked as above.
    pub(crate) exe: PathBuf,
    /// How it was identified.
    pub(crate) evidence: String,
}

/// The outcome of identification.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Identified {
    pub(crate) kubelet: Option<Kubelet>,
    /// Processes named like the kubelet that were not taken, with why.
    pub(crate) ignored: Vec<String>,
    /// Set when the facts disagree: install and doctor stop here.
    pub(crate) refusal: Option<String>,
}

/// What systemd says of a unit.
struct UnitState {
    main_pid: u32,
    control_group: String,
}

fn unit_state(host: &Host, proc: &Path, unit: &str) -> Option<UnitState> {
    let out = crate::commands::node::exec::systemctl_output(
        host,
        proc,
        &["show", "--property=MainPID,ControlGroup", unit],
        Duration::from_secs(10),
    )
    .ok()?;
    let mut main_pid = 0;
    let mut control_group = String::new();
    for line in out.lines() {
        if let Some(v) = line.strip_prefix("MainPID=") {
            main_pid = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("ControlGroup=") {
            control_group = v.trim().to_string();
        }
    }
    (main_pid > 0).then_some(UnitState {
        main_pid,
        control_group,
    })
}

/// The process's cgroup path as the kernel shows it to us: the unified
/// (`0::`) line, else the `name=systemd` one; a leading `/..` (we are in a
/// cgroup namespace of our own) is dropped.
fn cgroup_of(text: &str) -> Option<String> {
    let pick = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix).map(str::to_string))
    };
    let raw = pick("0::").or_else(|| {
        text.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            (controllers == "name=systemd").then(|| path.to_string())
        })
    })?;
    let mut rest = raw.as_str();
    while let Some(r) = rest.strip_prefix("/..") {
        rest = r;
    }
    Some(if rest.is_empty() {
        "/".into()
    } else {
        rest.to_string()
    })
}

fn under_kubepods(cgroup: &str) -> bool {
    cgroup.split('/').any(|c| {
        c.starts_with("kubepods") || c.starts_with("cri-containerd") || c.starts_with("crio-")
    })
}

fn read_argv(proc: &Path, pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(proc.join(pid.to_string()).join("cmdline")).ok()?;
    let argv: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    (!argv.is_empty()).then_some(argv)
}

/// Checks one candidate; `Err` says which fact failed.
fn verify(
    host: &Host,
    proc: &Path,
    pid: u32,
    unit_exe: Option<&Path>,
    control_group: Option<&str>,
) -> Result<Kubelet, String> {
    let dir = proc.join(pid.to_string());
    let mine = std::fs::read_link(dir.join("ns/mnt"))
        .map_err(|e| format!("cannot read its mount namespace: {e}"))?;
    let init = std::fs::read_link(proc.join("1/ns/mnt"))
        .map_err(|e| format!("cannot read PID 1's mount namespace: {e}"))?;
    if mine != init {
        return Err(format!(
            "it runs in another mount namespace ({}) than PID 1 ({}): a container",
            mine.display(),
            init.display()
        ));
    }
    let cgroup_text = std::fs::read_to_string(dir.join("cgroup"))
        .map_err(|e| format!("cannot read its cgroup: {e}"))?;
    let cgroup = cgroup_of(&cgroup_text).ok_or("it has no cgroup line")?;
    if under_kubepods(&cgroup) {
        return Err(format!("its cgroup {cgroup} is a pod's"));
    }
    if let Some(want) = control_group.filter(|c| !c.is_empty())
        && !(want == cgroup || (cgroup != "/" && want.ends_with(&cgroup)))
    {
        return Err(format!("its cgroup {cgroup} is not the unit's ({want})"));
    }
    let exe_meta = platform::facts_followed(&dir.join("exe"))
        .map_err(|e| format!("cannot look at its executable: {e}"))?;
    if !exe_meta.owner.is_administrator() {
        return Err(format!(
            "its executable is owned by {}, not root",
            exe_meta.owner
        ));
    }
    if exe_meta.access.others_write {
        return Err(format!(
            "its executable is writable by group or others ({})",
            exe_meta.access.shown()
        ));
    }
    let named = match unit_exe {
        Some(p) => p.to_path_buf(),
        None => std::fs::read_link(dir.join("exe"))
            .map_err(|e| format!("cannot read its executable's path: {e}"))?,
    };
    let on_root = host.identity(&named);
    if on_root != Some(exe_meta.id) {
        return Err(format!(
            "its executable is not the file {} on the node's root",
            named.display()
        ));
    }
    let argv = read_argv(proc, pid).ok_or("its command line is empty")?;
    let base = argv
        .first()
        .and_then(|a| Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = if base.starts_with("k3s") {
        "k3s"
    } else if base.starts_with("rke2") {
        "rke2"
    } else {
        "kubelet"
    };
    Ok(Kubelet {
        pid,
        name: name.into(),
        args: argv.get(1..).unwrap_or(&[]).to_vec(),
        exe: named,
        evidence: String::new(),
    })
}

/// Processes whose name says kubelet (or the k3s/RKE2 agent).
fn named_like_kubelet(proc: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let dir = proc.join(pid.to_string());
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            let comm = comm.trim();
            let argv = read_argv(proc, *pid).unwrap_or_default();
            let base = argv
                .first()
                .and_then(|a| Path::new(a).file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let agent = (base == "k3s" || base == "rke2")
                && argv.get(1).is_some_and(|w| w == "agent" || w == "server");
            base == "kubelet" || comm == "kubelet" || agent
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Finds the kubelet among `proc`'s processes (the host's with hostPID).
pub(crate) fn identify(
    host: &Host,
    proc: &Path,
    units: &[&str],
    unit_exe: Option<&Path>,
) -> Identified {
    let mut out = Identified::default();
    for unit in units {
        let Some(state) = unit_state(host, proc, unit) else {
            continue;
        };
        return match verify(
            host,
            proc,
            state.main_pid,
            unit_exe,
            Some(&state.control_group),
        ) {
            Ok(mut k) => {
                k.evidence = format!(
                    "the main process of {unit} (systemd MainPID {}, cgroup {})",
                    state.main_pid, state.control_group
                );
                for pid in named_like_kubelet(proc) {
                    if pid != k.pid {
                        out.ignored.push(format!(
                            "pid {pid} is named like the kubelet but is not {unit}'s main process"
                        ));
                    }
                }
                out.kubelet = Some(k);
                out
            }
            Err(why) => {
                out.refusal = Some(format!(
                    "systemd names pid {} as {unit}'s main process, but {why}; refusing to trust this node's process table",
                    state.main_pid
                ));
                out
            }
        };
    }
    // No answer from systemd: every candidate must check out and agree.
    let mut passed: Vec<Kubelet> = Vec::new();
    for pid in named_like_kubelet(proc) {
        match verify(host, proc, pid, unit_exe, None) {
            Ok(mut k) => {
                k.evidence = format!(
                    "the only process named {} in PID 1's mount namespace, outside pod cgroups, running a root-owned {} (systemd did not answer)",
                    k.name,
                    k.exe.display()
                );
                passed.push(k);
            }
            Err(why) => out
                .ignored
                .push(format!("pid {pid} is named like the kubelet, but {why}")),
        }
    }
    let distinct: std::collections::BTreeSet<&Vec<String>> =
        passed.iter().map(|k| &k.args).collect();
    if distinct.len() > 1 {
        out.refusal = Some(format!(
            "{} processes look like the node's kubelet with different command lines (pids {}); cannot tell which one is",
            passed.len(),
            passed
                .iter()
                .map(|k| k.pid.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        return out;
    }
    out.kubelet = passed.into_iter().next();
    out
}

/// `--version` of a verified kubelet executable, bounded: the answer
/// decides the route on EKS (directory configs from 1.34). The file is
/// checked again (root-owned, not writable by others) right before.
pub(crate) fn version_of(host: &Host, exe: &Path) -> Option<String> {
    let local = host.local(exe).ok()?;
    let meta = platform::facts_followed(&local).ok()?;
    if !meta.is_file()
        || !meta.owner.is_administrator()
        || meta.access.others_write
        || !meta.access.executable
    {
        return None;
    }
    let out =
        crate::commands::node::exec::run(&local, &["--version"], Duration::from_secs(5)).ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_lines() {
        for (lines, cgroup) in [
            (
                "0::/system.slice/kubelet.service\n",
                "/system.slice/kubelet.service",
            ),
            (
                "0::/../../../system.slice/kubelet.service\n",
                "/system.slice/kubelet.service",
            ),
            (
                "4:memory:/x\n1:name=systemd:/runtime.slice/kubelet.service\n",
                "/runtime.slice/kubelet.service",
            ),
        ] {
            assert_eq!(cgroup_of(lines).as_deref(), Some(cgroup), "{lines}");
        }
        assert!(under_kubepods(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-a.scope"
        ));
        assert!(!under_kubepods("/system.slice/kubelet.service"));
    }
}
