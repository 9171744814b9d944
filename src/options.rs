//! The serving command line: the flags the kubelet's provider entry passes
//! (`args`), their `WICP_*` environment variables (`env`), and the rule that
//! the binary's own name picks a provider.
//!
//! Each provider adds its own flags ([`Provider::flags`]); the admin
//! commands are added by `main`, which is the only place that knows both.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) use clap::ArgMatches;
use clap::builder::PossibleValue;
use clap::{CommandFactory, FromArgMatches, Parser};

use wicp_base::duration;
use wicp_base::error::{Error, Result};
use wicp_base::log::{Format, Level};
use wicp_providers::cache;

use wicp_providers::{self as providers, Provider};

/// The binary's name; `<this>-aws`, `<this>-azure` ... select a provider.
pub const BINARY: &str = "wi-credential-provider";

/// The `--provider` value that routes by registry host.
pub(crate) const AUTO: &str = "auto";

const ABOUT: &str = "Kubelet image credential provider: each pod pulls images with its own service account identity.";

const LONG_ABOUT: &str = "\
Kubelet image credential provider: each pod pulls images with its own service account identity.

The kubelet runs this binary for each image pull, writes a CredentialProviderRequest
(with the pod's service account token, KEP-4412) to stdin, and reads one
CredentialProviderResponse from stdout. Logs go to stderr.

Every option can also be set with an environment variable WICP_<OPTION> (for example
WICP_PROVIDER=aws), which the kubelet passes from its config's `env`; the command-line
flag wins. Durations are written like the kubelet's: 45s, 10m, 1h, 1h30m.

Exit status: 0 with a response on stdout; 1 when no credential could be produced (one
line on stderr says why and how to fix it); 2 for bad command-line usage.";

/// The flags every invocation shares; each provider's own are added by
/// [`command`].
#[derive(Parser, Debug, Clone)]
#[command(name = BINARY, version, about = ABOUT, long_about = LONG_ABOUT)]
pub(crate) struct Options {
    /// Which provider turns the token into registry credentials. Without
    /// this flag the binary's own name decides (`wi-credential-provider-aws`
    /// means aws, and so on), else `auto`, which picks a cloud provider
    /// (aws, azure, gcp) from the registry host and never any other.
    #[arg(long, value_name = "PROVIDER", env = "WICP_PROVIDER", value_parser = clap::builder::PossibleValuesParser::new(names()))]
    pub(crate) provider: Option<String>,

    /// The audience the service account token must carry, replacing the
    /// provider's default. Must equal tokenAttributes.serviceAccountTokenAudience.
    #[arg(long, value_name = "AUDIENCE", env = "WICP_AUDIENCE")]
    pub(crate) audience: Option<String>,

    /// Upper bound on the cacheDuration returned to the kubelet, which is
    /// otherwise 80% of the credential's remaining lifetime. It bounds how
    /// long a revoked permission keeps working on a node. Default: 1h.
    // Not clap defaults, here and below: a value clap holds as a default
    // is parsed on every invocation, and the shared flags' defaults were
    // 2% of a cache hit's instructions (issue 47).
    #[arg(long, value_name = "DURATION", env = "WICP_MAX_CACHE_DURATION", value_parser = parse_duration)]
    max_cache_duration: Option<Duration>,

    /// Overall deadline for one invocation, shared by reading the request on
    /// stdin and every upstream call. Keep it below the kubelet's hard 60s
    /// kill. Default: 45s.
    #[arg(long, value_name = "DURATION", env = "WICP_TIMEOUT", value_parser = parse_timeout)]
    timeout: Option<Duration>,

    /// A PEM bundle of extra CA certificates trusted by every upstream call,
    /// on top of the node's trust store (SSL_CERT_FILE replaces that store,
    /// as in OpenSSL): the CA of a TLS-inspecting proxy or a private endpoint.
    #[arg(long = wicp_net::trust::CA_FILE.long, value_name = "PATH", env = wicp_net::trust::CA_FILE.env)]
    pub(crate) ca_file: Option<PathBuf>,

    /// Log level for stderr. `info` writes at most one line per successful
    /// invocation; no level ever logs a token or password. Default: info.
    #[arg(long, value_enum, value_name = "LEVEL", env = "WICP_LOG_LEVEL")]
    log_level: Option<Level>,

    /// How stderr lines are written: `text` for people, `json` for one
    /// JSON object per line (time, level, message, provider, registry,
    /// service_account, outcome, kind, cache, duration_seconds, upstream_status,
    /// fix). Masking applies to both. Default: text.
    #[arg(long, value_enum, value_name = "FORMAT", env = "WICP_LOG_FORMAT")]
    log_format: Option<wicp_base::log::Format>,

    #[command(flatten)]
    pub(crate) observe: wicp_net::observe::Options,

    #[command(flatten)]
    pub(crate) registries: providers::allowlist::Options,

    #[command(flatten)]
    pub(crate) fallback: providers::fallback::Options,

    #[command(flatten)]
    pub(crate) mirrors: providers::mirror::Options,

    #[command(flatten)]
    pub(crate) identity: wicp_providers::spiffe::Options,

    #[command(flatten)]
    pub(crate) cache: cache::Options,
}

impl Options {
    /// `--max-cache-duration`, 1h unless given.
    pub(crate) fn max_cache_duration(&self) -> Duration {
        self.max_cache_duration
            .unwrap_or(Duration::from_secs(60 * 60))
    }

    /// `--timeout`, 45s unless given.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(Duration::from_secs(45))
    }

    /// `--log-level`, info unless given.
    pub(crate) fn log_level(&self) -> Level {
        self.log_level.unwrap_or(Level::Info)
    }

    /// `--log-format`, text unless given.
    pub(crate) fn log_format(&self) -> Format {
        self.log_format.unwrap_or(Format::Text)
    }
}

