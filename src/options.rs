//! The command line: the flags the kubelet's provider entry passes
//! (`args`), their `WICP_*` environment variables (`env`), and the rule that
//! the binary's own name picks a provider.
//!
//! One parser reads it ([`wicp_base::flags::parse`]): each flag is a
//! `FlagSpec` static beside the options struct that reads it, the shared
//! ones here and in the layers below, each provider's in its module
//! ([`Provider::flags`]). The parser walks the words once and the `WICP_*`
//! variables once against those tables, which also write `--help`
//! ([`help`]). A word that is no flag starts an admin command, which clap
//! parses from there (`invocation`).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use wicp_base::duration;
use wicp_base::error::{Error, Result};
use wicp_base::flags::{self, Asked, FlagSpec, Flags, Given, Takes, Usage};
use wicp_base::log::{Format, Level};
use wicp_providers::cache;

use wicp_providers::{self as providers, Provider};

/// The binary's name; `<this>-aws`, `<this>-azure` ... select a provider.
pub const BINARY: &str = "wi-credential-provider";

/// The `--provider` value that routes by registry host.
pub(crate) const AUTO: &str = "auto";

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

/// The usage line of `--help` and of every usage error.
pub(crate) const USAGE: &str = "Usage: wi-credential-provider [OPTIONS] [COMMAND]";

/// `--provider`.
static PROVIDER: FlagSpec = FlagSpec {
    long: "provider",
    env: "WICP_PROVIDER",
    takes: Takes::One,
    value: "PROVIDER",
    default: "",
    help: "Which provider turns the token into registry credentials. Without \
        this flag the binary's own name decides (`wi-credential-provider-aws` \
        means aws, and so on), else `auto`, which picks a cloud provider \
        (aws, azure, gcp) from the registry host and never any other.",
};

/// `--audience`.
static AUDIENCE: FlagSpec = FlagSpec {
    long: "audience",
    env: "WICP_AUDIENCE",
    takes: Takes::One,
    value: "AUDIENCE",
    default: "",
    help: "The audience the service account token must carry, replacing the \
        provider's default. Must equal tokenAttributes.serviceAccountTokenAudience.",
};

/// `--max-cache-duration`.
// No `default` here and below: the accessors on Options hold it, so a
// hit parses no value it was not given (issue 47).
static MAX_CACHE_DURATION: FlagSpec = FlagSpec {
    long: "max-cache-duration",
    env: "WICP_MAX_CACHE_DURATION",
    takes: Takes::One,
    value: "DURATION",
    default: "",
    help: "Upper bound on the cacheDuration returned to the kubelet, which is \
        otherwise 80% of the credential's remaining lifetime. It bounds how \
        long a revoked permission keeps working on a node. Default: 1h.",
};

/// `--timeout`.
static TIMEOUT: FlagSpec = FlagSpec {
    long: "timeout",
    env: "WICP_TIMEOUT",
    takes: Takes::One,
    value: "DURATION",
    default: "",
    help: "Overall deadline for one invocation, shared by reading the request on \
        stdin and every upstream call. Keep it below the kubelet's hard 60s \
        kill. Default: 45s.",
};

/// `--log-level`.
static LOG_LEVEL: FlagSpec = FlagSpec {
    long: "log-level",
    env: "WICP_LOG_LEVEL",
    takes: Takes::One,
    value: "LEVEL",
    default: "",
    help: "Log level for stderr: error, warn, info or debug. `info` writes at \
        most one line per successful invocation; no level ever logs a token or \
        password. Default: info.",
};

/// `--log-format`.
static LOG_FORMAT: FlagSpec = FlagSpec {
    long: "log-format",
    env: "WICP_LOG_FORMAT",
    takes: Takes::One,
    value: "FORMAT",
    default: "",
    help: "How stderr lines are written: `text` for people, `json` for one \
        JSON object per line (time, level, message, provider, registry, \
        service_account, outcome, kind, cache, duration_seconds, \
        upstream_status, fix). Masking applies to both. Default: text.",
};

