//! `wi-credential-provider explain`: for one image and one ServiceAccount
//! manifest, what the kubelet would send and what this plugin would do with
//! it, without any network call. The first thing to run when a pull fails.
//!
//! There is no real token to plan with, so explain mints a stand-in: an
//! unsigned JWT with the claims the kubelet's token would carry (namespace,
//! name and UID from the manifest, the entry's audience, a one-hour life),
//! clearly labelled as synthetic. It goes through the same decoding,
//! routing and [`serve::prepare`] (audience check, plan, auth-key check)
//! as a real request, and the plan's network step is never run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k8s_openapi::api::core::v1::ServiceAccount;
use serde::Deserialize;
use serde_json::json;

use crate::commands::check_config::{entry, lint};
use crate::serve;
use wicp_base::duration::{self, format_go};
use wicp_base::error::{Error, Result};
use wicp_base::secret::Secret;
use wicp_kubelet::config::matching;
use wicp_kubelet::config::provider_config::{Entry, PROVIDER_V1, TokenAttributes, load};
use wicp_kubelet::config::{Finding, Severity, validate};
use wicp_kubelet::request::image::ImageRef;
use wicp_kubelet::request::token::{ServiceAccountToken, SvidClaims};
use wicp_net::inputs::Env;
use wicp_providers::cache::Key;
use wicp_providers::fallback::{Fallback, Whose};
use wicp_providers::mirror::Rule;
use wicp_providers::route;

#[derive(clap::Args, Clone, Debug)]
pub(crate) struct Args {
    /// The image as written in the pod spec (nginx:1.25,
    /// 123456789012.dkr.ecr.eu-west-1.amazonaws.com/app:v1); it is
    /// normalized as the kubelet does before matching.
    #[arg(long, value_name = "IMAGE")]
    pub(crate) image: String,

    /// The pod's ServiceAccount manifest, e.g. from
    /// `kubectl get serviceaccount NAME -o yaml`.
    #[arg(long = "service-account", value_name = "FILE")]
    pub(crate) service_account: PathBuf,

    /// The kubelet's CredentialProviderConfig (file or directory).
    #[arg(long, value_name = "FILE|DIR")]
    pub(crate) config: PathBuf,

    /// The issuer written into the synthetic token (the cluster's
    /// --service-account-issuer), for exchangers that look at it.
    #[arg(
        long,
        value_name = "URL",
        default_value = "https://kubernetes.default.svc"
    )]
    pub(crate) issuer: String,
}

/// The service account, as the kubelet would read it from the API server.
#[derive(Debug)]
pub(crate) struct Account {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) annotations: BTreeMap<String, String>,
    /// What the manifest did not say and explain filled in.
    pub(crate) assumed: Vec<String>,
}

