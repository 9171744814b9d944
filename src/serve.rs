//! The one request/response cycle the kubelet runs the binary for.
//!
//! The flow is one way: read the request, decode the token, route to a
//! provider, [`prepare`] (admit the token, plan, check the auth key),
//! serve from the cache or exchange, answer. `explain` runs the same
//! [`prepare`] and stops before the network, so the two cannot drift.
//! A failure at any step ends the same way: nothing on stdout, one line on
//! stderr naming the provider, the service account and the registry, and
//! exit status 1.

use std::collections::BTreeMap;
use std::io::Write;

use std::time::Instant;

use crate::options::{self, CommandLine};
use wicp_base::deadline::Deadline;
use wicp_base::duration;
use wicp_base::error::{Error, Result, quote};
use wicp_base::log::{self, Level};
use wicp_kubelet::config::matching;
use wicp_kubelet::request::image::ImageRef;
use wicp_kubelet::request::protocol::{self, Response};
use wicp_kubelet::request::stdin;
use wicp_kubelet::request::token::ServiceAccountToken;
use wicp_net::inputs::Inputs;
use wicp_net::observe::{self, Identity, Outcome, Record};
use wicp_providers::cache::{self, Cache, KeyInputs, Origin, Stored};
use wicp_providers::fallback::Whose;
use wicp_providers::mirror::Rule;
use wicp_providers::route;
use wicp_providers::{Context, Exchanger, Plan, Provider};

/// The line a failure ends with: what failed, and for which provider,
/// service account and registry, as far as `record` got.
fn failure_line(record: &Record, error: &Error) -> String {
    failure(record, &error.to_string())
}

/// The failure line without its fix, which a JSON line carries apart.
fn failure_message(record: &Record, error: &Error) -> String {
    failure(record, error.what())
}

fn failure(record: &Record, error: &str) -> String {
    let mut about = Vec::new();
    if let Some(p) = record.provider {
        about.push(format!("provider {p}"));
    }
    about.push(match &record.service_account {
        Some(sa) => format!("service account {sa}"),
        None => "service account unknown".to_string(),
    });
    if let Some(r) = &record.registry {
        about.push(format!("registry {r}"));
    }
    // Every secret of the invocation was registered when it was
    // obtained; log::write redacts again, this keeps the line safe
    // wherever it goes.
    let line = format!("{} failed: {error}", about.join(", "));
    wicp_base::redact::redact(&line).replace(['\n', '\r'], " ")
}

/// What the JSON log lines carry about this invocation.
fn log_subject(record: &Record) -> log::Subject {
    log::Subject {
        provider: record.provider,
        registry: record.registry.clone(),
        service_account: record.service_account.as_ref().map(ToString::to_string),
    }
}

/// Serves one kubelet request: stdin to stdout, as the kubelet runs the
/// binary. `line` is its command line, parsed once. Returns the exit
/// status: 0 with a response written to stdout, 1 without. With
/// `--metrics-dir` or `--audit-log`, the invocation is recorded after the
/// response is written ([`wicp_net::observe`]).
pub(crate) fn run(line: &CommandLine, inputs: &Inputs) -> u8 {
    let options = &line.options;
    let mut record = Record::new(Instant::now());
    record.chosen = line.choice.map_or(options::AUTO, Provider::name);
    let status = match respond(line, inputs, &mut record) {
        Ok(json) => {
            let mut out = std::io::stdout().lock();
            match out.write_all(&json).and_then(|()| out.flush()) {
                Ok(()) => 0,
                Err(e) => {
                    let error =
                        Error::internal(format!("cannot write the response to stdout: {e}"));
                    log::error(&error);
                    record.failed(&error);
                    1
                }
            }
        }
        Err(error) => {
            record.failed(&error);
            if log::is_json() {
                log::set_subject(log_subject(&record));
            }
            log::write_event(
                Level::Error,
                &failure_line(&record, &error),
                &failure_message(&record, &error),
                &log::Fields {
                    outcome: Some("error"),
                    kind: Some(error.kind().name()),
                    duration: Some(record.started.elapsed()),
                    upstream_status: observe::last_status(),
                    fix: error.remedy(),
                    facts: error.facts(),
                    ..log::Fields::default()
                },
            );
            1
        }
    };
    if options.observe.enabled() {
        observe::finish(&options.observe, &record, duration::unix_now());
    }
    status
}

