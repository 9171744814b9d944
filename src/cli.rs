//! The command line and the one request/response cycle.
//!
//! The flow is one way: read the request, decode the token, route to an
//! exchanger, plan, exchange, answer. A failure at any step ends the same
//! way: nothing on stdout, one line on stderr naming the provider, the
//! service account and the registry, and exit status 1.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};

use crate::cache::{self, Cache, KeyInputs, Origin, Stored};
use crate::deadline::Deadline;
use crate::duration;
use crate::error::{Error, Result};
use crate::exchange::{self, Context, Exchanger, Provider, aws, azure, gcp, passthrough};
use crate::image::ImageRef;
use crate::log::{self, Level};
use crate::matching;
use crate::protocol::{self, Response};
use crate::token::ServiceAccountToken;

/// The binary's name; `<this>-aws`, `<this>-azure` ... select a provider.
pub const BINARY: &str = "wi-credential-provider";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProviderChoice {
    Aws,
    Azure,
    Gcp,
    Passthrough,
    Auto,
}

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

#[derive(Parser, Debug)]
#[command(name = BINARY, version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Without a command, the binary serves one kubelet request (stdin to
    /// stdout), as the kubelet runs it.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Which exchanger turns the token into registry credentials. Without
    /// this flag the binary's own name decides (`wi-credential-provider-aws`
    /// means aws, and so on), else `auto`, which picks aws, azure or gcp from
    /// the registry host and never passthrough.
    #[arg(long, value_enum, env = "WICP_PROVIDER")]
    pub provider: Option<ProviderChoice>,

    /// The audience the service account token must carry, replacing the
    /// exchanger's default. Must equal tokenAttributes.serviceAccountTokenAudience.
    #[arg(long, value_name = "AUDIENCE", env = "WICP_AUDIENCE")]
    pub audience: Option<String>,

    /// Upper bound on the cacheDuration returned to the kubelet, which is
    /// otherwise 80% of the credential's remaining lifetime. It bounds how
    /// long a revoked permission keeps working on a node.
    #[arg(long, value_name = "DURATION", env = "WICP_MAX_CACHE_DURATION", default_value = "1h", value_parser = parse_duration)]
    pub max_cache_duration: Duration,

    /// Overall deadline for one invocation, shared by reading the request on
    /// stdin and every upstream call. Keep it below the kubelet's hard 60s
    /// kill.
    #[arg(long, value_name = "DURATION", env = "WICP_TIMEOUT", default_value = "45s", value_parser = parse_timeout)]
    pub timeout: Duration,

    /// A PEM bundle of extra CA certificates trusted by every upstream call,
    /// on top of the node's trust store (SSL_CERT_FILE replaces that store,
    /// as in OpenSSL): the CA of a TLS-inspecting proxy or a private endpoint.
    #[arg(long, value_name = "PATH", env = "WICP_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,

    /// Log level for stderr. `info` writes at most one line per successful
    /// invocation; no level ever logs a token or password.
    #[arg(
        long,
        value_enum,
        value_name = "LEVEL",
        env = "WICP_LOG_LEVEL",
        default_value = "info"
    )]
    pub log_level: Level,

    #[command(flatten)]
    pub passthrough: passthrough::Options,

    #[command(flatten)]
    pub aws: aws::Options,

    #[command(flatten)]
    pub azure: azure::Options,

    #[command(flatten)]
    pub gcp: gcp::Options,

    #[command(flatten)]
    pub cache: cache::Options,
}

/// Commands for an admin. The kubelet runs the binary without one.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum Command {
    /// Inspect or clear the on-disk credential cache (--cache-dir).
    #[command(subcommand)]
    Cache(cache::command::Command),
    /// Check a kubelet CredentialProviderConfig as the kubelet loads it, and
    /// for what it accepts but never works.
    CheckConfig(crate::config::check::Args),
    /// Show, without any network call, what the kubelet would send for an
    /// image and a service account, and what this plugin would do with it.
    Explain(crate::explain::Args),
}

/// Runs an admin command.
fn run_command(cli: &Cli, command: &Command) -> ExitCode {
    match command {
        Command::Cache(command) => cache::command::run(&cli.cache, cli.max_cache_duration, command),
        Command::CheckConfig(args) => crate::config::check::run(args),
        Command::Explain(args) => crate::explain::run(args),
    }
}

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
/// admins install the binary under several names, one per provider.
pub fn provider_from_program_name(arg0: &OsString) -> Option<Provider> {
    let name = Path::new(arg0).file_name()?.to_str()?;
    let suffix = name.strip_prefix(BINARY)?.strip_prefix('-')?;
    Provider::from_name(suffix)
}