/// Reads the one ServiceAccount in `path` (a manifest, a multi-document
/// file or a `kind: List`), with k8s-openapi's type.
fn read_service_account(path: &Path) -> Result<Account> {
    let manifest = || "pass the manifest from `kubectl get serviceaccount NAME -o yaml`";
    let bytes = wicp_base::yaml::read(path)
        .map_err(|why| Error::config(format!("{}: {why}", path.display())).fix(manifest()))?;
    let text = String::from_utf8(bytes).map_err(|_| {
        Error::config(format!("{} is not UTF-8 text", path.display())).fix(manifest())
    })?;
    wicp_base::yaml::check_depth(&text)
        .map_err(|why| Error::config(format!("{}: {why}", path.display())).fix(manifest()))?;
    let mut found = Vec::new();
    for document in yaml_serde::Deserializer::from_str(&text) {
        let value = yaml_serde::Value::deserialize(document)
            .map_err(|e| Error::config(format!("{} is not YAML: {e}", path.display())))?;
        let items = match value.get("kind").and_then(|k| k.as_str()) {
            Some("List") => value
                .get("items")
                .and_then(|i| i.as_sequence())
                .cloned()
                .unwrap_or_default(),
            _ => vec![value],
        };
        found.extend(
            items
                .into_iter()
                .filter(|v| v.get("kind").and_then(|k| k.as_str()) == Some("ServiceAccount")),
        );
    }
    let value = match found.len() {
        1 => found.remove(0),
        0 => {
            return Err(
                Error::config(format!("{} has no ServiceAccount", path.display()))
                    .fix("pass the manifest from `kubectl get serviceaccount NAME -o yaml`"),
            );
        }
        n => {
            return Err(Error::config(format!(
                "{} has {n} ServiceAccounts, so which pod's is meant is unclear",
                path.display()
            ))
            .fix("pass a file with only the pod's ServiceAccount"));
        }
    };
    let sa: ServiceAccount = yaml_serde::from_value(value).map_err(|e| {
        Error::config(format!(
            "{} is not a valid ServiceAccount: {e}",
            path.display()
        ))
    })?;
    let meta = sa.metadata;
    let name = meta.name.filter(|n| !n.is_empty()).ok_or_else(|| {
        Error::config(format!(
            "the ServiceAccount in {} has no metadata.name",
            path.display()
        ))
    })?;
    let mut assumed = Vec::new();
    let namespace = meta.namespace.filter(|n| !n.is_empty()).unwrap_or_else(|| {
        assumed.push("namespace \"default\" (the manifest has none)".to_string());
        "default".to_string()
    });
    let uid = meta.uid.filter(|u| !u.is_empty()).unwrap_or_else(|| {
        assumed.push(
            "uid 00000000-0000-0000-0000-000000000000 (the manifest has none; use `kubectl get -o yaml` for the real one)"
                .to_string(),
        );
        "00000000-0000-0000-0000-000000000000".to_string()
    });
    Ok(Account {
        namespace,
        name,
        uid,
        annotations: meta.annotations.unwrap_or_default(),
        assumed,
    })
}

/// The stand-in for the kubelet's token: an unsigned JWT with the claims a
/// projected token for `account` and `audience` would have. Its signature
/// segment says what it is; nothing ever sends it anywhere.
fn synthetic_token(
    account: &Account,
    audience: &str,
    issuer: &str,
    now: i64,
) -> Result<ServiceAccountToken> {
    let header = json!({"alg": "RS256", "typ": "JWT", "kid": "synthetic-by-explain"});
    let claims = json!({
        "iss": issuer,
        "sub": format!("system:serviceaccount:{}:{}", account.namespace, account.name),
        "aud": [audience],
        "iat": now,
        "nbf": now,
        "exp": now + 3600,
        "kubernetes.io": {
            "namespace": account.namespace,
            "serviceaccount": {"name": account.name, "uid": account.uid},
        },
    });
    let jwt = format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        URL_SAFE_NO_PAD.encode("synthetic-not-signed")
    );
    ServiceAccountToken::decode(Secret::new(jwt), now)
}

/// `env` is this process's environment, the closest stand-in for the
/// kubelet's.
pub(crate) fn run(args: &Args, env: &Env) -> ExitCode {
    let mut out = String::new();
    let ok = match explain(args, env, &mut out) {
        Ok(ok) => ok,
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
            false
        }
    };
    crate::commands::report(&shown(&out), ok)
}

/// `out` as a terminal may show it: every line with the characters that
/// change how text reads (controls, line separators, bidirectional
/// overrides) escaped, as the log's lines are. A tenant's annotation value
/// reaches several lines (the request, the plan's inputs).
fn shown(out: &str) -> String {
    out.lines()
        .map(|line| format!("{}\n", wicp_base::redact::escape_hidden(line)))
        .collect()
}