/// The flags every invocation shares, read by [`Options`] itself; its
/// groups' are theirs.
static OWN: &[&FlagSpec] = &[
    &PROVIDER,
    &AUDIENCE,
    &MAX_CACHE_DURATION,
    &TIMEOUT,
    &wicp_net::trust::CA_FILE,
    &LOG_LEVEL,
    &LOG_FORMAT,
];

/// The flags every invocation shares; each provider's own are in its
/// [`Provider::flags`].
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// `--provider`: a provider's name or `auto`, checked when read.
    pub(crate) provider: Option<String>,
    /// `--audience`.
    pub(crate) audience: Option<String>,
    max_cache_duration: Option<Duration>,
    timeout: Option<Duration>,
    /// `--ca-file`.
    pub(crate) ca_file: Option<PathBuf>,
    log_level: Option<Level>,
    log_format: Option<Format>,
    pub(crate) observe: wicp_net::observe::Options,
    pub(crate) registries: providers::allowlist::Options,
    pub(crate) fallback: providers::fallback::Options,
    pub(crate) mirrors: providers::mirror::Options,
    pub(crate) identity: wicp_providers::spiffe::Options,
    pub(crate) cache: cache::Options,
}

impl Options {
    /// Reads the shared flags from `given`: a value they cannot take, an
    /// unknown `--provider` or two mirrors of one registry is a usage
    /// error.
    fn read(given: &Given) -> std::result::Result<Self, Usage> {
        let provider = given.text(&PROVIDER)?;
        if let Some(name) = &provider
            && name != AUTO
            && Provider::find(name).is_none()
        {
            return Err(Usage::invalid(
                &PROVIDER,
                OsStr::new(name),
                format!("[possible values: {}]", names().join(", ")),
            ));
        }
        let mirrors = providers::mirror::Options::from_flags(given)?;
        mirrors.check().map_err(Usage::new)?;
        Ok(Options {
            provider,
            audience: given.text(&AUDIENCE)?,
            max_cache_duration: given.parsed(&MAX_CACHE_DURATION, duration::parse)?,
            timeout: given.parsed(&TIMEOUT, parse_timeout)?,
            ca_file: given.path(&wicp_net::trust::CA_FILE),
            log_level: given.choice(&LOG_LEVEL)?,
            log_format: given.choice(&LOG_FORMAT)?,
            observe: wicp_net::observe::Options::from_flags(given)?,
            registries: providers::allowlist::Options::from_flags(given)?,
            fallback: providers::fallback::Options::from_flags(given)?,
            mirrors,
            identity: wicp_providers::spiffe::Options::from_flags(given)?,
            cache: cache::Options::from_flags(given)?,
        })
    }

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

/// The shared flags by `--help` section: a heading (`""`: the first,
/// "Options") and its flags.
fn shared() -> [(&'static str, &'static [&'static FlagSpec]); 7] {
    [
        ("", OWN),
        ("", providers::allowlist::Options::FLAGS),
        ("", providers::fallback::Options::FLAGS),
        ("", providers::mirror::Options::FLAGS),
        ("", wicp_providers::spiffe::Options::FLAGS),
        (
            wicp_net::observe::Options::HEADING,
            wicp_net::observe::Options::FLAGS,
        ),
        (cache::Options::HEADING, cache::Options::FLAGS),
    ]
}

/// Every flag table of the command line: the shared ones, then each
/// provider's.
pub(crate) fn tables() -> Vec<&'static [&'static FlagSpec]> {
    shared()
        .into_iter()
        .map(|(_, flags)| flags)
        .chain(providers::ALL.iter().map(|p| p.flags.flags))
        .collect()
}

/// Reads `args` (the program's name first) and `variables` with the one
/// parser: the flags of every table, and after a command word only the
/// cache's flags (`cache list --cache-dir DIR`), which stay the command
/// line's own.
pub fn parse<'v>(
    args: &[OsString],
    variables: impl IntoIterator<Item = (&'v OsStr, &'v OsStr)>,
) -> (Given, Asked) {
    let words = args.get(1..).unwrap_or_default();
    flags::parse(&tables(), cache::Options::FLAGS, words, variables)
}

/// The log format `given` asks for, even when the line is refused: a
/// usage error asked for in JSON is one JSON line like every other.
pub fn log_format_of(given: &Given) -> Format {
    given.choice(&LOG_FORMAT).ok().flatten().unwrap_or_default()
}

/// The `--provider` values: every provider, and `auto`.
fn names() -> Vec<&'static str> {
    providers::ALL
        .iter()
        .map(|p| p.name)
        .chain(std::iter::once(AUTO))
        .collect()
}