/// Everything decided for one request before any network call.
pub struct Prepared<'a> {
    /// The audiences the token was admitted for; they key the cache.
    pub(crate) audiences: Vec<String>,
    pub plan: Plan<'a>,
}

impl Prepared<'_> {
    /// The inputs of the on-disk cache key for this plan.
    pub fn key_inputs<'k>(
        &'k self,
        token: Option<&'k ServiceAccountToken>,
        annotations: &'k BTreeMap<String, String>,
    ) -> KeyInputs<'k> {
        KeyInputs::for_plan(&self.plan, &self.audiences, token, annotations)
    }
}

/// Refuses `image` unless `exchanger` serves its registry, admits the
/// token for `exchanger` (`audience` is `--audience`), plans, and refuses a
/// plan whose auth key the kubelet could never match against `image`: such
/// a pull would silently go out without credentials. Every plan goes
/// through here, so no provider can send a token or credential for a
/// registry it does not serve.
///
/// With a mirror rule (`mirrored`: the rule and the image as the kubelet
/// asked for it), `image` is the image on the mirror: everything above is
/// done for it, and the plan is then keyed by the rule's source registry,
/// which the kubelet matched ([`mirror`](wicp_providers::mirror)).
pub fn prepare<'a>(
    exchanger: &'a dyn Exchanger,
    audience: Option<&str>,
    image: &'a ImageRef,
    token: Option<&'a ServiceAccountToken>,
    annotations: &'a BTreeMap<String, String>,
    api_version: &str,
    mirrored: Option<(&Rule, &ImageRef)>,
) -> Result<Prepared<'a>> {
    route::require_served(exchanger, image)?;
    let audiences = route::admit_token(exchanger, audience, token, api_version)?;
    route::check_annotations(exchanger, annotations)?;
    let cx = Context {
        image,
        annotations,
        token,
    };
    // A provider's own registry refusal (not ECR, another cloud) names
    // the registry as a fact here, for every provider alike.
    let mut plan = exchanger
        .plan(&cx)
        .map_err(|e| e.refusing(image.registry()))?;
    scope_to_allowlist(exchanger, image, &mut plan);
    if !matching::matches_auth_key(&plan.auth_key, &image.to_string()) {
        return Err(Error::internal(format!(
            "internal error: the {} exchanger chose the auth key {} that the kubelet would never match against {image}",
            plan.provider,
            quote(&plan.auth_key)
        ))
        .fix("report this as a bug"));
    }
    if let Some((rule, asked)) = mirrored {
        key_by_source(&mut plan, rule, asked);
    }
    wicp_base::log::debug!("plan: {plan:?}");
    Ok(Prepared { audiences, plan })
}

/// A mirrored plan answers under the source registry, the key the
/// kubelet looks the credential up by; the rule is one of its inputs, so
/// the cache keeps mirrored and direct answers apart.
fn key_by_source(plan: &mut Plan<'_>, rule: &Rule, asked: &ImageRef) {
    plan.auth_key = asked.registry().to_string();
    plan.inputs.push(wicp_providers::Input::setting(
        "registry_mirror",
        rule.to_string(),
    ));
}

/// Narrows a plan's auth key to the path of the `--registry` pattern that
/// allowed `image`, for every provider with an allowlist.
///
/// With `--registry ghcr.io/acme` the admin allowed one path of a host;
/// a response keyed `ghcr.io` with `cacheKeyType: Registry` would let the
/// kubelet reuse the credential for `ghcr.io/other-team/app`. Keyed
/// `ghcr.io/acme` with `cacheKeyType: Image`, the kubelet matches it as a
/// literal path prefix and caches it for this image only. The rule lives
/// here, not in the providers, so none can skip it: every plan passes
/// through [`prepare`].
fn scope_to_allowlist(exchanger: &dyn Exchanger, image: &ImageRef, plan: &mut Plan<'_>) {
    let Some((allowlist, _)) = exchanger.allowlist() else {
        return;
    };
    match allowlist.scope(image) {
        Some(path) if !path.is_empty() => {
            plan.auth_key = format!("{}{path}", image.registry());
            plan.cache_key_type = wicp_kubelet::request::protocol::CacheKeyType::Image;
        }
        _ => {}
    }
}