/// What the exchange is for, collected as the request is understood, so a
/// failure can say which service account and registry it was about.
#[derive(Default)]
struct Subject {
    provider: Option<Provider>,
    service_account: Option<String>,
    registry: Option<String>,
}

impl Subject {
    fn failure_line(&self, error: &Error) -> String {
        let mut about = Vec::new();
        if let Some(p) = self.provider {
            about.push(format!("provider {p}"));
        }
        about.push(match &self.service_account {
            Some(sa) => format!("service account {sa}"),
            None => "service account unknown".to_string(),
        });
        if let Some(r) = &self.registry {
            about.push(format!("registry {r}"));
        }
        // Every secret of the invocation was registered when it was
        // obtained; log::write redacts again, this keeps the line safe
        // wherever it goes.
        let line = format!("{} failed: {error}", about.join(", "));
        crate::upstream::redact(&line).replace(['\n', '\r'], " ")
    }
}

/// The exchanger the binary uses: `--provider` (or `WICP_PROVIDER`) wins,
/// else the provider its own name implies; `None` means `auto`.
pub fn provider_choice(cli: &Cli, named: Option<Provider>) -> Option<Provider> {
    match cli.provider {
        Some(ProviderChoice::Auto) => None,
        Some(ProviderChoice::Aws) => Some(Provider::Aws),
        Some(ProviderChoice::Azure) => Some(Provider::Azure),
        Some(ProviderChoice::Gcp) => Some(Provider::Gcp),
        Some(ProviderChoice::Passthrough) => Some(Provider::Passthrough),
        None => named,
    }
}

pub fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::command()
        .version(crate::build_info::version())
        .try_get_matches_from(&args)
        .and_then(|matches| Cli::from_arg_matches(&matches))
    {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    log::set_level(cli.log_level);
    log::redact_panics();
    crate::trust::set_ca_file(cli.ca_file.clone());
    if let Some(command) = &cli.command {
        return run_command(&cli, command);
    }
    let named = args.first().and_then(provider_from_program_name);
    let choice = provider_choice(&cli, named);
    let mut subject = Subject::default();
    match respond(&cli, choice, std::io::stdin(), &mut subject) {
        Ok(json) => {
            let mut out = std::io::stdout().lock();
            if let Err(e) = out.write_all(&json).and_then(|()| out.flush()) {
                log::write(
                    Level::Error,
                    format_args!("cannot write the response to stdout: {e}"),
                );
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            log::write(
                Level::Error,
                format_args!("{}", subject.failure_line(&error)),
            );
            ExitCode::FAILURE
        }
    }
}

/// Builds every exchanger from its options. Construction does no I/O: a
/// network client is built only when a plan's exchange runs.
pub fn exchangers(cli: &Cli) -> Result<Vec<Box<dyn Exchanger>>> {
    let list: Vec<Box<dyn Exchanger>> = vec![
        Box::new(passthrough::Passthrough::new(&cli.passthrough)?),
        Box::new(aws::Aws::new(&cli.aws)),
        Box::new(azure::Azure::new(&cli.azure)),
        Box::new(gcp::Gcp::new(&cli.gcp)?),
    ];
    Ok(list)
}

/// Reads the request under the deadline: on a thread, because a read
/// cannot be interrupted without unsafe code, and a writer that never closes
/// stdin must not hang the plugin until the kubelet kills it. When the
/// deadline passes, the caller returns and the process exits, thread and
/// all.
fn read_request_within(
    input: impl std::io::Read + Send + 'static,
    deadline: &Deadline,
) -> Result<protocol::Request> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let _ = sender.send(protocol::read_request(input));
        })
        .map_err(|e| Error::new(format!("cannot start reading stdin: {e}")))?;
    match receiver.recv_timeout(deadline.remaining()) {
        Ok(read) => read,
        Err(_) => Err(Error::new(format!(
            "no complete request arrived on stdin within the deadline of {}s",
            deadline.budget().as_secs()
        ))
        .fix("the kubelet writes one CredentialProviderRequest and closes stdin; by hand, pipe the request in (or end input with Ctrl-D)")),
    }
}