/// `--help`: what the binary is, its commands (`commands`: each name and
/// what it does), and every flag by section, written from the flag
/// tables; `--provider` lists each provider with its summary and token
/// audience.
pub(crate) fn help(commands: &[(String, String)]) -> String {
    use std::fmt::Write;
    let mut out = format!("{LONG_ABOUT}\n\n{USAGE}\n\nCommands:\n");
    let width = commands
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0);
    for (name, about) in commands {
        let _ = writeln!(out, "  {name:width$}  {about}");
    }
    let sections = shared().into_iter().chain(
        providers::ALL
            .iter()
            .map(|p| (p.flags.heading, p.flags.flags)),
    );
    let mut written: Vec<&str> = Vec::new();
    for (heading, flags) in sections {
        let heading = if heading.is_empty() {
            "Options"
        } else {
            heading
        };
        if !written.contains(&heading) {
            let _ = write!(out, "\n{heading}:\n");
            written.push(heading);
        }
        for flag in flags {
            flags::write_help(&mut out, flag);
            if std::ptr::eq(*flag, &PROVIDER) {
                out.push_str("          Possible values:\n");
                let choices = providers::ALL
                    .iter()
                    .map(|p| format!("{}: {}; token audience: {}", p.name, p.summary, p.audience))
                    .chain(std::iter::once(format!(
                        "{AUTO}: the cloud provider (aws, azure, gcp) whose registry the image names"
                    )));
                for choice in choices {
                    flags::wrap(&mut out, &choice, "          - ", "            ", 80);
                }
                out.push('\n');
            }
        }
    }
    out.push_str(
        "\nHelp:\n  -h, --help\n          Print help\n\n  -V, --version\n          Print version\n",
    );
    out
}

/// A command line parsed once, into what every part of the binary reads:
/// the shared flags, the provider the binary serves, and the typed flags
/// of every provider.
#[derive(Debug)]
pub struct CommandLine {
    pub(crate) options: Options,
    /// The provider the binary's own name implies
    /// (`wi-credential-provider-aws`).
    pub(crate) named: Option<&'static Provider>,
    /// The provider the binary serves: `--provider` (or `WICP_PROVIDER`),
    /// else `named`; `None` is `auto` (by registry host, clouds only).
    pub(crate) choice: Option<&'static Provider>,
    /// The own flags of each provider, read whether or not it serves: a
    /// value no provider would take is refused the same way for all.
    own: Vec<(&'static Provider, Box<dyn providers::OwnFlags>)>,
}

impl CommandLine {
    /// Reads what [`parse`] found for the binary run as `arg0`: the shared
    /// flags, then each provider's. An error is a usage error, as the
    /// parse's own are.
    pub fn read(arg0: &OsStr, given: &Given) -> std::result::Result<Self, Usage> {
        let options = Options::read(given)?;
        let named = provider_from_program_name(arg0);
        // Options::read admits only a provider's name or `auto`.
        let choice = choose(options.provider.as_deref(), named).unwrap_or(None);
        let own = providers::ALL
            .iter()
            .map(|p| Ok((*p, (p.flags.read)(given)?)))
            .collect::<std::result::Result<_, Usage>>()?;
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

fn parse_timeout(text: &str) -> std::result::Result<Duration, String> {
    let d = duration::parse(text).map_err(|e| e.to_string())?;
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

/// The `WICP_*` variables the command line reads.
pub(crate) fn env_names() -> Vec<String> {
    env_names_static().map(str::to_string).collect()
}

/// Parses `args` as the binary run as `name` would, with `env` in place of
/// the process environment for every `WICP_*` variable: the same parser,
/// precedence (a flag wins) and reading as a real run. A line that would
/// not serve (a command, `--help`, `--version`) is refused.
pub fn parse_as(
    name: &str,
    args: &[String],
    env: &wicp_net::inputs::Env,
) -> std::result::Result<CommandLine, Usage> {
    let argv: Vec<OsString> = std::iter::once(OsString::from(name))
        .chain(args.iter().map(OsString::from))
        .collect();
    let variables: Vec<(&'static str, &str)> = env_names_static()
        .filter_map(|var| Some((var, env.get(var)?)))
        .collect();
    let (given, asked) = parse(
        &argv,
        variables
            .iter()
            .map(|(var, value)| (OsStr::new(*var), OsStr::new(*value))),
    );
    match asked {
        Asked::Serve => CommandLine::read(OsStr::new(name), &given),
        Asked::Mistake(usage) => Err(usage),
        Asked::Command(rest) => Err(Usage::new(format!(
            "unexpected argument '{}' found",
            rest.first()
                .map(|w| w.to_string_lossy())
                .unwrap_or_default()
        ))),
        Asked::Help | Asked::Version => Err(Usage::new(
            "--help and --version print text, not a response to the kubelet",
        )),
    }
}

/// Every flag's variable, as the tables hold it.
fn env_names_static() -> impl Iterator<Item = &'static str> {
    tables()
        .into_iter()
        .flatten()
        .map(|f| f.env)
        .filter(|env| !env.is_empty())
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

    fn read(argv: &[&str], variables: &[(&str, &str)]) -> (Given, Asked) {
        let args: Vec<OsString> = argv.iter().map(OsString::from).collect();
        let variables: Vec<(OsString, OsString)> = variables
            .iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v)))
            .collect();
        parse(
            &args,
            variables
                .iter()
                .map(|(n, v)| (n.as_os_str(), v.as_os_str())),
        )
    }

