//! What the kubelet accepts but never works.
//!
//! Two kinds of rules. Some hold for any provider entry: a `matchImages`
//! pattern that can never match an image, a name with no executable in the
//! bin dir. The others need to know what this plugin will do with the
//! entry, so they apply to entries that run this binary (its name, a symlink
//! to it, or `WICP_*` variables) and ask the routed exchanger itself, through
//! the [`Exchanger`] trait, which audience it
//! expects and which annotations it reads: there is no second table here to
//! fall out of date.

use std::path::Path;
use std::time::Duration;

use crate::options::{AUTO, BINARY};
use wicp_base::duration::format_go;
use wicp_kubelet::request::image::ImageRef;
use wicp_net::inputs::Env;
use wicp_providers::{self as providers, Exchanger, route};

use super::entry::{self, Routing};
use wicp_kubelet::config::provider_config::{Entry, Loaded, TokenAttributes};
use wicp_kubelet::config::validate::parse_schemeless_url;
use wicp_kubelet::config::{Finding, Rule};

/// The lifetime of the token the kubelet requests for a provider: it sets no
/// `expirationSeconds`, so the API server's default of one hour applies.
const KUBELET_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// Lints every entry of `loaded`. `bin_dir` is the kubelet's
/// `--image-credential-provider-bin-dir`, when known.
/// `kubelet_env` is the environment the kubelet starts plugins with.
pub(crate) fn lint(loaded: &Loaded, bin_dir: Option<&Path>, kubelet_env: &Env) -> Vec<Finding> {
    let mut findings = Vec::new();
    for entry in &loaded.entries {
        match_images(entry, &mut findings);
        if let Some(dir) = bin_dir {
            binary(entry, dir, &mut findings);
        }
        if runs_this_binary(entry, bin_dir) {
            plugin(entry, kubelet_env, &mut findings);
        }
    }
    findings
}

/// Whether the kubelet runs this binary for `entry`: by its name, by a
/// symlink to it in the bin dir, or because the entry sets our variables.
pub(crate) fn runs_this_binary(entry: &Entry, bin_dir: Option<&Path>) -> bool {
    let name = entry.name();
    let ours = |name: &str| {
        let name = if wicp_base::platform::NAMES_IGNORE_CASE {
            name.to_ascii_lowercase()
        } else {
            name.to_string()
        };
        name == BINARY || name.starts_with(&format!("{BINARY}-"))
    };
    if ours(name) {
        return true;
    }
    if entry
        .provider
        .env()
        .iter()
        .any(|(k, _)| k.starts_with("WICP_"))
    {
        return true;
    }
    bin_dir
        .filter(|_| !name.is_empty())
        .and_then(|dir| wicp_base::platform::find_executable(dir, name))
        .and_then(|found| std::fs::canonicalize(found).ok())
        .and_then(|target| target.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|target| ours(&target))
}

/// A `matchImages` entry with a scheme. plugin.go parses an entry as
/// `url.Parse("https://" + entry)`, so the host is `https:` and the real
/// host lands in the path: the entry never matches.
fn scheme_finding(entry: &Entry, field: &str, pattern: &str, host: &str) -> Finding {
    let rest = pattern.split_once("://").map_or("", |(_, rest)| rest);
    entry
        .error(
            Rule::MatchImagesScheme,
            field,
            format!(
                "{pattern:?} has a scheme: the kubelet parses a matchImages entry as \"https://\" + entry, \
                 so this one has the host {host:?} and never matches an image; the plugin is never run"
            ),
        )
        .fix(format!("write it without the scheme: {rest:?}"))
}

