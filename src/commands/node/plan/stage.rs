//! The kubelet's view of a credential-provider set-up, copied into a
//! private directory for check-config: the config (one file, or a
//! directory with its other files) and a bin dir of links to what the
//! node's bin dir holds, each resolved inside the root, so that an
//! absolute link (AKS on Flatcar links `acr-credential-provider` into
//! `/usr/bin`) means the node's file and not one of the installer's own.
//! Install stages the merged config before anything is written; doctor
//! stages the live one.

use std::path::{Path, PathBuf};

use wicp_base::error::{Error, Result};
use wicp_base::platform::{Host, Kind};

/// The staged copy; removed on drop.
pub(crate) struct Stage {
    pub(crate) dir: PathBuf,
    pub(crate) config: PathBuf,
    pub(crate) bin_dir: PathBuf,
    /// The node's config path the staged one stands for.
    real_config: PathBuf,
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A private temporary directory with an unpredictable name, under the
/// system's temporary directory (TMPDIR, else /tmp): an image without one
/// gets a line that names it.
pub(crate) fn private_temp_dir(prefix: &str) -> Result<PathBuf> {
    wicp_base::platform::private_temp_dir(prefix).map_err(|e| {
        Error::config(format!(
            "cannot create a private temporary directory in {}: {e}",
            std::env::temp_dir().display()
        ))
        .fix("set TMPDIR to a writable directory (a container image needs a /tmp)")
    })
}

fn io(e: std::io::Error) -> Error {
    Error::config(format!("cannot stage the config for checking: {e}"))
}

/// What goes in the staged config: one file's bytes, or a directory's
/// files with one of them replaced (or added).
pub(crate) enum Config<'a> {
    File {
        path: &'a Path,
        bytes: &'a [u8],
    },
    Directory {
        dir: &'a Path,
        ours: Option<(&'a Path, &'a [u8])>,
    },
}

/// Stages `config` and the node's `bin_dir`, with `extra` names linked to
/// `binary` (the binary about to be installed).
pub(crate) fn stage(
    host: &Host,
    config: Config<'_>,
    bin_dir: &Path,
    extra: &[String],
    binary: Option<&Path>,
) -> Result<Stage> {
    let root = private_temp_dir("wicp-node")?;
    let mut stage = Stage {
        config: PathBuf::new(),
        bin_dir: root.join("bin"),
        dir: root,
        real_config: PathBuf::new(),
    };
    match config {
        Config::File { path, bytes } => {
            let p = stage.dir.join(path.file_name().unwrap_or_default());
            std::fs::write(&p, bytes).map_err(io)?;
            stage.config = p;
            stage.real_config = path.to_path_buf();
        }
        Config::Directory { dir, ours } => {
            let staged = stage.dir.join("config.d");
            std::fs::create_dir(&staged).map_err(io)?;
            if let Ok(entries) = host.read_dir(dir) {
                for (name, kind) in entries {
                    if kind == Kind::Dir {
                        continue;
                    }
                    let path = dir.join(&name);
                    // The kubelet follows links and fails on anything it
                    // cannot read: so does the staged copy, bounded.
                    match host.read_bytes(&path, wicp_base::yaml::MAX_BYTES) {
                        Ok(Some(bytes)) => std::fs::write(staged.join(&name), bytes).map_err(io)?,
                        _ => {
                            let _ = wicp_base::platform::symlink(
                                Path::new("/nonexistent"),
                                &staged.join(&name),
                            );
                        }
                    }
                }
            }
            if let Some((path, bytes)) = ours {
                std::fs::write(staged.join(path.file_name().unwrap_or_default()), bytes)
                    .map_err(io)?;
            }
            stage.config = staged;
            stage.real_config = dir.to_path_buf();
        }
    }
    let bin = stage.bin_dir.clone();
    std::fs::create_dir(&bin).map_err(io)?;
    if let Ok(entries) = host.read_dir(bin_dir) {
        for (name, _) in entries {
            let target = host
                .local(&bin_dir.join(&name))
                .unwrap_or_else(|_| PathBuf::from("/nonexistent"));
            let _ = wicp_base::platform::symlink(&target, &bin.join(&name));
        }
    }
    if let Some(binary) = binary {
        let binary = std::fs::canonicalize(binary).unwrap_or_else(|_| binary.to_path_buf());
        for name in extra {
            let link = bin.join(name);
            let _ = std::fs::remove_file(&link);
            wicp_base::platform::symlink(&binary, &link).map_err(io)?;
        }
    }
    Ok(stage)
}