/// Writes the explanation to `out`. `Ok(true)` when some provider entry of
/// this plugin would produce a plan for the image.
pub(crate) fn explain(args: &Args, env: &Env, out: &mut String) -> Result<bool> {
    let image = ImageRef::parse(&args.image)?;
    let target = image.to_string();
    let account = read_service_account(&args.service_account)?;
    let loaded = load(&args.config);

    write_header(args, &image, &account, loaded.entries.len(), out);
    let validation = validate::validate(&loaded);
    let refused = loaded.has_decode_errors() || validate::has_errors(&validation);
    let mut findings: Vec<Finding> = loaded.findings.clone();
    findings.extend(validation);
    findings.extend(lint::lint(&loaded, None, env));
    if refused {
        let _ = writeln!(out, "\nthe kubelet would refuse to start with this config:");
        for f in findings
            .iter()
            .filter(|f| f.rule.as_str().starts_with("kubelet."))
        {
            let _ = writeln!(out, "  {f}");
        }
        return Ok(false);
    }

    let mut any = false;
    let mut matched = false;
    for entry in &loaded.entries {
        let Some((index, pattern)) = entry
            .provider
            .match_images()
            .iter()
            .enumerate()
            .find(|(_, p)| matching::matches(p, &target))
        else {
            let _ = writeln!(
                out,
                "\nprovider {:?}: not run (no matchImages entry matches {target})",
                entry.name()
            );
            continue;
        };
        matched = true;
        let _ = writeln!(
            out,
            "\nprovider {:?} ({}, {}): matches via {pattern:?}",
            entry.name(),
            entry.file.display(),
            entry.field("")
        );
        let planned = explain_entry(args, entry, &image, &account, env, out);
        let blocked = write_entry_findings(&findings, entry, index, planned, out);
        any |= planned && !blocked;
    }
    if !matched {
        let _ = writeln!(
            out,
            "\nno provider entry matches {target}: the kubelet pulls it without plugin credentials"
        );
    }
    Ok(any)
}

/// What is explained: the image, the service account and the config.
fn write_header(
    args: &Args,
    image: &ImageRef,
    account: &Account,
    entries: usize,
    out: &mut String,
) {
    let _ = writeln!(
        out,
        "image: {image} (as the kubelet sends it; registry {})",
        image.registry()
    );
    let _ = writeln!(
        out,
        "service account: {}/{} (uid {}), {} annotation{}",
        account.namespace,
        account.name,
        account.uid,
        account.annotations.len(),
        if account.annotations.len() == 1 {
            ""
        } else {
            "s"
        }
    );
    for assumption in &account.assumed {
        let _ = writeln!(out, "  assumed: {assumption}");
    }
    let _ = writeln!(
        out,
        "config: {} ({} provider entries)",
        args.config.display(),
        entries
    );
}

/// Writes check-config's findings about `entry`, matched by its
/// `matchImages[index]`; whether one of them keeps the credential from
/// being used (an error, except about a sibling pattern, which does not
/// stop this image's pull).
fn write_entry_findings(
    findings: &[Finding],
    entry: &Entry,
    index: usize,
    planned: bool,
    out: &mut String,
) -> bool {
    let own = entry_findings(findings, entry);
    // A broken sibling pattern does not stop this image's pull.
    let other_pattern = |f: &Finding| {
        f.field.starts_with(&entry.field("matchImages["))
            && f.field != entry.field(&format!("matchImages[{index}]"))
    };
    let blocking: Vec<&&Finding> = own
        .iter()
        .filter(|f| f.severity == Severity::Error && !other_pattern(f))
        .collect();
    if !own.is_empty() {
        let _ = writeln!(out, "  check-config findings for this entry:");
        for f in &own {
            let fix = f
                .fix
                .as_ref()
                .map(|x| format!("; fix: {x}"))
                .unwrap_or_default();
            let _ = writeln!(out, "    {}: {}: {}{fix}", f.severity, f.field, f.message);
        }
    }
    if planned && !blocking.is_empty() {
        let _ = writeln!(
            out,
            "  result: the plugin would answer, but the error above keeps the credential from being used"
        );
    }
    !blocking.is_empty()
}

/// The findings about one entry (its fields, not a sibling's).
fn entry_findings<'f>(findings: &'f [Finding], entry: &Entry) -> Vec<&'f Finding> {
    let base = entry.field("");
    let file = entry.file.display().to_string();
    findings
        .iter()
        .filter(|f| f.file == file && (f.field == base || f.field.starts_with(&format!("{base}."))))
        .collect()
}

/// What the kubelet passes of the service account's annotations: the
/// keys `tokenAttributes` lists, when the account has them.
fn passed_annotations(attrs: &TokenAttributes, account: &Account) -> BTreeMap<String, String> {
    attrs
        .required_keys()
        .iter()
        .chain(attrs.optional_keys())
        .filter_map(|key| Some((key.clone(), account.annotations.get(key)?.clone())))
        .collect()
}