/// Reads one request and produces the response bytes.
fn respond(
    cli: &Cli,
    choice: Option<Provider>,
    input: impl std::io::Read + Send + 'static,
    subject: &mut Subject,
) -> Result<Vec<u8>> {
    let deadline = Deadline::after(cli.timeout);
    let request = read_request_within(input, &deadline)?;
    let image = ImageRef::parse(&request.image)?;
    subject.registry = Some(image.registry().to_string());

    let all = exchangers(cli)?;
    let exchanger = exchange::route(choice, &image, &all)?;
    let provider = exchanger.provider();
    subject.provider = Some(provider);

    let now = duration::unix_now();
    let token = match request.service_account_token.clone() {
        Some(raw) => Some(ServiceAccountToken::decode(raw, now)?),
        None => None,
    };
    if let Some(token) = &token {
        subject.service_account = Some(token.service_account().to_string());
    }
    let audiences = exchange::admit_token(
        exchanger,
        cli.audience.as_deref(),
        token.as_ref(),
        request.api_version.as_str(),
    )?;

    let cx = Context {
        image: &image,
        annotations: &request.service_account_annotations,
        token: token.as_ref(),
    };
    let plan = exchanger.plan(&cx)?;
    crate::debug!("plan: {plan:?}");
    // The kubelet looks credentials up by matching our key against the
    // image with its own rules; a key that cannot match means the pull
    // silently goes out without credentials. Refuse rather than answer.
    if !matching::matches(&plan.auth_key, &image.to_string()) {
        return Err(Error::new(format!(
            "internal error: the {provider} exchanger chose the auth key {} that the kubelet would never match against {image}",
            crate::error::quote(&plan.auth_key)
        ))
        .fix("report this as a bug"));
    }
    let auth_key = plan.auth_key.clone();
    let cache_key_type = plan.cache_key_type;
    let cache = if plan.cacheable {
        Cache::open(&cli.cache, cli.max_cache_duration)?
    } else {
        None
    };
    let served = match &cache {
        Some(cache) => {
            let key_inputs = KeyInputs::for_plan(
                &plan,
                &audiences,
                token.as_ref(),
                &request.service_account_annotations,
            );
            crate::debug!(
                "cache key text:\n{}",
                cache::key::canonical(&key_inputs).trim_end()
            );
            let key = cache::Key::derive(&key_inputs);
            let about = cache::Subject {
                provider: provider.name(),
                service_account: token.as_ref().map(|t| t.service_account()),
                registry: &auth_key,
            };
            cache.serve(&key, about, &deadline, plan.exchange)?
        }
        None => cache::Served {
            credential: (plan.exchange)(&deadline)?,
            created_at: duration::unix_now(),
            origin: Origin::Exchange,
            stored: Stored::NotApplicable,
        },
    };
    let credential = served.credential;

    let now = duration::unix_now();
    let cache_duration = cache::kubelet_cache_duration(
        now,
        served.created_at,
        credential.expires_at,
        cli.max_cache_duration,
    );
    if cache_duration.is_zero() {
        crate::warn!(
            "the credential for {} expires at {}, too soon to cache; the kubelet will ask again on the next pull",
            image.registry(),
            duration::format_unix(credential.expires_at)
        );
    }
    let response = Response::new(
        request.api_version,
        cache_key_type,
        cache_duration,
        &auth_key,
        &credential.username,
        &credential.password,
    );
    let json = response.to_json()?;
    crate::info!(
        "{} credentials for {} on {} ({}), cacheDuration {}{}",
        provider,
        subject
            .service_account
            .as_deref()
            .unwrap_or("no service account"),
        auth_key,
        image,
        duration::format_go(cache_duration),
        match (served.origin, served.stored) {
            (Origin::Cache, _) => ", from the on-disk cache",
            (Origin::Exchange, Stored::Written) => ", exchanged and cached",
            (Origin::Exchange, Stored::WriteFailed) =>
                ", exchanged, not cached (the cache entry could not be written)",
            (Origin::Exchange, Stored::TooShortLived) =>
                ", exchanged, not cached (too close to its expiry or --max-cache-duration to be served again)",
            (Origin::Exchange, Stored::NotApplicable) => "",
        }
    );
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_name_selects_the_provider() {
        let p = |s: &str| provider_from_program_name(&OsString::from(s));
        assert_eq!(
            p("/usr/libexec/kubernetes/kubelet-plugins/wi-credential-provider-aws"),
            Some(Provider::Aws)
        );
        assert_eq!(
            p("wi-credential-provider-passthrough"),
            Some(Provider::Passthrough)
        );
        assert_eq!(p("wi-credential-provider-gcp"), Some(Provider::Gcp));
        assert_eq!(p("wi-credential-provider"), None);
        assert_eq!(p("wi-credential-provider-aw"), None);
        assert_eq!(p("ecr-credential-provider"), None);
    }

    #[test]
    fn failure_line_names_everything_and_redacts() {
        let subject = Subject {
            provider: Some(Provider::Passthrough),
            service_account: Some("team/api".into()),
            registry: Some("reg.io".into()),
        };
        let _token = crate::secret::Secret::new("opaque-registered-secret-value");
        let line = subject.failure_line(
            &Error::new("upstream echoed opaque-registered-secret-value\nback").fix("do x"),
        );
        assert_eq!(
            line,
            "provider passthrough, service account team/api, registry reg.io failed: upstream echoed <redacted> back; fix: do x"
        );
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
