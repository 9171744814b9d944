//! What an admin runs the binary for, beside serving the kubelet. Each
//! command reuses the serving pipeline's parts rather than copying them.

pub(crate) mod cache;
pub(crate) mod check_config;
pub(crate) mod explain;
pub(crate) mod node;

use std::process::ExitCode;

use crate::options::Options;
use wicp_net::inputs::Inputs;

/// Commands for an admin. The kubelet runs the binary without one.
#[derive(clap::Subcommand, Debug, Clone)]
pub(crate) enum Command {
    /// Inspect or clear the on-disk credential cache (--cache-dir).
    #[command(subcommand)]
    Cache(cache::Command),
    /// Check a kubelet CredentialProviderConfig as the kubelet loads it, and
    /// for what it accepts but never works.
    CheckConfig(check_config::check::Args),
    /// Show, without any network call, what the kubelet would send for an
    /// image and a service account, and what this plugin would do with it.
    Explain(explain::Args),
    /// Install into, remove from, or diagnose a node's kubelet set-up.
    #[command(subcommand)]
    Node(node::Command),
}

/// The names of the commands, which a provider entry's `args` must not
/// start with.
pub(crate) fn names() -> Vec<String> {
    use clap::Subcommand;
    Command::augment_subcommands(clap::Command::new("x"))
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

/// Runs an admin command with the process's inputs, read once at start.
pub(crate) fn run(command: &Command, options: &Options, inputs: &Inputs) -> ExitCode {
    match command {
        Command::Cache(command) => {
            cache::run(&options.cache, options.max_cache_duration(), command)
        }
        Command::CheckConfig(args) => check_config::check::run(args, &inputs.env),
        Command::Explain(args) => explain::run(args, &inputs.env),
        Command::Node(command) => node::run(command, &inputs.env),
    }
}

/// Ends a command that changes the node (`node install`, `node
/// uninstall`) as [`report`] does, and when it failed with `error`, says
/// so on stderr too, as one line: the DaemonSet's log and a script's
/// `2>` see the failure, not only the report's reader.
pub(crate) fn report_change(
    command: &str,
    text: &str,
    error: Option<&wicp_base::error::Error>,
) -> ExitCode {
    let status = report(text, error.is_none());
    if let Some(e) = error {
        wicp_base::log::error(&e.clone().context(command));
    }
    status
}

/// Ends a command that writes a report to stdout: exit status 0 when the
/// report says all is well (`ok`), 1 when it found a problem, 2 when
/// stdout could not take it (a closed pipe): the caller saw nothing.
pub(crate) fn report(text: &str, ok: bool) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::from(2);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