/// Reads the request under the deadline (see [`wicp_kubelet::request::stdin`] for how),
/// so that a writer that never closes stdin does not hang the plugin until
/// the kubelet kills it.
fn read_request_within(deadline: &Deadline) -> Result<protocol::Request> {
    match stdin::read_within(protocol::MAX_REQUEST_BYTES, deadline) {
        Ok(stdin::Outcome::Complete(bytes)) => protocol::request_from_bytes(&bytes),
        Ok(stdin::Outcome::TimedOut) => Err(Error::request(format!(
            "no complete request arrived on stdin within the deadline of {}s",
            deadline.budget().as_secs()
        ))
        .fix("the kubelet writes one CredentialProviderRequest and closes stdin; by hand, pipe the request in (or end input with Ctrl-D)")),
        Err(e) => Err(Error::request(format!(
            "cannot read the request from stdin: {e}"
        ))),
    }
}

/// Reads one request and produces the response bytes, noting in `record`
/// what it learns for the metrics and the audit log.
fn respond(line: &CommandLine, inputs: &Inputs, record: &mut Record) -> Result<Vec<u8>> {
    let options = &line.options;
    let deadline = Deadline::after(options.timeout());
    let Received {
        request,
        image,
        mirrored,
        provider,
        token,
    } = receive(line.choice, &options.mirrors, &deadline, record)?;
    route::require_node_identity(provider, options.fallback.fallback())?;
    let exchanger = line.build(provider, inputs)?;
    let (token, audience) = identity(options, exchanger.as_ref(), token, &deadline)?;
    let annotations = &request.service_account_annotations;
    let prepared = prepare(
        exchanger.as_ref(),
        audience.as_deref(),
        mirrored.as_ref().map_or(&image, |(_, on_mirror)| on_mirror),
        token.as_ref(),
        annotations,
        request.api_version.as_str(),
        mirrored.as_ref().map(|(rule, _)| (*rule, &image)),
    )?;
    note_identity(record, &prepared.plan, options.observe.enabled());
    if let Some(id) = token.as_ref().and_then(ServiceAccountToken::spiffe_id) {
        record.principal.insert(0, ("spiffe id", id.to_string()));
    }
    let auth_key = prepared.plan.auth_key.clone();
    let cache_key_type = prepared.plan.cache_key_type;
    let cache = if prepared.plan.cacheable {
        Cache::open(&options.cache, options.max_cache_duration())?
            .map(|cache| (cache, cache_key(&prepared, token.as_ref(), annotations)))
    } else {
        None
    };
    // What the cache keys the credential by (Plan::cached_as), without
    // borrowing the plan, whose exchange is moved below.
    let cached_as = prepared.plan.every_registry.unwrap_or(auth_key.as_str());
    let cached = cache.as_ref().map(|(cache, key)| {
        // A node credential, or one shared by a SPIFFE identity, is no
        // one service account's; the SPIFFE ID is recorded instead.
        let pods = token.as_ref().filter(|_| !prepared.plan.identity.is_node());
        let subject = cache::Subject {
            provider: provider.name(),
            service_account: pods
                .filter(|t| t.spiffe_id().is_none())
                .map(|t| t.service_account()),
            spiffe_id: pods.and_then(|t| t.spiffe_id()),
            registry: cached_as,
        };
        (cache, key, subject)
    });
    let served = obtain(
        prepared.plan.exchange,
        cached,
        &deadline,
        &mut record.exchange,
    )?;
    if let (Some((cache, _)), Origin::Exchange, Some(_)) =
        (&cache, served.origin, &options.observe.metrics_dir)
    {
        record.cache_stats = cache.stats();
    }
    let credential = served.credential;

    // Under `--identity spiffe` the kubelet keeps the credential no longer
    // than the SVID it was obtained with: the kubelet does not ask the
    // agent again before it asks us, and the SVID is what says which
    // identity the pod has now. (The disk cache keeps it longer: it is
    // keyed by the SPIFFE ID of an SVID fetched on every pull.)
    let svid_expiry = token
        .as_ref()
        .filter(|t| t.spiffe_id().is_some())
        .map_or(i64::MAX, |svid| svid.claims().expires_at);
    let cache_duration = kubelet_cache_duration(
        served.created_at,
        credential.expires_at.min(svid_expiry),
        options.max_cache_duration(),
        image.registry(),
    );
    let response = Response::new(
        request.api_version,
        cache_key_type,
        cache_duration,
        &auth_key,
        &credential.username,
        &credential.password,
    );
    let json = response.to_json()?;
    let (outcome, cache_words) = described(served.origin, served.stored);
    record.outcome = Some(outcome);
    record.cache = Some(cache_words);
    if log::enabled(Level::Info) {
        let mut whose = whose(&prepared.plan.identity, record);
        if let Some(id) = token.as_ref().and_then(ServiceAccountToken::spiffe_id) {
            whose = format!("{whose} as {id}");
        }
        let on_mirror = mirrored.as_ref().map(|(_, on_mirror)| on_mirror);
        let text = success_text(
            provider,
            &whose,
            &auth_key,
            &image,
            on_mirror,
            cache_duration,
        );
        log_success(text, outcome, cache_words, record);
    }
    Ok(json)
}

