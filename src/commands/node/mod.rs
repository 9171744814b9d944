//! `wi-credential-provider node install|uninstall|doctor`: put this plugin
//! into the kubelet's real credential-provider set-up on a node, take it
//! out again, and say what is wrong with a node's set-up.
//!
//! These run as root on every node of a fleet, on nodes where tenants run
//! processes and own files; so [`wicp_base::platform::Host`] resolves every
//! path inside `--root` and writes without following links,
//! [`discover::identify`] trusts only facts a tenant cannot forge about
//! which process is the kubelet, and [`exec`] runs nothing without a
//! deadline.
//!
//! The folders are the phases of `node install`, in the order it runs
//! them: [`discover`] finds the kubelet's flags and files (with
//! [`discover::systemd`] reading units and [`discover::distro`] knowing
//! each distribution's paths, hooks and what rewrites them); [`plan`]
//! decides what changes where, with our entries merged into the config in
//! its own format ([`wicp_kubelet::config::merge`]), and
//! [`plan::stage`] gives check-config a private copy to validate;
//! [`apply`] writes crash-safe with an intent log ([`apply::files`]) and
//! [`apply::restart`] restarts the kubelet and rolls back once if it does
//! not come back healthy; [`verify`] is `node doctor`. [`render`](mod@render) prints
//! what the node systems we do not write to take instead (Talos,
//! OpenShift) and the RBAC the audiences need. [`install`] and
//! [`uninstall`] are the commands that run the phases.

pub(crate) mod apply;
pub(crate) mod discover;
pub(crate) mod exec;
pub(crate) mod install;
pub(crate) mod plan;
pub(crate) mod render;
pub(crate) mod uninstall;
pub(crate) mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use wicp_kubelet::config::configuration::Version;
use wicp_net::inputs::Env;

/// Where the node is and what is known about its kubelet.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct Target {
    /// The node's root: `/` on the node (`C:\` on Windows, where a
    /// HostProcess pod sees the host's disk), the mounted host root in a
    /// privileged pod (`/host`), or an image being built.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_ROOT)]
    pub(crate) root: PathBuf,

    /// The proc file system to find the running kubelet in (the host's own
    /// from a pod with hostPID); `none` skips it. Not read on Windows.
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub(crate) proc: PathBuf,

    /// The kubelet's --image-credential-provider-config, when discovery
    /// should not look for it.
    #[arg(long, value_name = "PATH")]
    pub(crate) kubelet_credential_config: Option<PathBuf>,

    /// The kubelet's --image-credential-provider-bin-dir.
    #[arg(long, value_name = "DIR")]
    pub(crate) kubelet_bin_dir: Option<PathBuf>,

    /// The kubelet's KubeletConfiguration (its --config).
    #[arg(long, value_name = "PATH")]
    pub(crate) kubelet_config: Option<PathBuf>,

    /// The kubelet's version, when `kubelet --version` cannot be run.
    #[arg(long, value_name = "VERSION", value_parser = parse_version)]
    pub(crate) kubelet_version: Option<Version>,

    /// Report format.
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "text")]
    pub(crate) output: crate::commands::check_config::check::Output,
}

/// The node's root by default: `/`, or the system drive on Windows.
const DEFAULT_ROOT: &str = if wicp_base::platform::WINDOWS {
    r"C:\"
} else {
    "/"
};

fn parse_version(text: &str) -> Result<Version, String> {
    Version::parse(text).ok_or_else(|| format!("{text:?} is not a kubelet version such as v1.34.2"))
}

impl Target {
    /// The node's root, opened; every path is resolved inside it.
    pub(crate) fn host(&self) -> wicp_base::error::Result<wicp_base::platform::Host> {
        wicp_base::platform::Host::open(&self.root).map_err(|e| {
            wicp_base::error::Error::config(format!(
                "cannot open the node's root {}: {e}",
                self.root.display()
            ))
            .fix(if wicp_base::platform::WINDOWS {
                "pass --root with the node's system drive (C:\\, the default)"
            } else {
                "pass --root with the directory where the host's / is mounted (/host in the DaemonSet)"
            })
        })
    }

    /// The host's proc file system, `None` with `--proc none` and on
    /// Windows (which has none: the kubelet's flags are read from its
    /// distribution's own record, and a HostProcess pod is on the host's
    /// network).
    pub(crate) fn proc_dir(&self) -> Option<&std::path::Path> {
        (self.proc.as_os_str() != "none" && !wicp_base::platform::WINDOWS)
            .then_some(self.proc.as_path())
    }

    pub(crate) fn explicit(&self) -> discover::Explicit {
        discover::Explicit {
            credential_config: self.kubelet_credential_config.clone(),
            bin_dir: self.kubelet_bin_dir.clone(),
            kubelet_config: self.kubelet_config.clone(),
            kubelet_version: self.kubelet_version,
            proc: self.proc_dir().map(std::path::Path::to_path_buf),
        }
    }
}