fn match_images(entry: &Entry, findings: &mut Vec<Finding>) {
    for (i, pattern) in entry.provider.match_images().iter().enumerate() {
        let field = format!("matchImages[{i}]");
        let Ok(url) = parse_schemeless_url(pattern) else {
            continue; // the kubelet's validation reports it
        };
        if url.query.is_some() || url.fragment.is_some() {
            let cut = if url.query.is_some() { '?' } else { '#' };
            findings.push(
                entry
                    .error(
                        Rule::MatchImagesQuery,
                        &field,
                        format!(
                            "{pattern:?} has a '{cut}', which the kubelet's URL parser takes as the start of a {}: \
                             the pattern is only {:?}{}",
                            if cut == '?' { "query" } else { "fragment" },
                            url.host,
                            if url.path.is_empty() { "" } else { " plus its path" }
                        ),
                    )
                    .fix("use '*' for any run of characters inside one host label; '?' does not work in matchImages"),
            );
            continue;
        }
        if wicp_kubelet::config::matching::scheme_of(pattern).is_some() {
            findings.push(scheme_finding(entry, &field, pattern, url.host));
            continue;
        }
        if url.host.is_empty() {
            findings.push(
                entry
                    .error(
                        Rule::MatchImagesEmpty,
                        &field,
                        format!("{pattern:?} has no host, so it never matches"),
                    )
                    .fix("write a registry host, e.g. registry.example.com or *.azurecr.io"),
            );
            continue;
        }
        if url.path.contains(['*', '[', ']', '\\']) {
            findings.push(
                entry
                    .error(
                        Rule::MatchImagesPathGlob,
                        &field,
                        format!(
                            "{pattern:?} has a glob in its path {:?}; the kubelet compares the path as a literal prefix, \
                             so this pattern never matches an image and the plugin is never run",
                            url.path
                        ),
                    )
                    .fix(format!(
                        "drop the path glob: {:?} matches every image on that host",
                        url.host
                    )),
            );
        }
        let hostname = url.host.split(':').next().unwrap_or("");
        if hostname == "index.docker.io" || hostname == "registry-1.docker.io" {
            findings.push(
                entry
                    .error(
                        Rule::MatchImagesDockerHub,
                        &field,
                        format!(
                            "{pattern:?} never matches: the kubelet normalizes Docker Hub images to docker.io/..."
                        ),
                    )
                    .fix("write docker.io instead"),
            );
        }
    }
}

/// The kubelet's `exec.LookPath(<bin-dir>/<name>)`: an executable file,
/// symlinks followed.
fn binary(entry: &Entry, dir: &Path, findings: &mut Vec<Finding>) {
    let name = entry.name();
    let install = "install the binary there and symlink it under this name \
                   (node-install/install.sh does both)";
    if name.is_empty() {
        findings.push(
            entry
                .error(
                    Rule::BinDirMissing,
                    "name",
                    "the provider has no name, so the kubelet finds no executable",
                )
                .fix("name the entry after its binary or symlink in the bin dir"),
        );
        return;
    }
    // Found as the kubelet finds it: on Windows `name` may be `name.exe`.
    let path = wicp_base::platform::find_executable(dir, name).unwrap_or_else(|| dir.join(name));
    let problem = match std::fs::metadata(&path) {
        Err(_) if std::fs::symlink_metadata(&path).is_ok() => Some(format!(
            "{} is a symlink to a file that does not exist",
            path.display()
        )),
        Err(_) => Some(format!("{} does not exist", path.display())),
        Ok(meta) if meta.is_dir() => Some(format!("{} is a directory", path.display())),
        Ok(_) => (!wicp_base::platform::facts_followed(&path).is_ok_and(|f| f.access.executable))
            .then(|| format!("{} is not executable", path.display())),
    };
    if let Some(problem) = problem {
        findings.push(
            entry
                .error(
                    Rule::BinDirMissing,
                    "name",
                    format!("{problem}; the kubelet exits at start when a provider's executable is missing"),
                )
                .fix(install),
        );
    }
}

