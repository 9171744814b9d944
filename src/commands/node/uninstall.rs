//! `node uninstall`: undo exactly what `node install` recorded. A file that
//! holds what an install wrote (or still its original, when an install was
//! killed before writing it) gets its original back: the same bytes and
//! mode, the same link, or nothing if install created it. A config
//! changed since loses only our entries; an environment file changed since
//! loses only the text we appended. A file that the distribution rebuilt
//! (GKE COS rebuilds `/etc` at boot, taking our backup with it) is left as
//! it is. Temporary files of a killed run are removed. One file that
//! cannot be undone does not stop the others: it is reported, and the run
//! exits 1.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use super::Target;
use crate::commands::check_config::check::Output;
use crate::commands::node::apply::files::{self, Kind, Manifest, Record, Snapshot, State};
use crate::commands::node::apply::restart;
use crate::commands::node::discover;
use crate::commands::node::install;
use crate::options::BINARY;
use wicp_base::error::{Error, Result};
use wicp_base::platform::Host;
use wicp_kubelet::config::merge;

#[derive(clap::Args, Clone, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) target: Target,

    /// Restart the kubelet if anything changed and wait for its health.
    #[arg(long)]
    pub(crate) restart_kubelet: bool,

    /// How long to wait for the kubelet to be healthy after a restart.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    pub(crate) health_timeout: Duration,
}

fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    wicp_base::duration::parse(text).map_err(|e| e.to_string())
}

#[derive(Debug, Default, Serialize)]
struct Report {
    changes: Vec<String>,
    warnings: Vec<String>,
    restart: Option<String>,
    error: Option<String>,
}

pub(crate) fn run(args: &Args) -> ExitCode {
    let mut report = Report::default();
    let failed = uninstall(args, &mut report).err();
    report.error = failed.as_ref().map(ToString::to_string);
    let text = match args.target.output {
        Output::Json => serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
        Output::Text => {
            let mut t = String::new();
            for c in &report.changes {
                t.push_str(&format!("{c}\n"));
            }
            for w in &report.warnings {
                t.push_str(&format!("warning: {w}\n"));
            }
            if report.changes.is_empty() && report.error.is_none() {
                t.push_str("nothing to undo: node install left no manifest on this node\n");
            }
            if let Some(r) = &report.restart {
                t.push_str(&format!("{r}\n"));
            }
            if let Some(e) = &report.error {
                t.push_str(&format!("error: {e}\n"));
            }
            t
        }
    };
    crate::commands::report_change("node uninstall", &text, failed.as_ref())
}

fn uninstall(args: &Args, report: &mut Report) -> Result<()> {
    let host = args.target.host()?;
    if Manifest::read(&host)?.is_none() {
        let _ = host.remove(Path::new(install::FAILED));
        // An install killed before its first record left only its lock
        // file (and our state directory): taking the lock and letting go
        // removes both.
        if host.exists(Path::new(files::LOCK)) {
            drop(files::lock(&host)?);
        }
        return Ok(());
    }
    let lock = files::lock(&host)?;
    let Some(manifest) = Manifest::read(&host)? else {
        return Ok(());
    };
    files::sweep_temporaries(&host, Path::new(files::MANIFEST));
    let mut failed = Vec::new();
    for record in manifest.files.iter().rev() {
        files::sweep_temporaries(&host, &record.path);
        if let Err(e) = undo(&host, record, report) {
            failed.push(e.to_string());
        }
    }
    for link in &manifest.binaries {
        if host.read_link(link).is_some_and(|t| t == Path::new(BINARY)) {
            host.remove(link)
                .map_err(|e| Error::config(format!("cannot remove {}: {e}", link.display())))?;
            report.changes.push(format!("removed {}", link.display()));
        }
    }
    if !failed.is_empty() {
        return Err(Error::config(format!(
            "could not undo everything: {}; the manifest {} is kept",
            failed.join("; "),
            files::MANIFEST
        ))
        .fix("fix what is named, then run node uninstall again"));
    }
    Manifest::remove(&host)?;
    let _ = host.remove(Path::new(install::FAILED));
    // The directories installs created, innermost first, when empty; ours
    // (which holds the lock file) goes with the lock.
    for dir in manifest.directories.iter().rev() {
        if host.remove_dir(dir).unwrap_or(false) {
            report.changes.push(format!("removed {}", dir.display()));
        }
    }
    lock.remove_when_done(&manifest.directories);
    if args.restart_kubelet && !report.changes.is_empty() {
        let d = discover::discover(&host, &args.target.explicit());
        let unit = restart::restart_kubelet(&host, &d, &args.target.proc)?;
        report.restart = Some(match d.health_endpoint() {
            Some((a, p)) => {
                match restart::wait_healthy(args.target.proc_dir(), &a, p, args.health_timeout) {
                    Ok(()) => format!("restarted {unit}; healthy"),
                    Err(e) => {
                        return Err(Error::config(format!(
                            "restarted {unit}, which is not healthy: {e}"
                        )));
                    }
                }
            }
            None => format!("restarted {unit}"),
        });
    }
    Ok(())
}