#[derive(clap::Subcommand, Debug, Clone)]
pub(crate) enum Command {
    /// Install this binary and its provider entries into the kubelet's real
    /// credential-provider set-up, found on the node.
    Install(install::Args),
    /// Undo what install did: files it changed get their previous bytes back.
    Uninstall(uninstall::Args),
    /// Report, without changing anything, what is wrong with the node's
    /// credential-provider set-up. Exit 0 when nothing is, 1 otherwise.
    Doctor(verify::doctor::Args),
    /// Print the configuration a node system that cannot be changed in
    /// place takes instead (Talos: a machine-configuration patch;
    /// OpenShift: a MachineConfig and a MachineOSConfig), or RBAC.
    #[command(subcommand)]
    Render(Render),
    /// Do nothing until stopped: the installer DaemonSet's main container,
    /// which keeps its pod up once the init container has installed (its
    /// image holds this binary and nothing else, no shell to sleep in).
    Wait,
    /// Internal: run a program in PID 1's namespaces, as `nsenter --target 1
    /// --mount --uts --ipc --net --pid` would. `--restart-kubelet` from a
    /// DaemonSet pod runs the host's systemctl this way: the image has no
    /// nsenter. Needs the privilege to enter them (root in a privileged pod).
    #[command(hide = true)]
    HostExec(HostExecArgs),
}

/// What `node render` renders, per node system.
#[derive(clap::Subcommand, Debug, Clone)]
pub(crate) enum Render {
    /// The Talos machine-configuration patch for the provider entries: the
    /// plugins come from the Talos system extension `make release` builds.
    Talos(render::talos::Args),
    /// The OpenShift MachineConfig (the kubelet's credential-provider
    /// config) and MachineOSConfig (the binary, layered into the pool's
    /// image from the release's node image) for a pool.
    Openshift(render::openshift::Args),
    /// The ClusterRole and binding that let the kubelet request service
    /// account tokens for the entries' audiences (what `node install`
    /// reports as `rbac`), to apply with kubectl.
    Rbac(Entries),
}

/// The provider entries a command installs or renders.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Entries {
    /// Add the ready entry for this provider (the one in config-examples).
    /// Passthrough needs your registries: use --config.
    #[arg(long, value_enum, value_name = "PROVIDER")]
    pub(crate) provider: Vec<plan::ReadyProvider>,

    /// Add the provider entries of this CredentialProviderConfig.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// With `node`, each --provider entry also serves the node's identity
    /// to pods that did not opt in (the plugin's --fallback node, and
    /// requireServiceAccount: false), so it replaces the stock cloud plugin:
    /// pair it with --replace ecr-credential-provider (acr-credential-provider,
    /// auth-provider-gcp) in `node install`.
    #[arg(
        long,
        value_name = "none|node",
        default_value = "none",
        value_parser = crate::commands::choice::<wicp_providers::fallback::Fallback>()
    )]
    pub(crate) fallback: wicp_providers::fallback::Fallback,
}

impl Entries {
    /// The entries, each checked as `node install` checks them.
    pub(crate) fn read(&self) -> wicp_base::error::Result<Vec<yaml_serde::Value>> {
        plan::our_entries(&self.provider, self.fallback, self.config.as_deref())
    }
}

/// `node render`: the text on stdout, or nothing there and one line on
/// stderr saying why none can be made.
fn render(what: &Render, env: &Env) -> ExitCode {
    let (command, rendered) = match what {
        Render::Talos(args) => ("node render talos", render::talos::render(args, env)),
        Render::Openshift(args) => (
            "node render openshift",
            render::openshift::render(args, env),
        ),
        Render::Rbac(entries) => ("node render rbac", render_rbac(entries)),
    };
    match rendered {
        Ok(text) => crate::commands::report_change(command, &text, None),
        Err(e) => crate::commands::report_change(command, "", Some(&e)),
    }
}

/// The RBAC manifest for the entries' audiences.
fn render_rbac(entries: &Entries) -> wicp_base::error::Result<String> {
    let manifest = render::rbac::manifest(&render::rbac::audiences(&entries.read()?));
    if manifest.is_empty() {
        return Err(wicp_base::error::Error::config(
            "no entry has tokenAttributes: the kubelet requests no token, so needs no RBAC",
        ));
    }
    Ok(manifest)
}

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct HostExecArgs {
    /// The host's proc file system (/proc with hostPID).
    #[arg(long, value_name = "DIR")]
    proc: PathBuf,
    /// The program, found on PATH in PID 1's mount namespace, and its
    /// arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    command: Vec<std::ffi::OsString>,
}

/// Runs a node command; `env` is this process's environment, read once.
pub(crate) fn run(command: &Command, env: &Env) -> ExitCode {
    match command {
        Command::Install(args) => install::run(args, env),
        Command::Uninstall(args) => uninstall::run(args),
        Command::Doctor(args) => verify::doctor::run(args, env),
        Command::Render(what) => render(what, env),
        Command::Wait => wait(),
        Command::HostExec(args) => host_exec(args),
    }
}

/// `node host-exec`: the program's own exit status (1 when it was killed by
/// a signal), or 1 with one line when the namespaces could not be entered.
fn host_exec(args: &HostExecArgs) -> ExitCode {
    let Some((program, rest)) = args.command.split_first() else {
        return ExitCode::from(2);
    };
    match wicp_base::platform::run_in_host_namespaces(&args.proc, program, rest) {
        Ok(status) => ExitCode::from(
            status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1),
        ),
        Err(e) => {
            wicp_base::log::error(
                &wicp_base::error::Error::config(e)
                    .context("node host-exec")
                    .fix("run it as root in a privileged pod with hostPID"),
            );
            ExitCode::FAILURE
        }
    }
}

/// Parks the thread for good. As PID 1 of a container without a handler,
/// the process ignores SIGTERM, so the kubelet stops it with SIGKILL once
/// the pod's grace period (one second in the DaemonSet) is over: nothing
/// is lost, since nothing is being done.
fn wait() -> ExitCode {
    loop {
        std::thread::park();
    }
}
