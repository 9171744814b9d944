//! `wi-credential-provider check-config FILE|DIR`: load a config as the
//! kubelet does, validate it as the kubelet does, lint it for what the
//! kubelet accepts but never works, and report every finding with its file,
//! provider and field. Exit status 0 without errors, 1 with.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;

use super::isolation::{self, KubeletFacts};
use super::lint;
use wicp_kubelet::config::configuration::{KubeletConfig, Version};
use wicp_kubelet::config::provider_config::load;
use wicp_kubelet::config::{Finding, Severity, validate};
use wicp_net::inputs::Env;

fn parse_version(text: &str) -> Result<Version, String> {
    Version::parse(text).ok_or_else(|| format!("{text:?} is not a kubelet version such as v1.34.2"))
}

#[derive(clap::Args, Clone, Debug)]
pub(crate) struct Args {
    /// The kubelet's --image-credential-provider-config: a file, or a
    /// directory whose *.json, *.yaml and *.yml files are merged in
    /// lexicographic order.
    #[arg(value_name = "FILE|DIR")]
    pub(crate) path: PathBuf,

    /// The kubelet's --image-credential-provider-bin-dir: check that every
    /// provider name has an executable (or a symlink to one) there.
    #[arg(long, value_name = "DIR")]
    pub(crate) bin_dir: Option<PathBuf>,

    /// The kubelet's KubeletConfiguration (its --config): checks whether
    /// another service account could start an image pulled with a pod's
    /// identity (KEP-2535 verification).
    #[arg(long, value_name = "PATH")]
    pub(crate) kubelet_config: Option<PathBuf>,

    /// The kubelet's --config-dir, laid over --kubelet-config.
    #[arg(long, value_name = "DIR", requires = "kubelet_config")]
    pub(crate) kubelet_config_dir: Option<PathBuf>,

    /// The kubelet's version (`kubelet --version`, e.g. v1.34.2): directory
    /// configs need 1.34, present-image verification is on from 1.35.
    #[arg(long, value_name = "VERSION", value_parser = parse_version)]
    pub(crate) kubelet_version: Option<Version>,

    /// Report format.
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "text")]
    pub(crate) output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    Text,
    Json,
}

/// The whole result, as `--output json` prints it.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) path: String,
    pub(crate) files: Vec<String>,
    pub(crate) providers: Vec<String>,
    pub(crate) errors: usize,
    pub(crate) warnings: usize,
    pub(crate) findings: Vec<Finding>,
}

impl Report {
    pub(crate) fn ok(&self) -> bool {
        self.errors == 0
    }
}

/// Every finding for the config at `path`, in file and provider order,
/// knowing the kubelet's version and KubeletConfiguration (`facts`).
pub(crate) fn check_with(path: &Path, bin_dir: Option<&Path>, facts: &KubeletFacts) -> Report {
    let loaded = load(path);
    let mut findings = loaded.findings.clone();
    findings.extend(validate::validate(&loaded));
    findings.extend(lint::lint(&loaded, bin_dir, &facts.env));
    findings.extend(isolation::lint(&loaded, bin_dir, facts));
    // Stable order: by file, then by provider entry as they appear.
    let position = |f: &Finding| {
        loaded
            .files
            .iter()
            .position(|file| file.display().to_string() == f.file)
            .unwrap_or(usize::MAX)
    };
    let index = |f: &Finding| {
        f.field
            .strip_prefix("providers[")
            .and_then(|rest| rest.split(']').next())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
    };
    findings.sort_by_key(|f| (position(f), index(f)));
    Report {
        path: path.display().to_string(),
        files: loaded
            .files
            .iter()
            .map(|f| f.display().to_string())
            .collect(),
        providers: loaded
            .entries
            .iter()
            .map(|e| e.name().to_string())
            .collect(),
        errors: findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count(),
        warnings: findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .count(),
        findings,
    }
}

/// Runs the subcommand; the report goes to stdout.
/// `env` is this process's environment, the closest stand-in for the
/// kubelet's.
pub(crate) fn run(args: &Args, env: &Env) -> ExitCode {
    let config = match &args.kubelet_config {
        Some(file) => match KubeletConfig::read(file, args.kubelet_config_dir.as_deref()) {
            Ok(config) => Some(config),
            Err(e) => {
                wicp_base::log::error(&e);
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let facts = KubeletFacts {
        env: env.clone(),
        config,
        version: args.kubelet_version,
    };
    let report = check_with(&args.path, args.bin_dir.as_deref(), &facts);
    let text = match args.output {
        Output::Json => serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
        Output::Text => render_text(&report),
    };
    crate::commands::report(&text, report.ok())
}

fn render_text(report: &Report) -> String {
    let mut text = String::new();
    for finding in &report.findings {
        text.push_str(&finding.to_string());
        text.push('\n');
    }
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    text.push_str(&format!(
        "{}: {} in {}, {}, {}\n",
        report.path,
        plural(report.providers.len(), "provider"),
        plural(report.files.len(), "file"),
        plural(report.errors, "error"),
        plural(report.warnings, "warning"),
    ));
    text
}