/// Undoes one record.
fn undo(host: &Host, record: &Record, report: &mut Report) -> Result<()> {
    let shown = record.path.display();
    let now = Snapshot::take(host, &record.path)?;
    let ours = now.sha().is_some_and(|s| record.ours(s));
    if record.is_original(&now.state) {
        // A killed install never got to write it, or a rebuild put the
        // original back: only the backup, if any, is left to remove.
        if let Some(b) = &record.backup {
            let _ = host.remove(b);
        }
        report
            .changes
            .push(format!("{shown} already holds its original"));
        return Ok(());
    }
    if ours && files::restore_original(host, record)? {
        report.changes.push(match &record.original {
            Some(State::Absent) => format!("removed {shown}"),
            Some(State::Symlink { target }) => {
                format!("restored {shown} as the link to {}", target.display())
            }
            _ if record.backup.is_none() => format!("removed {shown}"),
            _ => format!("restored {shown}"),
        });
        return Ok(());
    }
    let Some(current) = now.bytes else {
        report.warnings.push(format!(
            "{shown} is gone or is no longer a file; nothing to undo there"
        ));
        return Ok(());
    };
    if ours && record.kind == Kind::Own {
        host.remove(&record.path)
            .map_err(|e| files::io_error("remove", &record.path, e))?;
        report.changes.push(format!("removed {shown}"));
        return Ok(());
    }
    match record.kind {
        Kind::Config => {
            let (bytes, removed) = merge::remove(&current, &record.path, &record.entries)?;
            if removed > 0 {
                host.write(&record.path, &bytes, file_mode(&now.state))
                    .map_err(|e| files::io_error("write", &record.path, e))?;
            }
            report.changes.push(format!(
                "{shown} {}: removed our {removed} entr{} only",
                if ours {
                    "has no backup left"
                } else {
                    "changed since install"
                },
                if removed == 1 { "y" } else { "ies" }
            ));
        }
        Kind::Environment => {
            let text = String::from_utf8_lossy(&current).into_owned();
            if !record.appended.is_empty() && text.contains(&record.appended) {
                let restored = text.replacen(&record.appended, "", 1);
                host.write(&record.path, restored.as_bytes(), file_mode(&now.state))
                    .map_err(|e| files::io_error("write", &record.path, e))?;
                report.changes.push(format!(
                    "{shown} changed since install: removed the flags we appended only"
                ));
            } else {
                report.warnings.push(format!(
                    "{shown} changed since install and no longer holds the flags we appended; left as it is"
                ));
            }
        }
        Kind::Own => {
            report.warnings.push(format!(
                "{shown} changed since install; left as it is (remove it if nothing else uses it)"
            ));
            return Ok(());
        }
    }
    if let Some(b) = &record.backup {
        let _ = host.remove(b);
    }
    Ok(())
}

fn file_mode(state: &State) -> u32 {
    match state {
        State::File { mode, .. } => *mode,
        _ => 0o644,
    }
}