/// The `--provider` values: every provider, and `auto`.
fn names() -> Vec<&'static str> {
    providers::ALL
        .iter()
        .map(|p| p.name)
        .chain(std::iter::once(AUTO))
        .collect()
}

/// The `--provider` values with their `--help` text: each provider's
/// declared summary and token audience. Only the whole command line
/// carries them; the serving parse of a hit does not format them.
fn choices() -> Vec<PossibleValue> {
    let auto = PossibleValue::new(AUTO)
        .help("the cloud provider (aws, azure, gcp) whose registry the image names");
    providers::ALL
        .iter()
        .map(|p| {
            PossibleValue::new(p.name)
                .help(format!("{}; token audience: {}", p.summary, p.audience))
        })
        .chain(std::iter::once(auto))
        .collect()
}

/// The serving command line: [`Options`] and every provider's flags.
pub(crate) fn command() -> clap::Command {
    command_with(providers::ALL).mut_arg("provider", |arg| {
        arg.value_parser(clap::builder::PossibleValuesParser::new(choices()))
    })
}

/// [`Options`] and the flags of `carried` only.
fn command_with(carried: &[&'static Provider]) -> clap::Command {
    carried
        .iter()
        .fold(Options::command(), |command, p| (p.flags.augment)(command))
}

/// The serving command that reads `args` and `variables` with only the
/// flags they can use: [`Options`] and the flags of the provider they ask
/// for by `--provider`, `WICP_PROVIDER` or the binary's name, or for
/// `auto` those of the providers `auto` can pick; with those providers.
/// Building and parsing every provider's flags cost about 0.1 ms of a
/// 1.2 ms cache hit, mostly in first touches of memory and code
/// (docs/performance.md), so a hit builds only these.
///
/// `variables` are the process's environment variables, which clap reads
/// for the flags that have one.
///
/// `None` when that command would not read the line as the whole one
/// does ([`fits`]): the caller then parses with the whole command line.
/// Either way the line is parsed once. The smaller command is the whole
/// one without some of its flags, so where it fits it reads every
/// argument and variable exactly as the whole one would; what it leaves
/// out (other providers' flags, at their defaults) is never read when
/// serving, since only the chosen provider is built.
pub(crate) fn serving_command(
    args: &[OsString],
    variables: &[(OsString, OsString)],
) -> Option<(clap::Command, Vec<&'static Provider>)> {
    let named = provider_from_program_name(args.first()?);
    let asked = value_asked(args, "--provider").or_else(|| {
        let (_, value) = variables.iter().find(|(name, _)| name == "WICP_PROVIDER")?;
        value.to_str().map(str::to_string)
    });
    let choice = choose(asked.as_deref(), named).ok()?;
    let carried = carried_for(choice);
    let command = command_with(&carried);
    fits(&command, args, variables).then_some((command, carried))
}

/// Whether `command` (a serving command without admin commands) has
/// every word of `args` for its own: each a long flag of its own
/// (`--flag VALUE` or `--flag=VALUE`), so no command, no short flag
/// (`-h`, `-V`), no `--help` or `--version`, no `--` and no other
/// provider's flag; and whether it reads every `WICP_*` variable set.
/// Anything else is the whole command line's to read or refuse.
fn fits(command: &clap::Command, args: &[OsString], variables: &[(OsString, OsString)]) -> bool {
    let reads: Vec<&OsStr> = command
        .get_arguments()
        .filter_map(|a| a.get_env())
        .collect();
    if variables
        .iter()
        .any(|(name, _)| is_unread_variable(name, &reads))
    {
        return false;
    }
    let mut words = args.iter().skip(1);
    while let Some(word) = words.next() {
        let Some(flag) = word.to_str().and_then(|w| w.strip_prefix("--")) else {
            return false;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, _)) => (name, true),
            None => (flag, false),
        };
        let Some(arg) = command
            .get_arguments()
            .find(|a| !name.is_empty() && a.get_long() == Some(name))
        else {
            return false;
        };
        if !inline && arg.get_action().takes_values() {
            words.next();
        }
    }
    true
}