/// The token a pull presents and the audience it must carry. With the
/// service account identity: the kubelet's token and `--audience`, as
/// they came. Under `--identity spiffe`: the JWT-SVID the SPIRE agent
/// mints for the workload the kubelet's token names, in its place, and
/// the audience it was minted for; the kubelet's token goes no further.
/// A request without a token is left to the usual checks (`--fallback
/// node`, or the error that asks for `tokenAttributes`).
fn identity(
    options: &options::Options,
    exchanger: &dyn Exchanger,
    token: Option<ServiceAccountToken>,
    deadline: &Deadline,
) -> Result<(Option<ServiceAccountToken>, Option<String>)> {
    let (Some(spiffe), Some(kubelet)) = (options.identity.spiffe()?, token.as_ref()) else {
        return Ok((token, options.audience.clone()));
    };
    let audience = spiffe.audience(
        options.audience.as_deref(),
        &exchanger.audiences(),
        exchanger.provider().name(),
    )?;
    let svid = wicp_providers::spiffe::present(&spiffe, &audience, kubelet, deadline)?;
    Ok((Some(svid), Some(audience)))
}

/// The one info line of a success.
fn success_text(
    provider: &Provider,
    whose: &str,
    auth_key: &str,
    image: &ImageRef,
    on_mirror: Option<&ImageRef>,
    cache_duration: std::time::Duration,
) -> String {
    let via = on_mirror
        .map(|target| format!(" via the mirror {target}"))
        .unwrap_or_default();
    format!(
        "{provider} credentials for {whose} on {auth_key} ({image}{via}), cacheDuration {}",
        duration::format_go(cache_duration)
    )
}

/// A request, read and routed.
struct Received<'m> {
    request: protocol::Request,
    /// The image the kubelet asked about.
    image: ImageRef,
    /// With a `--registry-mirror` rule for its registry: the rule and the
    /// image on the mirror, which is what was routed.
    mirrored: Option<(&'m Rule, ImageRef)>,
    provider: &'static Provider,
    token: Option<ServiceAccountToken>,
}

/// Reads the request, parses its image, routes it (`choice`, or `auto`
/// when `None`) and decodes its token, noting each in `record` as it is
/// learnt, so that a failure names what was known.
fn receive<'m>(
    choice: Option<&'static Provider>,
    mirrors: &'m wicp_providers::mirror::Options,
    deadline: &Deadline,
    record: &mut Record,
) -> Result<Received<'m>> {
    let request = read_request_within(deadline)?;
    let image = ImageRef::parse(&request.image)?;
    record.registry = Some(image.registry().to_string());
    record.image = Some(request.image.clone());
    let mirrored = match mirrors.for_image(&image) {
        Some(rule) => Some((rule, rule.target_image(&image)?)),
        None => None,
    };
    let routed = mirrored.as_ref().map_or(&image, |(_, on_mirror)| on_mirror);
    let provider = route::choose(choice, routed)?;
    record.provider = Some(provider.name());
    let token = decode_token(&request, record)?;
    if log::is_json() {
        log::set_subject(log_subject(record));
    }
    Ok(Received {
        request,
        image,
        mirrored,
        provider,
        token,
    })
}

