//! One run of the binary, from its command line to its exit status. The
//! kubelet execs the binary once per image pull; an admin runs it with a
//! command. This is the only dispatcher: it parses the command line, reads
//! the process inputs once, and hands over to the serving pipeline or to a
//! command. `main.rs` only picks the allocator and calls [`run`].

use std::ffi::OsString;
use std::process::ExitCode;

use crate::commands::{self, Command};
use crate::options::{self, CommandLine};
use crate::{serve, version};
use wicp_base::flags::{self, Asked};
use wicp_base::log;
use wicp_net::inputs::{Env, Inputs};

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

/// The command line, parsed once, by the one parser
/// ([`options::parse`]): every word and `WICP_*` variable is read once,
/// against the flag tables, which is all a kubelet's call has. A word
/// that is no flag starts an admin command, which clap reads from there
/// on ([`commands::parse`]). A refused line (or `--help` and `--version`)
/// ends the process here, with exit status 2 for a mistake.
fn parse(args: &[OsString], variables: &[(OsString, OsString)]) -> (CommandLine, Option<Command>) {
    let (given, asked) = options::parse(
        args,
        variables
            .iter()
            .map(|(name, value)| (name.as_os_str(), value.as_os_str())),
    );
    let format = options::log_format_of(&given);
    let arg0 = args.first().cloned().unwrap_or_default();
    let command = match asked {
        Asked::Serve => None,
        // `help` alone is `--help`; `help explain` is clap's.
        Asked::Command(words) if matches!(words.as_slice(), [only] if only == "help") => {
            print_and_exit(&options::help(&commands::summaries()))
        }
        Asked::Command(words) => {
            Some(commands::parse(&arg0, &words).unwrap_or_else(|e| command_error(&e, format)))
        }
        Asked::Help => print_and_exit(&options::help(&commands::summaries())),
        Asked::Version => print_and_exit(&format!("{} {}\n", options::BINARY, version::line())),
        Asked::Mistake(usage) => usage_error(&usage, format),
    };
    let line = CommandLine::read(&arg0, &given).unwrap_or_else(|e| usage_error(&e, format));
    (line, command)
}

/// Ends the process for `--help` and `--version`: `text` on stdout,
/// exit status 0 (2 if stdout is closed).
fn print_and_exit(text: &str) -> ! {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let written = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    std::process::exit(if written.is_ok() { 0 } else { 2 })
}

/// Ends the process for a command line the parser refused: `error: ...`,
/// the usage line and a pointer to `--help` on stderr, or one JSON line
/// when the line asked for JSON (`--log-format` or `WICP_LOG_FORMAT`);
/// exit status 2.
fn usage_error(usage: &flags::Usage, format: log::Format) -> ! {
    let text = format!(
        "error: {usage}\n\n{}\n\nFor more information, try '--help'.\n",
        options::USAGE
    );
    write_usage_error(&text, format)
}

/// Ends the process for an admin command's line that clap refused (or
/// its `--help`, which clap prints on stdout), as clap does, except that
/// a usage error asked for in JSON is one JSON line like every other.
fn command_error(e: &clap::Error, format: log::Format) -> ! {
    if e.use_stderr() {
        write_usage_error(&e.render().to_string(), format)
    }
    e.exit()
}

fn write_usage_error(text: &str, format: log::Format) -> ! {
    if format == log::Format::Json {
        log::set_format(log::Format::Json);
        log::write(log::Level::Error, format_args!("{}", text.trim_end()));
    } else {
        use std::io::Write;
        // Nothing is left to tell if stderr is closed.
        let _ = std::io::stderr().write_all(text.as_bytes());
    }
    std::process::exit(2)
}