/// The providers whose flags serving `choice` needs (`None`: `auto`).
fn carried_for(choice: Option<&'static Provider>) -> Vec<&'static Provider> {
    match choice {
        Some(p) => vec![p],
        None => providers::ALL
            .iter()
            .copied()
            .filter(|p| p.auto.is_some())
            .collect(),
    }
}

/// The last value of `flag` on a command line, read as clap reads it
/// (`--flag VALUE` or `--flag=VALUE`, none after `--`). Only a guess, for
/// what must be known before clap parses: [`serving_command`] carries the
/// flags of the provider asked for, and [`CommandLine::build`] refuses to
/// build one whose flags it did not read; [`log_format_asked`] only
/// decides how a usage error is written.
fn value_asked(args: &[OsString], flag: &str) -> Option<String> {
    let mut asked = None;
    let mut words = args.iter().skip(1).map(|w| w.to_str());
    while let Some(word) = words.next() {
        match word {
            Some("--") => break,
            Some(word) if word == flag => asked = words.next().flatten(),
            Some(word) => {
                if let Some(value) = word.strip_prefix(flag).and_then(|v| v.strip_prefix('=')) {
                    asked = Some(value);
                }
            }
            None => {}
        }
    }
    asked.map(str::to_string)
}

/// The log format a command line asks for, read without clap so that
/// even a usage error (a line clap refused) is written in it: `--log-format`, else
/// `WICP_LOG_FORMAT` from `variables`. Only `json` changes anything.
pub(crate) fn log_format_asked(args: &[OsString], variables: &[(OsString, OsString)]) -> Format {
    let asked = value_asked(args, "--log-format").or_else(|| {
        let (_, value) = variables
            .iter()
            .find(|(name, _)| name == "WICP_LOG_FORMAT")?;
        value.to_str().map(str::to_string)
    });
    match asked.as_deref() {
        Some("json") => Format::Json,
        _ => Format::Text,
    }
}

/// Whether `name` is a `WICP_*` variable that none of `reads` is: every
/// flag's variable starts with `WICP_` (a test checks), so a command line
/// that reads all those set reads everything the whole one would.
fn is_unread_variable(name: &OsStr, reads: &[&OsStr]) -> bool {
    name.as_encoded_bytes().starts_with(b"WICP_") && !reads.contains(&name)
}

/// A command line parsed once, into what every part of the binary reads:
/// the shared flags, the provider the binary serves, and the typed flags
/// of each provider the command line carries.
#[derive(Debug)]
pub struct CommandLine {
    pub(crate) options: Options,
    /// The provider the binary's own name implies
    /// (`wi-credential-provider-aws`).
    pub(crate) named: Option<&'static Provider>,
    /// The provider the binary serves: `--provider` (or `WICP_PROVIDER`),
    /// else `named`; `None` is `auto` (by registry host, clouds only).
    pub(crate) choice: Option<&'static Provider>,
    /// The own flags of each provider the command line was parsed with:
    /// all of them for the whole command line, the chosen one (or `auto`'s)
    /// for a serving one ([`serving_command`]).
    own: Vec<(&'static Provider, Box<dyn providers::OwnFlags>)>,
}

impl CommandLine {
    /// Reads `matches` of a command that carries the flags of `carried`
    /// (the whole command line, or [`serving_command`]'s), for the binary
    /// run as `arg0`. An error is clap's own, a usage error like those of
    /// the parse. The values are taken out of `matches`, not copied: a
    /// copy of the matches and its freeing were 9% of a cache hit's
    /// instructions (docs/performance.md).
    pub fn read(
        arg0: &OsStr,
        mut matches: ArgMatches,
        carried: &[&'static Provider],
    ) -> std::result::Result<Self, clap::Error> {
        let options = Options::from_arg_matches_mut(&mut matches)?;
        options.mirrors.check().map_err(|why| {
            clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, format!("{why}\n"))
        })?;
        let named = provider_from_program_name(arg0);
        // clap admits only the names of `choices()`: never unknown here.
        let choice = choose(options.provider.as_deref(), named).unwrap_or(None);
        let own = carried
            .iter()
            .map(|p| Ok((*p, (p.flags.read)(&mut matches)?)))
            .collect::<std::result::Result<_, clap::Error>>()?;
        Ok(CommandLine {
            options,
            named,
            choice,
            own,
        })
    }

    /// Builds `provider` from this command line and the process inputs.
    pub fn build(
        &self,
        provider: &'static Provider,
        inputs: &wicp_net::inputs::Inputs,
    ) -> Result<Box<dyn providers::Exchanger>> {
        let Some((_, own)) = self.own.iter().find(|(p, _)| *p == provider) else {
            return Err(Error::internal(format!(
                "internal error: the command line was read without the {provider} provider's flags"
            )));
        };
        let shared = providers::Shared {
            provider,
            registries: &self.options.registries,
            fallback: self.options.fallback.fallback(),
        };
        own.build(&shared, inputs)
    }
}

/// The provider-choice rule, in one place: `--provider` (`asked`) wins,
/// `auto` meaning none (`Ok(None)`), else the binary's name (`named`).
/// `Err` for a name no provider has.
fn choose(
    asked: Option<&str>,
    named: Option<&'static Provider>,
) -> std::result::Result<Option<&'static Provider>, UnknownProvider> {
    match asked {
        Some(AUTO) => Ok(None),
        Some(name) => Provider::find(name).map(Some).ok_or(UnknownProvider),
        None => Ok(named),
    }
}

/// A `--provider` value that names no provider.
#[derive(Debug)]
struct UnknownProvider;

fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    duration::parse(text).map_err(|e| e.to_string())
}