/// The request's service account token, decoded (not verified: the
/// upstream verifies it), and whose it is, noted in `record`.
fn decode_token(
    request: &protocol::Request,
    record: &mut Record,
) -> Result<Option<ServiceAccountToken>> {
    let Some(raw) = request.service_account_token.clone() else {
        return Ok(None);
    };
    let token = ServiceAccountToken::decode(raw, duration::unix_now())?;
    record.service_account = Some(token.service_account().clone());
    record.pod = token.claims().pod.as_ref().map(|p| p.name.clone());
    Ok(Some(token))
}

/// The on-disk cache key of a prepared plan.
fn cache_key(
    prepared: &Prepared<'_>,
    token: Option<&ServiceAccountToken>,
    annotations: &BTreeMap<String, String>,
) -> cache::Key {
    let key_inputs = prepared.key_inputs(token, annotations);
    wicp_base::log::debug!(
        "cache key text:\n{}",
        cache::key::canonical(&key_inputs).trim_end()
    );
    cache::Key::derive(&key_inputs)
}

/// The credential of a plan: from the on-disk cache when `cached` holds
/// it, else exchanged (and stored there, when `cached`). The exchange is
/// timed into `took` for the metrics, success or failure.
fn obtain(
    exchange: wicp_providers::Exchange<'_>,
    cached: Option<(&Cache, &cache::Key, cache::Subject<'_>)>,
    deadline: &Deadline,
    took: &mut Option<std::time::Duration>,
) -> Result<cache::Served> {
    let timed = move |deadline: &Deadline| {
        let started = Instant::now();
        let credential = exchange(deadline);
        *took = Some(started.elapsed());
        credential
    };
    match cached {
        Some((cache, key, about)) => cache.serve(key, about, deadline, timed),
        None => Ok(cache::Served {
            credential: timed(deadline)?,
            created_at: duration::unix_now(),
            origin: Origin::Exchange,
            stored: Stored::NotApplicable,
        }),
    }
}

/// The `cacheDuration` for the kubelet, with a warning when the credential
/// is too close to its expiry to be cached at all.
fn kubelet_cache_duration(
    created_at: i64,
    expires_at: i64,
    max: std::time::Duration,
    registry: &str,
) -> std::time::Duration {
    let cache_duration =
        cache::kubelet_cache_duration(duration::unix_now(), created_at, expires_at, max);
    if cache_duration.is_zero() {
        wicp_base::log::warning!(
            "the credential for {registry} expires at {}, too soon to cache; the kubelet will ask again on the next pull",
            duration::format_unix(expires_at)
        );
    }
    cache_duration
}

/// Notes in `record` whose identity the plan pulls with and, when the
/// invocation is `observed`, the inputs that name it.
fn note_identity(record: &mut Record, plan: &Plan<'_>, observed: bool) {
    record.identity = Some(match plan.identity {
        Whose::Node { .. } => Identity::Node,
        Whose::ServiceAccount => Identity::ServiceAccount,
    });
    if observed {
        record.principal = principal(plan);
    }
}

/// Whose identity a credential is, for the log line.
fn whose(identity: &Whose, record: &Record) -> String {
    match identity {
        Whose::Node { why } => {
            wicp_base::log::debug!("node identity: {why}");
            "the node's identity".to_string()
        }
        Whose::ServiceAccount => record
            .service_account
            .as_ref()
            .map_or_else(|| "no service account".to_string(), ToString::to_string),
    }
}

/// The outcome of a served credential, and what the cache did, in words.
fn described(origin: Origin, stored: Stored) -> (Outcome, &'static str) {
    match (origin, stored) {
        (Origin::Cache, _) => (Outcome::Hit, "from the on-disk cache"),
        (Origin::Exchange, Stored::Written) => (Outcome::Miss, "exchanged and cached"),
        (Origin::Exchange, Stored::WriteFailed) => (
            Outcome::Miss,
            "exchanged, not cached (the cache entry could not be written)",
        ),
        (Origin::Exchange, Stored::TooLarge) => (
            Outcome::Miss,
            "exchanged, not cached (larger than a cache entry may be)",
        ),
        (Origin::Exchange, Stored::TooShortLived) => (
            Outcome::Miss,
            "exchanged, not cached (too close to its expiry or --max-cache-duration to be served again)",
        ),
        (Origin::Exchange, Stored::NotApplicable) => (Outcome::Miss, "exchanged"),
    }
}

/// The one line a success logs at info level: `text`, then what the
/// cache did unless it was not involved.
fn log_success(mut text: String, outcome: Outcome, cache_words: &'static str, record: &Record) {
    if cache_words != "exchanged" {
        text.push_str(", ");
        text.push_str(cache_words);
    }
    log::write_event(
        Level::Info,
        &text,
        &text,
        &log::Fields {
            outcome: Some(outcome.name()),
            cache: Some(cache_words),
            duration: Some(record.started.elapsed()),
            upstream_status: observe::last_status(),
            ..log::Fields::default()
        },
    );
}

/// The plan's inputs that name the identity used ([`Plan::principal`]),
/// for the audit log.
fn principal(plan: &wicp_providers::Plan<'_>) -> Vec<(&'static str, String)> {
    plan.principal()
        .map(|input| (input.name(), input.value().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wicp_base::secret::Secret;
    use wicp_kubelet::request::protocol::CacheKeyType;

    /// A command line that configures every provider, parsed by the
    /// binary's own parser.
    fn every_provider(registries: &[&str]) -> CommandLine {
        let mut args: Vec<String> = registries
            .iter()
            .map(|r| format!("--registry={r}"))
            .collect();
        args.extend(
            [
                "--gcp-project-id=my-project",
                "--gcp-cluster=projects/my-project/locations/us-central1/clusters/prod",
                "--vault-address=https://vault.example.com:8200",
                "--vault-role=puller",
                "--vault-secret-prefix=registry",
                "--jfrog-url=https://acme.jfrog.io",
                "--jfrog-provider-name=k8s",
                "--quay-organization=acme",
                "--cloudsmith-org=acme",
                "--token-exchange-url=https://sts.example.com/oauth2/token",
                "--token-exchange-username=robot",
            ]
            .map(String::from),
        );
        command_line(&args)
    }

    fn command_line(args: &[String]) -> CommandLine {
        options::parse_as(options::BINARY, args, &wicp_net::inputs::Env::default()).unwrap()
    }

    fn any_token() -> ServiceAccountToken {
        let claims = r#"{"aud":["harbor.example.com","open.example.com","cgr.dev","issuer.enforce.dev","sts.amazonaws.com","api://AzureADTokenExchange","my-project.svc.id.goog"],"exp":5000,"iat":1000,"iss":"https://issuer.example","sub":"system:serviceaccount:team:api","kubernetes.io":{"namespace":"team","serviceaccount":{"name":"api","uid":"u-1"}}}"#;
        ServiceAccountToken::decode(
            Secret::new(wicp_kubelet::request::token::jwt(
                r#"{"alg":"RS256"}"#,
                claims,
            )),
            2000,
        )
        .unwrap()
    }

    /// [`prepare`] as the kubelet's v1 request would call it, with a token
    /// and no `--audience`.
    fn prepare_v1<'a>(
        exchanger: &'a dyn Exchanger,
        image: &'a ImageRef,
        token: &'a ServiceAccountToken,
        annotations: &'a BTreeMap<String, String>,
    ) -> Result<Prepared<'a>> {
        prepare(
            exchanger,
            None,
            image,
            Some(token),
            annotations,
            "credentialprovider.kubelet.k8s.io/v1",
            None,
        )
    }

    /// An image on a registry each provider serves (with
    /// [`every_provider`]'s `--registry harbor.example.com`).
    fn one_image_per_provider() -> [ImageRef; 5] {
        [
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
            "contoso.azurecr.io/app",
            "us-docker.pkg.dev/my-project/repo/app",
            "cgr.dev/acme/app",
            "harbor.example.com/team/app",
        ]
        .map(|i| ImageRef::parse(i).unwrap())
    }

    /// What an exchanger reads is what its provider declares: built with
    /// the default flags (and with `--fallback node`), every key it reads
    /// is one of its declaration's, and with the defaults it reads them all.
    #[test]
    fn every_exchanger_reads_the_annotations_its_provider_declares() {
        let inputs = Inputs::default();
        let defaults = every_provider(&["harbor.example.com"]);
        let node = command_line(
            &[
                "--fallback=node",
                "--gcp-project-id=my-project",
                "--gcp-cluster=projects/my-project/locations/us-central1/clusters/prod",
                "--vault-address=https://vault.example.com:8200",
                "--vault-role=puller",
                "--vault-secret-prefix=registry",
            ]
            .map(String::from),
        );
        for provider in wicp_providers::ALL {
            let declared: Vec<String> =
                provider.annotations.iter().map(|k| k.to_string()).collect();
            let read = defaults.build(provider, &inputs).unwrap().annotation_keys();
            for key in &read {
                assert!(declared.contains(key), "{provider} reads {key}, undeclared");
            }
            if let Ok(exchanger) = node.build(provider, &inputs) {
                for key in exchanger.annotation_keys() {
                    assert!(
                        declared.contains(&key),
                        "{provider} reads {key}, undeclared"
                    );
                }
            }
        }
    }

    /// One rule for every annotation every provider reads: a blank value,
    /// a control character, a separator or bidi override, or an over-long
    /// value is refused, naming the annotation, before any plan.
    #[test]
    fn every_providers_annotations_are_checked_by_one_rule() {
        let matches = every_provider(&["harbor.example.com"]);
        let inputs = Inputs::default();
        let token = any_token();
        let images = one_image_per_provider();
        let long = "a".repeat(route::MAX_ANNOTATION_VALUE + 1);
        let bad = [
            "",
            "   ",
            "acme+puller\r\nX-Injected: 1",
            "a\u{1b}[31mred",
            "a\u{7}b",
            "a\u{0}b",
            "a\u{85}b",
            "a\u{2028}b",
            "a\u{202e}b",
            long.as_str(),
        ];
        let mut keys_checked = 0;
        for provider in wicp_providers::ALL {
            let exchanger = matches.build(provider, &inputs).unwrap();
            let image = images.iter().find(|i| exchanger.serves(i)).unwrap();
            for key in exchanger.annotation_keys() {
                for value in bad {
                    let annotations = wicp_providers::annotations(&[(key.as_str(), value)]);
                    let error = prepare_v1(exchanger.as_ref(), image, &token, &annotations)
                        .err()
                        .unwrap_or_else(|| panic!("{provider}: {key}={value:?} was accepted"));
                    assert_eq!(error.kind(), wicp_base::error::Kind::Annotation, "{error}");
                    assert!(error.to_string().contains(&key), "{error}");
                }
                keys_checked += 1;
            }
        }
        assert!(keys_checked >= 12, "{keys_checked}");
    }

    /// Every provider whose registries are the admin's choice, present and
    /// future, gets a path-scoped `--registry` right: this walks
    /// [`wicp_providers::ALL`], so a new provider is in it without
    /// anyone remembering to add it.
    #[test]
    fn a_path_scoped_registry_scopes_every_allowlisted_providers_answer() {
        let matches = every_provider(&["harbor.example.com/team-a", "open.example.com"]);
        let inputs = Inputs::default();
        let annotations = wicp_providers::annotations(&[
            ("wi-credential-provider.io/quay-robot", "acme+puller"),
            ("wi-credential-provider.io/cloudsmith-service", "puller"),
            ("wi-credential-provider.io/vault-secret", "team-a/pull"),
            (
                "wi-credential-provider.io/chainguard-identity",
                "0123456789abcdef0123456789abcdef01234567/0123456789abcdef",
            ),
        ]);
        let token = any_token();
        let scoped = ImageRef::parse("harbor.example.com/team-a/app:v1").unwrap();
        let open = ImageRef::parse("open.example.com/team-b/app:v1").unwrap();
        let mut checked = Vec::new();
        for provider in wicp_providers::ALL.iter().filter(|p| p.auto.is_none()) {
            let exchanger = matches.build(provider, &inputs).unwrap();
            assert!(
                exchanger.allowlist().is_some(),
                "{provider} picks its registries by --registry but declares no allowlist"
            );
            for (image, key, kind) in [
                (&scoped, "harbor.example.com/team-a", CacheKeyType::Image),
                (&open, "open.example.com", CacheKeyType::Registry),
            ] {
                let prepared = prepare_v1(exchanger.as_ref(), image, &token, &annotations)
                    .unwrap_or_else(|e| panic!("{provider} on {image}: {e}"));
                assert_eq!(prepared.plan.auth_key, key, "{provider}");
                assert_eq!(prepared.plan.cache_key_type, kind, "{provider}");
            }
            checked.push(provider.name);
        }
        assert_eq!(
            checked,
            [
                "passthrough",
                "jfrog",
                "quay",
                "cloudsmith",
                "token-exchange",
                "chainguard",
                "vault"
            ]
        );
    }

    /// Every plan of every provider, its own and its node plan, names who
    /// pulls (an `Input::Identity`): the audit log's `principal` is never
    /// empty.
    #[test]
    fn every_plan_of_every_provider_names_its_principal() {
        let with_node = every_provider(&["harbor.example.com"]);
        let node = {
            let mut args: Vec<String> = vec!["--fallback=node".into()];
            args.extend(
                [
                    "--gcp-project-id=my-project",
                    "--gcp-cluster=projects/my-project/locations/us-central1/clusters/prod",
                    "--azure-node-client-id=00000000-0000-0000-0000-000000000001",
                ]
                .map(String::from),
            );
            command_line(&args)
        };
        let inputs = Inputs::default();
        let token = any_token();
        let annotations = wicp_providers::annotations(&[
            (
                "eks.amazonaws.com/role-arn",
                "arn:aws:iam::123456789012:role/pull",
            ),
            (
                "azure.workload.identity/client-id",
                "00000000-0000-0000-0000-000000000002",
            ),
            (
                "azure.workload.identity/tenant-id",
                "00000000-0000-0000-0000-000000000003",
            ),
            (
                "iam.gke.io/gcp-service-account",
                "puller@my-project.iam.gserviceaccount.com",
            ),
            ("wi-credential-provider.io/quay-robot", "acme+puller"),
            ("wi-credential-provider.io/cloudsmith-service", "puller"),
            ("wi-credential-provider.io/vault-secret", "team-a/pull"),
            (
                "wi-credential-provider.io/chainguard-identity",
                "0123456789abcdef0123456789abcdef01234567/0123456789abcdef",
            ),
        ]);
        let no_annotations = BTreeMap::new();
        let images = one_image_per_provider();
        for provider in wicp_providers::ALL {
            let exchanger = with_node.build(provider, &inputs).unwrap();
            let image = images.iter().find(|i| exchanger.serves(i)).unwrap();
            let principal = |exchanger: &dyn Exchanger, annotations| {
                let plan = prepare_v1(exchanger, image, &token, annotations)
                    .unwrap_or_else(|e| panic!("{provider}: {e}"))
                    .plan;
                plan.principal().map(|i| i.name()).collect::<Vec<_>>()
            };
            let own = principal(exchanger.as_ref(), &annotations);
            assert!(!own.is_empty(), "{provider}: no identity input");
            if provider.node_identity.is_some() {
                let exchanger = node.build(provider, &inputs).unwrap();
                let node_plan = principal(exchanger.as_ref(), &no_annotations);
                assert!(
                    !node_plan.is_empty(),
                    "{provider}: no identity input in the node plan"
                );
            }
        }
    }

    #[test]
    fn failure_line_names_everything_and_redacts() {
        let mut record = Record::new(Instant::now());
        record.chosen = "auto";
        // Before routing, the line says only what is known.
        assert_eq!(
            failure_line(&record, &Error::request("no request")),
            "service account unknown failed: no request"
        );
        let error =
            Error::upstream("upstream echoed opaque-registered-secret-value\nback").fix("do x");
        record.provider = Some("passthrough");
        record.service_account = Some(wicp_kubelet::request::token::ServiceAccount {
            namespace: "team".into(),
            name: "api".into(),
            uid: "u".into(),
        });
        record.registry = Some("reg.io".into());
        let _token = wicp_base::secret::Secret::new("opaque-registered-secret-value");
        let line = failure_line(&record, &error);
        assert_eq!(
            line,
            "provider passthrough, service account team/api, registry reg.io failed: upstream echoed <redacted> back; fix: do x"
        );
    }
}