/// The rules that depend on what this plugin does with the entry.
fn plugin(entry: &Entry, kubelet_env: &Env, findings: &mut Vec<Finding>) {
    let p = &entry.provider;
    let env = p.env();
    let known = entry::known_env_names();
    for (name, _) in &env {
        if name.starts_with("WICP_") && !known.contains(name) {
            findings.push(
                entry
                    .warning(
                        Rule::EnvUnknown,
                        "env",
                        format!("{name} is not a variable the binary reads, so it has no effect"),
                    )
                    .fix(format!(
                        "known variables: {}",
                        known.iter().cloned().collect::<Vec<_>>().join(", ")
                    )),
            );
        }
    }
    let routing = match entry::route(entry.name(), p.args(), &env, kubelet_env) {
        Ok(routing) => routing,
        Err(e) => {
            let mut finding = entry.error(Rule::ArgsInvalid, "args", e.what().to_string());
            if let Some(fix) = e.remedy() {
                finding = finding.fix(fix);
            }
            findings.push(finding);
            return;
        }
    };
    name_and_args(entry, &routing, findings);
    mirrors(entry, &routing, findings);
    match routing.line.choice {
        Some(provider) => match routing.build(provider) {
            Ok(exchanger) => pinned(entry, &routing, exchanger.as_ref(), findings),
            Err(e) => {
                let mut finding = entry.error(Rule::ArgsInvalid, "args", e.what().to_string());
                if let Some(fix) = e.remedy() {
                    finding = finding.fix(fix);
                }
                findings.push(finding);
            }
        },
        None => auto(entry, &routing, findings),
    }
    cache_duration(entry, &routing, findings);
}

/// Each `--registry-mirror` rule: its target must be served by the
/// exchanger the mirrored image routes to (the request would be refused),
/// and its source should be one the entry's `matchImages` match (else the
/// kubelet never asks, and the rule does nothing).
fn mirrors(entry: &Entry, routing: &Routing, findings: &mut Vec<Finding>) {
    for rule in &routing.line.options.mirrors.registry_mirror {
        let asked = format!("{}/library/probe", rule.source);
        if !entry
            .provider
            .match_images()
            .iter()
            .any(|pattern| wicp_kubelet::config::matching::matches(pattern, &asked))
        {
            findings.push(
                entry
                    .warning(
                        Rule::RegistryMirror,
                        "args",
                        format!(
                            "--registry-mirror {rule}: no matchImages entry matches the source {}, so the kubelet never asks this entry about its images",
                            rule.source
                        ),
                    )
                    .fix(format!("add {:?} to matchImages", rule.source)),
            );
        }
        let Ok(target) = ImageRef::parse(&asked).and_then(|image| rule.target_image(&image)) else {
            continue;
        };
        let served = route::choose(routing.line.choice, &target)
            .and_then(|provider| routing.build(provider))
            .map(|exchanger| (exchanger.serves(&target), exchanger.provider().name()));
        let (ok, provider) = match served {
            Ok((ok, name)) => (ok, name.to_string()),
            Err(_) => (
                false,
                routing.line.choice.map_or(AUTO, |p| p.name()).to_string(),
            ),
        };
        if !ok {
            findings.push(
                entry
                    .error(
                        Rule::RegistryMirror,
                        "args",
                        format!(
                            "--registry-mirror {rule}: the {provider} exchanger does not serve the target {}, so every pull of {} is refused",
                            rule.target, rule.source
                        ),
                    )
                    .fix("map the source to a registry this provider serves (an ECR pull-through cache for aws, an ACR cache rule for azure, an Artifact Registry remote repository for gcp), or use the provider of the target"),
            );
        }
    }
}

fn name_and_args(entry: &Entry, routing: &Routing, findings: &mut Vec<Finding>) {
    let name = entry.name();
    match routing.line.named {
        Some(named) if routing.line.choice != Some(named) => {
            let actual = routing.line.choice.map_or(AUTO, |p| p.name());
            findings.push(
                entry
                    .error(
                        Rule::NameProviderMismatch,
                        "name",
                        format!(
                            "the name {name:?} implies the {named} provider, but its args/env select {actual}"
                        ),
                    )
                    .fix("make the name's suffix and --provider (WICP_PROVIDER) agree, or drop --provider"),
            );
        }
        None if routing.line.options.provider.is_none() => {
            if let Some(suffix) = name.strip_prefix(&format!("{BINARY}-")) {
                findings.push(
                    entry
                        .warning(
                            Rule::NameUnknownSuffix,
                            "name",
                            format!(
                                "the suffix {suffix:?} names no provider ({}), so the binary routes by registry host (auto)",
                                providers::ALL.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
                            ),
                        )
                        .fix("name the entry wi-credential-provider-<provider>, or pass --provider"),
                );
            }
        }
        _ => {}
    }
}