fn parse_timeout(text: &str) -> std::result::Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() || d > Duration::from_secs(59) {
        return Err("the timeout must be above 0s and below the kubelet's 60s kill".into());
    }
    Ok(d)
}

/// The provider the binary's own name implies: `wi-credential-provider-gcp`
/// means gcp. The kubelet allows one token audience per provider entry, so
/// admins install the binary under several names, one per provider. A
/// Windows name's `.exe` (any case, as Windows compares names) is not part
/// of it: `wi-credential-provider-aws.exe` means aws, on a Windows node and
/// in a Windows node's config checked anywhere. On Windows the whole name
/// is read in any case (`WI-CREDENTIAL-PROVIDER-AWS.EXE` is aws), as
/// Windows finds the file.
pub(crate) fn provider_from_program_name(arg0: &OsStr) -> Option<&'static Provider> {
    let name = Path::new(arg0).file_name()?.to_str()?;
    // Windows finds the file in any case, so the name means the same in
    // any case there.
    let lowered;
    let name = if wicp_base::platform::NAMES_IGNORE_CASE {
        lowered = name.to_ascii_lowercase();
        lowered.as_str()
    } else {
        name
    };
    let name = match name
        .len()
        .checked_sub(4)
        .and_then(|at| name.split_at_checked(at))
    {
        Some((stem, ext)) if ext.eq_ignore_ascii_case(".exe") => stem,
        _ => name,
    };
    let suffix = name.strip_prefix(BINARY)?.strip_prefix('-')?;
    Provider::find(suffix)
}

/// The `WICP_*` variables the serving command line reads.
pub(crate) fn env_names() -> Vec<String> {
    command()
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|name| name.to_string_lossy().into_owned())
        .collect()
}