impl Stage {
    /// Maps a staged file name in a finding back to the node's path.
    pub(crate) fn unstage(&self, file: &str) -> String {
        let f = Path::new(file);
        if f == self.config {
            return self.real_config.display().to_string();
        }
        let real_dir = if self.config.ends_with("config.d") {
            self.real_config.clone()
        } else {
            self.real_config
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default()
        };
        f.strip_prefix(&self.config)
            .or_else(|_| f.strip_prefix(&self.dir))
            .map(|rest| real_dir.join(rest).display().to_string())
            .unwrap_or_else(|_| file.to_string())
    }
}

/// check-config over a CredentialProviderConfig rendered for a node
/// system that installs it itself (Talos, OpenShift), with the plugin
/// directory that system will have: this binary under each of our names
/// the entries use, and a stand-in for any other (a platform's own plugin,
/// whose checks are the platform's). `Err` as [`errors_refused`] says.
pub(crate) fn check_rendered(
    config: &[u8],
    facts: &crate::commands::check_config::isolation::KubeletFacts,
    shown_as: &str,
    fix: &str,
) -> Result<()> {
    let dir = private_temp_dir("wicp-render")?;
    let result = (|| {
        let file = dir.join("credential-provider.yaml");
        std::fs::write(&file, config).map_err(io)?;
        let bin = dir.join("bin");
        std::fs::create_dir(&bin).map_err(io)?;
        let exe = std::env::current_exe().map_err(|e| {
            Error::config(format!(
                "cannot find this executable to check the entries: {e}"
            ))
        })?;
        let ours = crate::version::plugin_names();
        let doc = wicp_kubelet::config::merge::parse(config, &file)?;
        for entry in wicp_kubelet::config::merge::providers(&doc) {
            let name = wicp_kubelet::config::merge::entry_name(&entry);
            if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
                continue;
            }
            if ours.iter().any(|n| n == name) {
                wicp_base::platform::symlink(&exe, &bin.join(name)).map_err(io)?;
            } else {
                wicp_base::platform::write_executable(&bin.join(name), b"#!/bin/sh\nexit 1\n")
                    .map_err(io)?;
            }
        }
        let report = crate::commands::check_config::check::check_with(&file, Some(&bin), facts);
        errors_refused(&report, shown_as, fix)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `Ok` when check-config found no error in a config rendered for a node
/// system; otherwise one line with the count and the first errors, the
/// staged file shown as `shown_as` (its temporary path means nothing to
/// the admin).
fn errors_refused(
    report: &crate::commands::check_config::check::Report,
    shown_as: &str,
    fix: &str,
) -> Result<()> {
    use std::fmt::Write as _;
    const SHOWN: usize = 2;
    if report.ok() {
        return Ok(());
    }
    let errors: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.severity == wicp_kubelet::config::Severity::Error)
        .collect();
    let mut lines = String::new();
    for f in errors.iter().take(SHOWN) {
        let mut f = (*f).clone();
        f.file = shown_as.to_string();
        let _ = write!(lines, "; {f}");
    }
    if errors.len() > SHOWN {
        let _ = write!(lines, "; and {} more", errors.len() - SHOWN);
    }
    Err(Error::config(format!(
        "the config has {} error(s) the kubelet would trip on{lines}",
        report.errors
    ))
    .fix(fix))
}
