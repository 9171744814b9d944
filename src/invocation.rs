//! One run of the binary, from its command line to its exit status. The
//! kubelet execs the binary once per image pull; an admin runs it with a
//! command. This is the only dispatcher: it parses the command line, reads
//! the process inputs once, and hands over to the serving pipeline or to a
//! command. `main.rs` only picks the allocator and calls [`run`].

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{FromArgMatches, Subcommand};

use crate::commands::{self, Command};
use crate::inputs::{Env, Inputs};
use crate::options::{self, CommandLine};
use crate::{log, serve, version};

/// Runs the binary on the process's command line and environment.
pub fn run() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let variables: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    log::set_format(options::log_format_asked(&args, &variables));
    let (line, command) = parse(&args, &variables);
    log::set_level(line.options.log_level);
    log::set_format(line.options.log_format);
    log::redact_panics();
    let inputs = Inputs::new(Env::from_os(variables), line.options.ca_file.clone());
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

/// The command line, parsed once: the serving command line
/// ([`options::parse_serving`], only the flags a hit needs) when it
/// answers, else the whole one, with its admin command if it names one.
/// A command line clap refuses ends the process here (exit status 2).
fn parse(args: &[OsString], variables: &[(OsString, OsString)]) -> (CommandLine, Option<Command>) {
    if let Some(line) = options::parse_serving(args, variables) {
        return (line, None);
    }
    let matches = parse_whole(args).unwrap_or_else(|e| usage_error(&e));
    let command = matches
        .subcommand()
        .is_some()
        .then(|| Command::from_arg_matches(&matches).unwrap_or_else(|e| usage_error(&e)));
    let arg0 = args.first().cloned().unwrap_or_default();
    match CommandLine::new(&arg0, matches) {
        Ok(line) => (line, command),
        Err(e) => {
            log::write(log::Level::Error, format_args!("{e}"));
            std::process::exit(2);
        }
    }
}

/// Ends the process for a command line clap refused (or `--help` and
/// `--version`, which clap prints on stdout): as clap does, except that a
/// usage error asked for in JSON is one JSON line like every other.
fn usage_error(e: &clap::Error) -> ! {
    if e.use_stderr() && log::is_json() {
        log::write(log::Level::Error, format_args!("{}", e.render()));
        std::process::exit(2);
    }
    e.exit()
}

/// Parses the command line that [`options::parse_serving`] left to the
/// whole command line. The serving flags are tried alone first, so the
/// admin commands' arguments (check-config, explain, cache) are not built
/// for another provider's flag. The serving command has no positional
/// argument, so it accepts exactly the command lines without a command,
/// and reads them as the full command would. Anything else, a command,
/// `--help`, `--version` or a mistake, is parsed again by the full command,
/// so what it says is what it always said.
fn parse_whole(args: &[OsString]) -> Result<clap::ArgMatches, clap::Error> {
    if let Ok(matches) = options::command().try_get_matches_from(args) {
        return Ok(matches);
    }
    Command::augment_subcommands(options::command().version(version::line()))
        .try_get_matches_from(args)
}