/// Parses `args` as the binary run as `name` would, with `env` in place of
/// the process environment for every `WICP_*` variable: each flag's
/// variable is detached from the process, and the entry's value, if any,
/// becomes that flag's default, which gives it exactly the precedence and
/// parsing clap gives an environment value (the flag wins, the value goes
/// through the same parser and delimiter).
pub fn parse_as(
    name: &str,
    args: &[String],
    env: &wicp_net::inputs::Env,
) -> std::result::Result<CommandLine, clap::Error> {
    let command = command().mut_args(|arg| {
        let value = arg
            .get_env()
            .and_then(|var| env.get(&var.to_string_lossy()))
            .map(str::to_string);
        let arg = arg.env(None);
        match value {
            Some(value) => arg.default_value(value),
            None => arg,
        }
    });
    let argv = std::iter::once(OsString::from(name)).chain(args.iter().map(OsString::from));
    let matches = command.try_get_matches_from(argv)?;
    CommandLine::read(OsStr::new(name), matches, providers::ALL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_name_selects_the_provider() {
        let p = |s: &str| provider_from_program_name(OsStr::new(s)).map(|p| p.name);
        assert_eq!(
            p("/usr/libexec/kubernetes/kubelet-plugins/wi-credential-provider-aws"),
            Some("aws")
        );
        assert_eq!(p("wi-credential-provider-passthrough"), Some("passthrough"));
        assert_eq!(p("wi-credential-provider-gcp"), Some("gcp"));
        assert_eq!(p("wi-credential-provider"), None);
        assert_eq!(p("wi-credential-provider-aw"), None);
        assert_eq!(p("ecr-credential-provider"), None);
        // Windows: the .exe is not part of the name, in any case.
        assert_eq!(p("wi-credential-provider-aws.exe"), Some("aws"));
        assert_eq!(p("wi-credential-provider-azure.EXE"), Some("azure"));
        assert_eq!(p("wi-credential-provider.exe"), None);
        assert_eq!(p("wi-credential-provider-aws.exe.exe"), None);
        assert_eq!(p("wi-credential-provider-aws.ex"), None);
    }

    #[test]
    fn every_provider_is_a_choice() {
        let names: Vec<String> = choices().iter().map(|v| v.get_name().to_string()).collect();
        for p in providers::ALL {
            assert!(names.iter().any(|n| n == p.name), "{}", p.name);
        }
        assert!(names.iter().any(|n| n == AUTO));
    }

    #[test]
    fn command_definition_is_consistent() {
        command().debug_assert();
        for p in providers::ALL {
            command_with(&carried_for(Some(p))).debug_assert();
        }
        command_with(&carried_for(None)).debug_assert();
    }

    #[test]
    fn every_flag_variable_is_a_wicp_variable() {
        // parse_serving's check for variables it does not read relies on it.
        for arg in command().get_arguments() {
            if let Some(var) = arg.get_env() {
                assert!(
                    var.as_encoded_bytes().starts_with(b"WICP_"),
                    "{}: {var:?}",
                    arg.get_id()
                );
            }
        }
        let reads = [OsStr::new("WICP_AUDIENCE")];
        assert!(is_unread_variable(OsStr::new("WICP_VAULT_ROLE"), &reads));
        assert!(!is_unread_variable(OsStr::new("WICP_AUDIENCE"), &reads));
        assert!(!is_unread_variable(OsStr::new("PATH"), &reads));
    }

    /// Which command lines the serving command reads (`true`) and which
    /// it leaves to the whole command line. Where it reads one, the whole
    /// command line reads the same values (`cargo test` sets
    /// `WICP_GIT_COMMIT`, which no flag reads, so no variable is passed:
    /// the integration tests cover the environment).
    #[test]
    fn the_serving_command_reads_only_lines_it_fits() {
        let cases: Vec<(Vec<&str>, bool)> = vec![
            (
                vec![BINARY, "--provider", "gcp", "--gcp-project-id", "p"],
                true,
            ),
            (
                vec!["wi-credential-provider-gcp", "--gcp-project-id=p"],
                true,
            ),
            (
                vec![BINARY, "--gcp-project-id", "p", "--timeout", "10s"],
                true,
            ),
            (
                vec![BINARY, "--provider=vault", "--vault-address", "https://v"],
                true,
            ),
            (
                vec!["/x/wi-credential-provider-aws", "--provider", "vault"],
                true,
            ),
            (
                vec!["wi-credential-provider-aws", "--registry", "a.test,b.test"],
                true,
            ),
            (
                vec![BINARY, "--provider", "auto", "--acr-endpoint", "x"],
                true,
            ),
            (
                vec![BINARY, "--provider", "passthrough", "--log-level", "debug"],
                true,
            ),
            // A value that looks like a command is a value.
            (
                vec![BINARY, "--audience", "explain", "--provider=gcp"],
                true,
            ),
            // Another provider's flag: the whole command line reads it.
            (
                vec![
                    BINARY,
                    "--provider",
                    "passthrough",
                    "--vault-kv-version",
                    "1",
                ],
                false,
            ),
            (
                vec!["wi-credential-provider-gcp", "--vault-kv-version", "7"],
                false,
            ),
            (vec![BINARY, "--provider", "nope"], false),
            (vec![BINARY, "--", "--provider", "gcp"], false),
            (vec![BINARY, "--provider", "gcp", "--help"], false),
            (vec![BINARY, "-h"], false),
            (vec![BINARY, "--version"], false),
            (vec![BINARY, "cache", "list"], false),
            (vec![BINARY, "--provider=gcp", "explain"], false),
            (vec![BINARY, "--=x"], false),
        ];
        for (argv, served) in cases {
            let args: Vec<OsString> = argv.iter().map(OsString::from).collect();
            let Some((serving, carried)) = serving_command(&args, &[]) else {
                assert!(!served, "{argv:?} was left to the whole command line");
                continue;
            };
            assert!(served, "{argv:?} was read by the serving command");
            let matches = serving.try_get_matches_from(&args).unwrap();
            let line = CommandLine::read(&args[0], matches, &carried).unwrap();
            let whole = command().try_get_matches_from(&args).unwrap();
            let whole = CommandLine::read(&args[0], whole, providers::ALL).unwrap();
            assert_eq!(line.choice, whole.choice, "{argv:?}");
            assert_eq!(
                format!("{:?}", line.options),
                format!("{:?}", whole.options),
                "{argv:?}"
            );
            for (provider, own) in &line.own {
                let (_, whole_own) = whole.own.iter().find(|(p, _)| p == provider).unwrap();
                assert_eq!(format!("{own:?}"), format!("{whole_own:?}"), "{argv:?}");
            }
        }
    }

    /// The fuzz targets keep one parsed command line in a static.
    #[test]
    fn a_command_line_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<CommandLine>();
    }

    #[test]
    fn a_provider_is_built_only_from_flags_the_line_read() {
        let args: Vec<OsString> = ["wi-credential-provider-gcp"].map(OsString::from).to_vec();
        let (command, carried) = serving_command(&args, &[]).unwrap();
        let matches = command.try_get_matches_from(&args).unwrap();
        let line = CommandLine::read(&args[0], matches, &carried).unwrap();
        let inputs = wicp_net::inputs::Inputs::new(wicp_net::inputs::Env::default(), None, None);
        let vault = Provider::find("vault").unwrap();
        let e = line.build(vault, &inputs).err().unwrap();
        assert!(
            e.to_string().contains("without the vault provider's flags"),
            "{e}"
        );
    }

    #[test]
    fn the_provider_asked_is_read_as_clap_reads_it() {
        let asked = |argv: &[&str]| {
            let args: Vec<OsString> = argv.iter().map(OsString::from).collect();
            value_asked(&args, "--provider")
        };
        assert_eq!(
            asked(&[BINARY, "--provider", "aws"]).as_deref(),
            Some("aws")
        );
        assert_eq!(asked(&[BINARY, "--provider=gcp"]).as_deref(), Some("gcp"));
        assert_eq!(
            asked(&[BINARY, "--provider=a", "--provider", "b"]).as_deref(),
            Some("b")
        );
        assert_eq!(asked(&[BINARY, "--", "--provider", "b"]), None);
        assert_eq!(asked(&["--provider", "the program name is not read"]), None);
        assert_eq!(asked(&[BINARY, "--provider"]), None);
        assert_eq!(asked(&[BINARY, "--providers=x"]), None);
    }

    #[test]
    fn the_log_format_is_read_before_clap() {
        let args = |words: &[&str]| -> Vec<OsString> { words.iter().map(OsString::from).collect() };
        let json = [(OsString::from("WICP_LOG_FORMAT"), OsString::from("json"))];
        assert_eq!(log_format_asked(&args(&["x"]), &[]), Format::Text);
        assert_eq!(log_format_asked(&args(&["x"]), &json), Format::Json);
        assert_eq!(
            log_format_asked(&args(&["x", "--log-format", "json"]), &[]),
            Format::Json
        );
        assert_eq!(
            log_format_asked(&args(&["x", "--log-format=json"]), &[]),
            Format::Json
        );
        assert_eq!(
            log_format_asked(&args(&["x", "--log-format=text"]), &json),
            Format::Text
        );
        assert_eq!(
            log_format_asked(&args(&["x", "--", "--log-format=json"]), &[]),
            Format::Text
        );
    }
}
