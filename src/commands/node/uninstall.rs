//! `node uninstall`: undo exactly what `node install` recorded. A file that
//! nothing else touched since gets its previous bytes back (or goes away if
//! install created it); a config changed since loses only our entries; an
//! environment file changed since loses only the text we appended.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use super::discover;
use super::files::{self, Kind, Manifest};
use super::{Target, merge, print, restart};
use crate::commands::check_config::check::Output;
use crate::error::{Error, Result};
use crate::options::BINARY;

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    #[command(flatten)]
    pub target: Target,

    /// Restart the kubelet if anything changed and wait for its health.
    #[arg(long)]
    pub restart_kubelet: bool,

    /// How long to wait for the kubelet to be healthy after a restart.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    pub health_timeout: Duration,
}

fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    crate::duration::parse(text).map_err(|e| e.to_string())
}

#[derive(Debug, Default, Serialize)]
struct Report {
    changes: Vec<String>,
    warnings: Vec<String>,
    restart: Option<String>,
    error: Option<String>,
}

pub fn run(args: &Args) -> ExitCode {
    let mut report = Report::default();
    let result = uninstall(args, &mut report);
    if let Err(e) = &result {
        report.error = Some(e.to_string());
    }
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
    if !print(&text) {
        return ExitCode::from(2);
    }
    if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn uninstall(args: &Args, report: &mut Report) -> Result<()> {
    let host = args.target.host();
    let Some(manifest) = Manifest::read(&host)? else {
        return Ok(());
    };
    for record in manifest.files.iter().rev() {
        let local = host.path(&record.path);
        let current = std::fs::read(&local).ok();
        let untouched = current.as_deref().map(files::sha256) == Some(record.written.clone());
        if untouched {
            files::restore(&host, record)?;
            report.changes.push(match &record.backup {
                Some(_) => format!("restored {}", record.path.display()),
                None => format!("removed {}", record.path.display()),
            });
            continue;
        }
        let Some(current) = current else {
            report.warnings.push(format!(
                "{} is gone; nothing to undo there",
                record.path.display()
            ));
            continue;
        };
        match record.kind {
            Kind::Config => {
                let (bytes, removed) = merge::remove(&current, &record.path, &record.entries)?;
                if removed > 0 {
                    files::atomic_write(&local, &bytes, files::mode_of(&local))?;
                }
                report.changes.push(format!(
                    "{} changed since install: removed our {} entr{} only",
                    record.path.display(),
                    removed,
                    if removed == 1 { "y" } else { "ies" }
                ));
            }
            Kind::Environment => {
                let text = String::from_utf8_lossy(&current).into_owned();
                if !record.appended.is_empty() && text.contains(&record.appended) {
                    let restored = text.replacen(&record.appended, "", 1);
                    files::atomic_write(&local, restored.as_bytes(), files::mode_of(&local))?;
                    report.changes.push(format!(
                        "{} changed since install: removed the flags we appended only",
                        record.path.display()
                    ));
                } else {
                    report.warnings.push(format!(
                        "{} changed since install and no longer holds the flags we appended; left as it is",
                        record.path.display()
                    ));
                }
            }
            Kind::Own => {
                report.warnings.push(format!(
                    "{} changed since install; left as it is (remove it if nothing else uses it)",
                    record.path.display()
                ));
                continue;
            }
        }
        if let Some(b) = &record.backup {
            let _ = std::fs::remove_file(host.path(b));
        }
    }
    for link in &manifest.binaries {
        let local = host.path(link);
        if std::fs::read_link(&local).is_ok_and(|t| t == Path::new(BINARY)) {
            std::fs::remove_file(&local)
                .map_err(|e| Error::config(format!("cannot remove {}: {e}", local.display())))?;
            report.changes.push(format!("removed {}", link.display()));
        }
    }
    Manifest::remove(&host)?;
    if args.restart_kubelet && !report.changes.is_empty() {
        let d = discover::discover(&host, &args.target.explicit());
        let unit = restart::unit_to_restart(&host, d.distro.units());
        restart::systemctl(&host, &["restart", unit])?;
        report.restart = Some(match d.health_endpoint() {
            Some((a, p)) => match restart::wait_healthy(&a, p, args.health_timeout) {
                Ok(()) => format!("restarted {unit}; healthy"),
                Err(e) => {
                    return Err(Error::config(format!(
                        "restarted {unit}, which is not healthy: {e}"
                    )));
                }
            },
            None => format!("restarted {unit}"),
        });
    }
    Ok(())
}
