//! One run of the binary, from its command line to its exit status. The
//! kubelet execs the binary once per image pull; an admin runs it with a
//! command. This is the only dispatcher: it parses the command line, reads
//! the process inputs once, and hands over to the serving pipeline or to a
//! command. `main.rs` only picks the allocator and calls [`run`].

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{FromArgMatches, Subcommand};

use crate::commands::{self, Command};
use crate::options::{self, CommandLine};
use crate::{serve, version};
use wicp_base::log;
use wicp_net::inputs::{Env, Inputs};
use wicp_providers as providers;

/// Runs the binary on the process's command line and environment.
pub fn run() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let variables: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let (line, command) = parse(&args, &variables);
    log::set_level(line.options.log_level());
    log::set_format(line.options.log_format());
    log::redact_panics();
    let inputs = Inputs::new(
        Env::from_os(variables),
        line.options.ca_file.clone(),
        line.options.cache.cache_dir.clone(),
    );
    if let Some(command) = command {
        return commands::run(&command, &line.options, &inputs);
    }
    let status = serve::run(&line, &inputs);
    // The kubelet starts a process per image pull, and what is left here
    // (the parsed command line, the environment's copy) is only memory:
    // exiting now flushes stdout and hands it all back at once, instead
    // of freeing it piece by piece first (docs/performance.md).
    std::process::exit(i32::from(status))
}

/// The command line, parsed once, by one clap command chosen before it
/// reads anything: the serving command with only the flags the line can
/// use ([`options::serving_command`]), which is what the kubelet's every
/// call gets, else the whole command line, every provider's flags and the
/// admin commands. A command line clap refuses (or `--help` and
/// `--version`) ends the process here, with exit status 2 for a mistake.
fn parse(args: &[OsString], variables: &[(OsString, OsString)]) -> (CommandLine, Option<Command>) {
    let (mut command, carried) = options::serving_command(args, variables).unwrap_or_else(|| {
        let whole = Command::augment_subcommands(options::command().version(version::line()));
        (whole, providers::ALL.to_vec())
    });
    let matches = command
        .try_get_matches_from_mut(args)
        .unwrap_or_else(|e| usage_error(&e, args, variables));
    // Not freed: the process ends within milliseconds, and freeing clap's
    // command argument by argument was 3% of a cache hit (issue 47).
    std::mem::forget(command);
    let command = matches.subcommand().is_some().then(|| {
        Command::from_arg_matches(&matches).unwrap_or_else(|e| usage_error(&e, args, variables))
    });
    let arg0 = args.first().cloned().unwrap_or_default();
    let line = CommandLine::read(&arg0, matches, &carried)
        .unwrap_or_else(|e| usage_error(&e, args, variables));
    (line, command)
}

/// Ends the process for a command line clap refused (or `--help` and
/// `--version`, which clap prints on stdout): as clap does, except that a
/// usage error asked for in JSON (by `--log-format` or `WICP_LOG_FORMAT`,
/// read without clap) is one JSON line like every other.
fn usage_error(e: &clap::Error, args: &[OsString], variables: &[(OsString, OsString)]) -> ! {
    if e.use_stderr() && options::log_format_asked(args, variables) == log::Format::Json {
        log::set_format(log::Format::Json);
        log::write(log::Level::Error, format_args!("{}", e.render()));
        std::process::exit(2);
    }
    e.exit()
}