/// An entry pinned to one exchanger.
fn pinned(
    entry: &Entry,
    routing: &Routing,
    exchanger: &dyn Exchanger,
    findings: &mut Vec<Finding>,
) {
    let provider = exchanger.provider();
    let attrs = entry.provider.token_attributes.as_ref();
    match attrs {
        None if exchanger.requires_token() => {
            findings.push(
                entry
                    .error(
                        Rule::TokenMissing,
                        "tokenAttributes",
                        format!(
                            "the {provider} exchanger needs the pod's service account token, but without tokenAttributes \
                             the kubelet sends none and every pull fails"
                        ),
                    )
                    .fix("add tokenAttributes (serviceAccountTokenAudience, cacheType, requireServiceAccount) with apiVersion credentialprovider.kubelet.k8s.io/v1"),
            );
        }
        None => {}
        Some(attrs) => {
            // Under --identity spiffe the password is the SVID, not the
            // token: the kubelet's echo rule does not fire, and the
            // token's audience is read by no one but the plugin (the
            // SVID's is checked instead).
            let spiffe = spiffe(entry, routing, Some(exchanger), findings);
            if provider.password_is_token
                && !spiffe
                && attrs.cache_type.as_deref() == Some("ServiceAccount")
            {
                findings.push(
                    entry
                        .error(
                            Rule::PassthroughCacheType,
                            "tokenAttributes.cacheType",
                            format!(
                                "{provider} returns the service account token as the password, which the kubelet \
                                 discards unless cacheType is Token (\"returned the service account token as the password\")"
                            ),
                        )
                        .fix("set cacheType: Token"),
                );
            }
            if !spiffe {
                let audience_flag = routing.line.options.audience.as_deref();
                audience(entry, exchanger, attrs.audience(), audience_flag, findings);
            }
            annotations(entry, exchanger, attrs, findings);
        }
    }
    registries_served(entry, routing, exchanger, findings);
}

/// The entry's audience against what the exchanger admits (`--audience`,
/// `audience_flag`, replacing its default).
fn audience(
    entry: &Entry,
    exchanger: &dyn Exchanger,
    audience: &str,
    audience_flag: Option<&str>,
    findings: &mut Vec<Finding>,
) {
    let provider = exchanger.provider();
    let expected = route::expected_audiences(exchanger, audience_flag);
    let mismatch = audience_mismatch(
        entry,
        audience,
        &expected,
        |listed| {
            format!(
                "is not what the {provider} exchanger expects ({listed}); the plugin refuses the token on every pull"
            )
        },
        || {
            format!(
                "set serviceAccountTokenAudience: {}{}",
                expected.first().map(String::as_str).unwrap_or_default(),
                if audience_flag.is_some() {
                    ", or change --audience"
                } else {
                    ", or pass --audience if your identity provider trusts another audience"
                }
            )
        },
    );
    findings.extend(mismatch);
}

/// The finding for an entry whose audience (when it sets one) is none of
/// `expected`: `what` says so given the expected ones, listed; `fix` how
/// to set it right.
fn audience_mismatch(
    entry: &Entry,
    audience: &str,
    expected: &[String],
    what: impl FnOnce(&str) -> String,
    fix: impl FnOnce() -> String,
) -> Option<Finding> {
    let refused = !audience.is_empty()
        && !wicp_kubelet::request::token::audience_accepted(expected, &[audience.to_string()]);
    refused.then(|| {
        entry
            .error(
                Rule::AudienceMismatch,
                "tokenAttributes.serviceAccountTokenAudience",
                format!("audience {audience:?} {}", what(&quoted(expected))),
            )
            .fix(fix())
    })
}

/// Each literal `matchImages` registry against what the exchanger serves.
fn registries_served(
    entry: &Entry,
    routing: &Routing,
    exchanger: &dyn Exchanger,
    findings: &mut Vec<Finding>,
) {
    let provider = exchanger.provider();
    for (i, pattern) in entry.provider.match_images().iter().enumerate() {
        let Some(image) = literal_image(pattern) else {
            continue;
        };
        // A mirrored source is exchanged for its target: [`mirrors`]
        // checks that one.
        if routing.line.options.mirrors.for_image(&image).is_some() {
            continue;
        }
        if !exchanger.serves(&image) {
            let fix = exchanger
                .refusal(&image)
                .remedy()
                .unwrap_or("remove it from matchImages, or route it to another provider entry")
                .to_string();
            findings.push(
                entry
                    .error(
                        Rule::RegistryNotServed,
                        &format!("matchImages[{i}]"),
                        format!(
                            "the {provider} exchanger does not serve {:?} (it serves {}), so every pull from it fails",
                            image.registry(),
                            exchanger.registries()
                        ),
                    )
                    .fix(fix),
            );
        }
    }
}

