//! What an admin runs the binary for, beside serving the kubelet. Each
//! command reuses the serving pipeline's parts rather than copying them.

pub(crate) mod cache;
pub(crate) mod check_config;
pub(crate) mod explain;
pub(crate) mod node;

use std::ffi::{OsStr, OsString};
use std::process::ExitCode;

use crate::options::Options;
use wicp_base::flags::Choice;
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

/// The commands as clap reads them: only an admin's command line, from
/// its command word on, is parsed by clap. The cache's own flags
/// (`--cache-dir`, `--cache-max-entries`) are the command line's, read by
/// its parser wherever they are (`cache list --cache-dir DIR`); the
/// `cache` commands' help lists them from the same table.
fn clap_command() -> clap::Command {
    use clap::Subcommand;
    use wicp_base::flags::Flags;
    let mut cache_flags = String::from("Credential cache (also before the command):\n");
    for flag in wicp_providers::cache::Options::FLAGS {
        wicp_base::flags::write_help(&mut cache_flags, flag);
    }
    Command::augment_subcommands(
        clap::Command::new(crate::options::BINARY).subcommand_required(true),
    )
    .mut_subcommand("cache", |cache| {
        cache.mut_subcommands(|command| command.after_help(cache_flags.trim_end().to_string()))
    })
}

/// Parses an admin's command: `words` from the command's name on, for
/// the binary run as `arg0`. Its `--help` is clap's error kind that prints
/// on stdout.
pub(crate) fn parse(arg0: &OsStr, words: &[OsString]) -> Result<Command, clap::Error> {
    use clap::FromArgMatches;
    let argv = std::iter::once(arg0).chain(words.iter().map(OsString::as_os_str));
    let matches = clap_command().try_get_matches_from(argv)?;
    Command::from_arg_matches(&matches)
}

/// The clap value parser of a [`Choice`] enum of the layers below, which
/// declare their words once and do not use clap: its words are clap's
/// possible values.
pub(crate) fn choice<T>() -> impl clap::builder::TypedValueParser<Value = T>
where
    T: Choice + Clone + Send + Sync,
{
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(T::CHOICES.iter().map(|(word, _)| *word)).try_map(
        |word| {
            T::CHOICES
                .iter()
                .find(|(w, _)| *w == word)
                .map(|(_, value)| *value)
                .ok_or("not one of the possible values")
        },
    )
}

/// The names of the commands, which a provider entry's `args` must not
/// start with.
pub(crate) fn names() -> Vec<String> {
    summaries().into_iter().map(|(name, _)| name).collect()
}

/// Each command's name and what it does, for `--help`.
pub(crate) fn summaries() -> Vec<(String, String)> {
    clap_command()
        .get_subcommands()
        .map(|c| {
            let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
            (c.get_name().to_string(), about)
        })
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