/// The kubelet's side of an entry with `tokenAttributes`: whether it runs
/// the plugin for this account, what it passes, and the stand-in token;
/// `None` when the plugin is not run (or no stand-in can be made).
fn kubelet_token(
    args: &Args,
    attrs: &TokenAttributes,
    account: &Account,
    out: &mut String,
) -> Option<ServiceAccountToken> {
    let missing: Vec<&String> = attrs
        .required_keys()
        .iter()
        .filter(|k| !account.annotations.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        let _ = writeln!(
            out,
            "    does NOT run the plugin: the service account lacks the required annotation{} {}",
            if missing.len() == 1 { "" } else { "s" },
            quoted_keys(&missing)
        );
        let _ = writeln!(
            out,
            "    (the kubelet logs this only at -v=5; the pull goes on without these credentials)"
        );
        return None;
    }
    let _ = writeln!(
        out,
        "    token: audience {:?}, cacheType {}, lifetime 1h (synthetic stand-in below, never sent)",
        attrs.audience(),
        attrs.cache_type.as_deref().unwrap_or("")
    );
    write_keys(
        out,
        "optional annotations absent from the service account",
        attrs
            .optional_keys()
            .iter()
            .filter(|k| !account.annotations.contains_key(*k)),
    );
    write_keys(
        out,
        "annotations not passed (not listed in tokenAttributes)",
        account.annotations.keys().filter(|k| !attrs.lists(k)),
    );
    match synthetic_token(
        account,
        attrs.audience(),
        &args.issuer,
        duration::unix_now(),
    ) {
        Ok(token) => Some(token),
        Err(e) => {
            let _ = writeln!(out, "    cannot build the stand-in token: {e}");
            None
        }
    }
}

/// A line of the explanation naming `keys` after `what`; none without keys.
fn write_keys<'k>(out: &mut String, what: &str, keys: impl Iterator<Item = &'k String>) {
    let keys: Vec<&String> = keys.collect();
    if !keys.is_empty() {
        let _ = writeln!(out, "    {what}: {}", quoted_keys(&keys));
    }
}