/// The annotations the exchanger reads against those the kubelet passes.
/// None of them listed: the exchanger never sees the identity it reads, an
/// error. Some listed: the exchanger reads alternatives (the Azure workload
/// identity keys or the AKS ones, two AWS role keys), and a service account
/// annotated with an unlisted one is not seen, a warning.
fn annotations(
    entry: &Entry,
    exchanger: &dyn Exchanger,
    attrs: &TokenAttributes,
    findings: &mut Vec<Finding>,
) {
    let provider = exchanger.provider();
    let read = exchanger.annotation_keys();
    let missing: Vec<String> = read.iter().filter(|k| !attrs.lists(k)).cloned().collect();
    if missing.is_empty() {
        return;
    }
    let field = "tokenAttributes.optionalServiceAccountAnnotationKeys";
    let fix = format!(
        "add {} to optionalServiceAccountAnnotationKeys (or requiredServiceAccountAnnotationKeys)",
        quoted(&missing)
    );
    let finding = if missing.len() == read.len() {
        if !exchanger.needs_annotations() {
            // A default identity serves every service account: listing
            // none of the keys is a choice that works.
            return;
        }
        entry.error(
            Rule::AnnotationsNotListed,
            field,
            format!(
                "the {provider} exchanger reads {} but the entry lists none of them, so the kubelet never passes them",
                quoted(&read)
            ),
        )
    } else {
        entry.warning(
            Rule::AnnotationsNotListed,
            field,
            format!(
                "the {provider} exchanger reads {} but the entry does not list {}: the kubelet never passes {}, \
                 so a service account annotated that way is not seen",
                quoted(&read),
                quoted(&missing),
                if missing.len() == 1 { "it" } else { "them" }
            ),
        )
    };
    findings.push(finding.fix(fix));
}

/// The `--identity` flags: whether the entry pulls with SPIFFE
/// identities, with an error finding when its flags do not fit together
/// or leave the JWT-SVID without an audience (for `exchanger`, when the
/// entry is pinned to one).
fn spiffe(
    entry: &Entry,
    routing: &Routing,
    exchanger: Option<&dyn Exchanger>,
    findings: &mut Vec<Finding>,
) -> bool {
    let options = &routing.line.options;
    let spiffe = match options.identity.spiffe() {
        Ok(Some(spiffe)) => spiffe,
        Ok(None) => return false,
        Err(e) => {
            let finding = entry.error(Rule::Spiffe, "args", e.what().to_string());
            findings.push(match e.remedy() {
                Some(fix) => finding.fix(fix),
                None => finding,
            });
            return options.identity.source() == wicp_providers::spiffe::Source::Spiffe;
        }
    };
    if entry
        .provider
        .token_attributes
        .as_ref()
        .is_some_and(|a| a.cache_type.as_deref() == Some("ServiceAccount"))
    {
        findings.push(
            entry
                .warning(
                    Rule::Spiffe,
                    "tokenAttributes.cacheType",
                    "cacheType ServiceAccount: the kubelet keeps the credential per service account, while the \
                     plugin asks SPIRE with the pod's own selectors (k8s:pod-name, k8s:pod-uid), so the credential \
                     of a per-pod SPIRE entry is shared by every pod of the service account",
                )
                .fix("set cacheType: Token when registration entries name pods; ServiceAccount is right only when every entry's selectors are k8s:ns and k8s:sa"),
        );
    }
    if let Some(exchanger) = exchanger {
        let provider = exchanger.provider().name();
        if let Err(e) = spiffe.audience(
            options.audience.as_deref(),
            &exchanger.audiences(),
            provider,
        ) {
            let finding = entry.error(Rule::Spiffe, "args", e.what().to_string());
            findings.push(match e.remedy() {
                Some(fix) => finding.fix(fix),
                None => finding,
            });
        }
    }
    true
}