    fn line(argv: &[&str], variables: &[(&str, &str)]) -> std::result::Result<CommandLine, Usage> {
        let (given, asked) = read(argv, variables);
        assert_eq!(asked, Asked::Serve, "{argv:?}");
        CommandLine::read(OsStr::new(argv[0]), &given)
    }

    #[test]
    fn every_flag_is_declared_once() {
        let all: Vec<&FlagSpec> = tables().into_iter().flatten().copied().collect();
        for (i, flag) in all.iter().enumerate() {
            for other in &all[i + 1..] {
                assert_ne!(flag.long, other.long, "--{} is declared twice", flag.long);
                assert_ne!(flag.env, other.env, "{} is read by two flags", flag.env);
            }
        }
        assert!(all.len() > 60, "{} flags", all.len());
    }

    #[test]
    fn every_flag_has_a_wicp_variable_and_help() {
        for flag in tables().into_iter().flatten() {
            let name = flag.long.replace('-', "_").to_ascii_uppercase();
            assert_eq!(flag.env, format!("WICP_{name}"), "--{}", flag.long);
            assert!(!flag.help.is_empty(), "--{} has no help", flag.long);
            assert_eq!(
                flag.value.is_empty(),
                flag.takes == Takes::Switch,
                "--{}: only a switch takes no value",
                flag.long
            );
        }
    }

    #[test]
    fn help_lists_every_flag_provider_and_command() {
        let commands = [("explain".to_string(), "Show it.".to_string())];
        let help = help(&commands);
        for flag in tables().into_iter().flatten() {
            assert!(
                help.contains(&format!("--{} ", flag.long))
                    || help.contains(&format!("--{}\n", flag.long)),
                "--{}",
                flag.long
            );
            assert!(help.contains(flag.env), "{}", flag.env);
        }
        let words = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for p in providers::ALL {
            assert!(
                words.contains(&format!("- {}: {}", p.name, p.summary)),
                "{}",
                p.name
            );
            assert!(
                help.contains(&format!("\n{}:\n", p.flags.heading)),
                "{}",
                p.flags.heading
            );
        }
        assert!(help.contains("  explain  Show it.\n"), "{help}");
        assert!(help.contains(USAGE));
    }