/// Annotation keys, quoted, for a line of the explanation.
fn quoted_keys(keys: &[&String]) -> String {
    keys.iter()
        .map(|k| format!("{k:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One matching entry: the kubelet's side, then the plugin's.
fn explain_entry(
    args: &Args,
    entry: &Entry,
    image: &ImageRef,
    account: &Account,
    env: &Env,
    out: &mut String,
) -> bool {
    let p = &entry.provider;
    let _ = writeln!(out, "  kubelet:");
    let mut annotations = BTreeMap::new();
    let token = match &p.token_attributes {
        None => {
            let _ = writeln!(
                out,
                "    no tokenAttributes: no service account token and no annotations are sent"
            );
            None
        }
        Some(attrs) => {
            annotations = passed_annotations(attrs, account);
            let Some(token) = kubelet_token(args, attrs, account, out) else {
                return false;
            };
            Some(token)
        }
    };
    let api_version = if p.api_version().is_empty() {
        PROVIDER_V1
    } else {
        p.api_version()
    };
    let mut request = json!({
        "kind": "CredentialProviderRequest",
        "apiVersion": api_version,
        "image": image.to_string(),
    });
    if let (Some(attrs), Some(obj)) = (&p.token_attributes, request.as_object_mut()) {
        obj.insert(
            "serviceAccountToken".into(),
            json!(format!(
                "<token for {}/{}, audience {}>",
                account.namespace,
                account.name,
                attrs.audience()
            )),
        );
        if !annotations.is_empty() {
            obj.insert("serviceAccountAnnotations".into(), json!(annotations));
        }
    }
    let _ = writeln!(out, "    request: {request}");

    let _ = writeln!(out, "  plugin:");
    if !lint::runs_this_binary(entry, None) {
        let _ = writeln!(
            out,
            "    {:?} is not this plugin; nothing more to explain",
            entry.name()
        );
        return false;
    }
    match plan(entry, image, &annotations, token.as_ref(), env, out) {
        Ok(()) => true,
        Err(e) => {
            let _ = writeln!(out, "    the plugin would fail: {e}");
            false
        }
    }
}

/// The `--registry-mirror` rule for `image`, if any, said in `out`, and
/// the image on the mirror, which is what is routed and planned.
fn mirrored<'r>(
    routing: &'r entry::Routing,
    image: &ImageRef,
    out: &mut String,
) -> Result<(Option<&'r Rule>, Option<ImageRef>)> {
    let Some(rule) = routing.line.options.mirrors.for_image(image) else {
        return Ok((None, None));
    };
    let target = rule.target_image(image)?;
    let _ = writeln!(
        out,
        "    mirror: {rule} (--registry-mirror): the exchange is for {target}, the answer keyed by {}",
        rule.source
    );
    Ok((Some(rule), Some(target)))
}

/// The binary's own steps up to, not including, the network: route, then
/// [`serve::prepare`], the very function a real request goes through.
fn plan(
    entry: &Entry,
    image: &ImageRef,
    annotations: &BTreeMap<String, String>,
    token: Option<&ServiceAccountToken>,
    env: &Env,
    out: &mut String,
) -> Result<()> {
    let routing = entry::route(
        entry.name(),
        entry.provider.args(),
        &entry.provider.env(),
        env,
    )?;
    let how = match (routing.line.choice, &routing.line.options.provider) {
        (None, _) => "auto: by registry host".to_string(),
        (Some(_), Some(_)) => "--provider / WICP_PROVIDER".to_string(),
        (Some(_), None) => "the entry's name".to_string(),
    };
    let (mirror, on_mirror) = mirrored(&routing, image, out)?;
    let routed = on_mirror.as_ref().unwrap_or(image);
    let provider = route::choose(routing.line.choice, routed)?;
    let _ = writeln!(out, "    provider: {provider} (chosen by {how})");
    route::require_node_identity(provider, routing.line.options.fallback.fallback())?;
    let exchanger = routing.build(provider)?;
    let options = &routing.line.options;
    let svid = match (options.identity.spiffe()?, token) {
        (Some(spiffe), Some(kubelet)) => {
            let audience = spiffe.audience(
                options.audience.as_deref(),
                &exchanger.audiences(),
                provider.name(),
            )?;
            write_spiffe(&spiffe, &audience, kubelet, out);
            let claims = SvidClaims::stand_in(&audience, duration::unix_now());
            let raw = kubelet.secret().clone();
            Some((
                ServiceAccountToken::presenting_svid(raw, claims, kubelet),
                audience,
            ))
        }
        _ => None,
    };
    let token = svid.as_ref().map(|(svid, _)| svid).or(token);
    let prepared = serve::prepare(
        exchanger.as_ref(),
        svid.as_ref()
            .map(|(_, audience)| audience.as_str())
            .or(options.audience.as_deref()),
        routed,
        token,
        annotations,
        PROVIDER_V1,
        mirror.map(|rule| (rule, image)),
    )?;
    if token.is_some() {
        let _ = writeln!(
            out,
            "    audience: ok ({})",
            if prepared.audiences.is_empty() {
                "this exchanger takes any audience".to_string()
            } else {
                format!("expects {}", prepared.audiences.join(" or "))
            }
        );
    }
    let plan = &prepared.plan;
    write_identity(
        provider,
        &plan.identity,
        routing.line.options.fallback.fallback(),
        token,
        out,
    );
    let _ = writeln!(
        out,
        "    auth key: {} (cacheKeyType {})",
        plan.auth_key,
        plan.cache_key_type.as_str()
    );
    for input in &plan.inputs {
        let _ = writeln!(out, "    {}: {}", input.name(), input.value());
    }
    let cache_dir = routing.line.options.cache.cache_dir.as_deref();
    write_cache(cache_dir, &prepared, token, annotations, out);
    let _ = writeln!(
        out,
        "    cacheDuration: 80% of the credential's remaining life, at most {} (--max-cache-duration)",
        format_go(routing.line.options.max_cache_duration())
    );
    let _ = writeln!(
        out,
        "    network: not contacted (explain stops before the exchange)"
    );
    Ok(())
}

/// Under `--identity spiffe`: what the agent would be asked, and what
/// federation needs of the SVID.
fn write_spiffe(
    spiffe: &wicp_providers::spiffe::Spiffe<'_>,
    audience: &str,
    kubelet: &ServiceAccountToken,
    out: &mut String,
) {
    let _ = writeln!(
        out,
        "    identity source: spiffe: a JWT-SVID from the SPIRE agent at {} (FetchJWTSVIDs) in place of the token, which goes no further",
        spiffe.socket.display()
    );
    let _ = writeln!(
        out,
        "    SPIRE selectors: {}{} (from the token's claims, never annotations; exactly one registration entry must match)",
        wicp_providers::spiffe::describe(&wicp_providers::spiffe::selectors(kubelet)),
        if kubelet.claims().pod.is_none() {
            ", and the pulling pod's k8s:pod-name and k8s:pod-uid"
        } else {
            ""
        }
    );
    let _ = writeln!(out, "    SVID audience: {audience:?}");
    let _ = writeln!(
        out,
        "    SVID issuer: the SVID has an iss claim only when the SPIRE server sets jwt_issuer; \
         OIDC federation (clouds, Zot, Quay, JFrog) needs it, equal to the OIDC discovery provider's URL"
    );
}

/// Whose identity the plan pulls with.
fn write_identity(
    provider: &wicp_providers::Provider,
    identity: &Whose,
    fallback: Fallback,
    token: Option<&ServiceAccountToken>,
    out: &mut String,
) {
    match identity {
        Whose::Node { why } => {
            let _ = writeln!(
                out,
                "    identity: the node's, {} (because {why}); every pod on the node that did not opt in shares it",
                provider.node_identity.unwrap_or("")
            );
        }
        Whose::ServiceAccount if token.and_then(ServiceAccountToken::spiffe_id).is_some() => {
            let _ = writeln!(
                out,
                "    identity: the SPIFFE ID SPIRE registered for those selectors (--identity spiffe), never the node's"
            );
        }
        Whose::ServiceAccount => {
            let whose = token.map_or_else(
                || "no service account".to_string(),
                |t| format!("service account {}", t.service_account()),
            );
            let _ = writeln!(
                out,
                "    identity: {whose}'s own (--fallback {}{})",
                fallback.name(),
                if fallback == Fallback::Node {
                    "; it opted in, so a refusal fails the pull and never falls back to the node"
                } else {
                    ""
                }
            );
        }
    }
}

/// What the on-disk cache (`cache_dir`, `--cache-dir`) would do with the
/// credential, and its key.
fn write_cache(
    cache_dir: Option<&Path>,
    prepared: &serve::Prepared<'_>,
    token: Option<&ServiceAccountToken>,
    annotations: &BTreeMap<String, String>,
    out: &mut String,
) {
    match (cache_dir, prepared.plan.cacheable) {
        (_, false) => {
            let _ = writeln!(out, "    on-disk cache: never keeps this credential");
        }
        (None, true) => {
            let _ = writeln!(
                out,
                "    on-disk cache: off (the entry sets no --cache-dir)"
            );
        }
        (Some(dir), true) if token.and_then(ServiceAccountToken::spiffe_id).is_some() => {
            let _ = writeln!(
                out,
                "    on-disk cache: {}, keyed by the SPIFFE ID the agent returns and the audience, shared by every pod of that identity",
                dir.display()
            );
        }
        (Some(dir), true) => {
            let _ = writeln!(
                out,
                "    on-disk cache: {}, key {} (computed with issuer {:?}; pass --issuer with the cluster's for the real key)",
                dir.display(),
                Key::derive(&prepared.key_inputs(token, annotations)),
                token.map_or("", |t| t.claims().issuer.as_str())
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stand_in_token_decodes_like_a_real_one() {
        let account = Account {
            namespace: "team".into(),
            name: "api".into(),
            uid: "u-1".into(),
            annotations: BTreeMap::new(),
            assumed: Vec::new(),
        };
        let token = synthetic_token(&account, "sts.amazonaws.com", "https://issuer", 1000).unwrap();
        assert_eq!(token.service_account().to_string(), "team/api");
        assert_eq!(token.claims().audiences, ["sts.amazonaws.com"]);
        assert_eq!(token.claims().expires_at, 4600);
        assert!(
            token
                .require_audience(&["sts.amazonaws.com".into()], "aws")
                .is_ok()
        );
    }
}