/// An entry that routes by registry host.
fn auto(entry: &Entry, routing: &Routing, findings: &mut Vec<Finding>) {
    // The providers auto can pick, built as this entry would build them;
    // one that would refuse the entry's flags expects no audience.
    let clouds: Vec<Box<dyn Exchanger>> = providers::ALL
        .iter()
        .filter(|p| p.auto.is_some())
        .filter_map(|p| routing.build(p).ok())
        .collect();
    let spiffe = spiffe(entry, routing, None, findings);
    if let Some(attrs) = entry.provider.token_attributes.as_ref().filter(|_| !spiffe) {
        findings.push(
            entry
                .warning(
                    Rule::AutoWithToken,
                    "name",
                    "the entry routes by registry host (auto), but the kubelet mints its token for one audience \
                     per entry, which suits one provider only",
                )
                .fix("name the entry after its provider (wi-credential-provider-aws, ...) or pass --provider"),
        );
        let audience = attrs.audience();
        let mut expected: Vec<String> = clouds
            .iter()
            .flat_map(|e| {
                route::expected_audiences(e.as_ref(), routing.line.options.audience.as_deref())
            })
            .collect();
        expected.dedup();
        findings.extend(audience_mismatch(
            entry,
            audience,
            &expected,
            |listed| format!("is expected by none of the exchangers auto can pick ({listed})"),
            || "set the audience of the provider this entry is for, and name that provider".into(),
        ));
    }
    for (i, pattern) in entry.provider.match_images().iter().enumerate() {
        let Some(image) = literal_image(pattern) else {
            continue;
        };
        if routing.line.options.mirrors.for_image(&image).is_some() {
            continue;
        }
        if let Err(e) = route::choose(None, &image) {
            findings.push(
                entry
                    .error(
                        Rule::RegistryNotServed,
                        &format!("matchImages[{i}]"),
                        e.what().to_string(),
                    )
                    .fix(
                        e.remedy()
                            .unwrap_or("remove it from matchImages")
                            .to_string(),
                    ),
            );
        }
    }
}

/// Whether the plugin refuses every token of the entry: the entry names
/// an audience, and the serving rule ([`wicp_kubelet::request::token::audience_accepted`])
/// refuses a token minted for it.
fn cache_duration(entry: &Entry, routing: &Routing, findings: &mut Vec<Finding>) {
    let Some(text) = entry.provider.default_cache_duration.as_deref() else {
        return;
    };
    let Some(configured) = wicp_base::duration::parse_go(text) else {
        return;
    };
    let mut limit = routing.line.options.max_cache_duration();
    let mut why = "--max-cache-duration".to_string();
    if let Some(provider) = routing.line.choice.filter(|p| p.password_is_token)
        && KUBELET_TOKEN_LIFETIME < limit
    {
        limit = KUBELET_TOKEN_LIFETIME;
        why = format!(
            "the lifetime of the kubelet's token, which {provider} returns as the password"
        );
    }
    if configured > limit.as_secs_f64() {
        findings.push(
            entry
                .error(
                    Rule::CacheDurationTooLong,
                    "defaultCacheDuration",
                    format!(
                        "defaultCacheDuration {text} is longer than this entry's credentials live (at most {}: {why}); \
                         the kubelet keeps any response without cacheDuration that long, past its expiry",
                        format_go(limit)
                    ),
                )
                .fix(format!(
                    "set defaultCacheDuration to {} or less; the plugin returns its own cacheDuration from the real expiry",
                    format_go(limit)
                )),
        );
    }
}

/// For a pattern without globs, an image it matches, to ask an exchanger
/// whether it serves that registry. `None` for patterns with globs.
fn literal_image(pattern: &str) -> Option<ImageRef> {
    let url = parse_schemeless_url(pattern).ok()?;
    if url.query.is_some() || url.fragment.is_some() || url.host.is_empty() {
        return None;
    }
    if url.host.contains(['*', '?', '[', '\\']) || url.path.contains(['*', '[', '\\']) {
        return None;
    }
    let path = url.path.trim_end_matches('/');
    ImageRef::parse(&format!("{}{path}/probe", url.host)).ok()
}

fn quoted(values: &[String]) -> String {
    values
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}