    /// docs/ has a row for every flag the tables declare (docs/flags.md,
    /// a provider's page, the cache's), so a new flag is documented where
    /// admins look.
    #[test]
    fn every_flag_has_a_row_in_the_docs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
        let mut pages = vec![root.join("flags.md"), root.join("cache.md")];
        for entry in std::fs::read_dir(root.join("providers")).unwrap() {
            pages.push(entry.unwrap().path());
        }
        let text: String = pages
            .iter()
            .map(|page| std::fs::read_to_string(page).unwrap())
            .collect();
        for flag in tables().into_iter().flatten() {
            assert!(
                text.contains(&format!("| `--{}` |", flag.long)),
                "no docs/ table row for --{}",
                flag.long
            );
        }
    }

    /// One parse reads the shared flags, the provider asked for and every
    /// provider's flags, from words and variables alike.
    #[test]
    fn one_parse_reads_words_and_variables() {
        let l = line(
            &[
                "wi-credential-provider-aws",
                "--provider=gcp",
                "--gcp-project-id",
                "p",
                "--timeout",
                "10s",
            ],
            &[
                ("WICP_VAULT_KV_VERSION", "1"),
                ("WICP_TIMEOUT", "20s"),
                ("WICP_GIT_COMMIT", "x"),
            ],
        )
        .unwrap();
        assert_eq!(l.named.map(|p| p.name), Some("aws"));
        assert_eq!(l.choice.map(|p| p.name), Some("gcp"));
        assert_eq!(
            l.options.timeout(),
            Duration::from_secs(10),
            "the word wins"
        );
        let vault = l.own.iter().find(|(p, _)| p.name == "vault").unwrap();
        assert!(
            format!("{:?}", vault.1).contains("vault_kv_version: 1"),
            "{:?}",
            vault.1
        );
        assert_eq!(l.own.len(), providers::ALL.len());
        // `auto` and the name.
        assert_eq!(
            line(&["x", "--provider", "auto"], &[]).unwrap().choice,
            None
        );
        let named = line(&["wi-credential-provider-gcp"], &[("WICP_PROVIDER", "")]).unwrap();
        assert_eq!(named.choice.map(|p| p.name), Some("gcp"));
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_flag() {
        let e = |argv: &[&str], variables: &[(&str, &str)]| {
            line(argv, variables).unwrap_err().to_string()
        };
        assert!(
            e(&["x", "--provider", "nope"], &[]).starts_with(
                "invalid value 'nope' for '--provider <PROVIDER>': [possible values: "
            )
        );
        assert!(
            e(&["x"], &[("WICP_VAULT_KV_VERSION", "7")])
                .starts_with("invalid value '7' for '--vault-kv-version <VERSION>'")
        );
        assert!(e(&["x", "--timeout", "90s"], &[]).contains("below the kubelet's 60s kill"));
        assert!(
            e(&["x", "--log-level", "loud"], &[])
                .ends_with("[possible values: error, warn, info, debug]")
        );
        assert!(
            e(&["x", "--registry-mirror", "a.io=b.io,A.io=c.io"], &[])
                .contains("only the first would ever be used")
        );
    }

    #[test]
    fn a_refused_line_still_says_its_log_format() {
        let (given, asked) = read(&["x", "--log-format", "json", "--nope"], &[]);
        assert!(matches!(asked, Asked::Mistake(_)));
        assert_eq!(log_format_of(&given), Format::Json);
        let (given, _) = read(&["x", "--nope"], &[("WICP_LOG_FORMAT", "json")]);
        assert_eq!(log_format_of(&given), Format::Json);
        let (given, _) = read(&["x", "--log-format=jsn"], &[]);
        assert_eq!(log_format_of(&given), Format::Text);
    }

    #[test]
    fn parse_as_reads_the_entry_env_and_refuses_what_would_not_serve() {
        let env =
            wicp_net::inputs::Env::from_pairs([("WICP_TIMEOUT", "5s"), ("WICP_NOT_A_FLAG", "x")]);
        let l = parse_as(BINARY, &["--provider=passthrough".to_string()], &env).unwrap();
        assert_eq!(l.options.timeout(), Duration::from_secs(5));
        for args in [["explain"], ["--help"], ["--nope"]] {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            assert!(parse_as(BINARY, &args, &env).is_err(), "{args:?}");
        }
    }

    /// The fuzz targets keep one parsed command line in a static.
    #[test]
    fn a_command_line_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<CommandLine>();
    }
}
