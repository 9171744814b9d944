//! The kubelet's validation of a decoded config
//! (`validateCredentialProviderConfig` in `plugin/config.go`), rule for rule.
//! Any of these makes the kubelet exit at start ("Failed to register CRI auth
//! plugins"), so every one is an error. The feature gate
//! `KubeletServiceAccountTokenForCredentialProviders` is assumed on, as it is
//! by default since Kubernetes 1.34.

use std::collections::BTreeSet;

use super::provider_config::{Entry, Loaded, PROVIDER_V1, TokenAttributes};
use super::{Finding, Rule, Severity};

const PROVIDER_VERSIONS: [&str; 3] = [
    PROVIDER_V1,
    "credentialprovider.kubelet.k8s.io/v1beta1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
];

const CACHE_TYPES: [&str; 2] = ["ServiceAccount", "Token"];

const KUBELET_FIX: &str = "the kubelet refuses to start with this config";

/// Validates every entry of `loaded`, across files as the kubelet does after
/// merging a config directory.
pub fn validate(loaded: &Loaded) -> Vec<Finding> {
    let mut findings = Vec::new();
    if loaded.entries.is_empty() && !loaded.has_decode_errors() {
        findings.push(
            Finding::new(
                Severity::Error,
                Rule::KubeletProviders,
                &loaded.path,
                "providers",
                "at least 1 item in providers is required",
            )
            .fix(KUBELET_FIX),
        );
    }
    let mut seen = BTreeSet::new();
    for entry in &loaded.entries {
        if !seen.insert(entry.name().to_string()) {
            findings.push(
                entry
                    .error(
                        Rule::KubeletDuplicateName,
                        "name",
                        format!("duplicate provider name {:?}", entry.name()),
                    )
                    .fix("give each provider entry its own name (and binary or symlink)"),
            );
        }
        validate_entry(entry, &mut findings);
    }
    findings
}

fn validate_entry(entry: &Entry, findings: &mut Vec<Finding>) {
    let p = &entry.provider;
    let mut invalid = |rule: Rule, field: &str, message: String| {
        findings.push(entry.error(rule, field, message).fix(KUBELET_FIX));
    };
    name(p.name(), &mut invalid);
    api_version(p.api_version(), &mut invalid);
    match_images(p.match_images(), &mut invalid);
    default_cache_duration(p.default_cache_duration.as_deref(), &mut invalid);
    if let Some(attrs) = &p.token_attributes {
        token_attributes(attrs, p.api_version(), &mut invalid);
    }
}

/// Reports one invalid field: its rule, its path and the kubelet's message.
type Invalid<'a> = dyn FnMut(Rule, &str, String) + 'a;

/// The provider name: no `/`, no space, not `.` or `..`.
fn name(name: &str, invalid: &mut Invalid<'_>) {
    if name.contains('/') {
        invalid(
            Rule::KubeletName,
            "name",
            format!("provider name {name:?} cannot contain '/'"),
        );
    }
    if name.contains(' ') {
        invalid(
            Rule::KubeletName,
            "name",
            format!("provider name {name:?} cannot contain spaces"),
        );
    }
    if name == "." || name == ".." {
        invalid(
            Rule::KubeletName,
            "name",
            format!("provider name cannot be {name:?}"),
        );
    }
}

/// The provider's exec API version.
fn api_version(api_version: &str, invalid: &mut Invalid<'_>) {
    if api_version.is_empty() {
        invalid(
            Rule::KubeletApiVersion,
            "apiVersion",
            "apiVersion is required".into(),
        );
    } else if !PROVIDER_VERSIONS.contains(&api_version) {
        invalid(
            Rule::KubeletApiVersion,
            "apiVersion",
            format!(
                "apiVersion {api_version:?} is not supported (supported: {})",
                PROVIDER_VERSIONS.join(", ")
            ),
        );
    }
}

/// At least one `matchImages` pattern, each a URL the kubelet can parse.
fn match_images(patterns: &[String], invalid: &mut Invalid<'_>) {
    if patterns.is_empty() {
        invalid(
            Rule::KubeletMatchImages,
            "matchImages",
            "at least 1 item in matchImages is required".into(),
        );
    }
    for (i, pattern) in patterns.iter().enumerate() {
        if let Err(why) = parse_schemeless_url(pattern) {
            invalid(
                Rule::KubeletMatchImages,
                &format!("matchImages[{i}]"),
                format!("match image {pattern:?} is invalid: {why}"),
            );
        }
    }
}

/// `defaultCacheDuration`: required, a Go duration, not negative.
fn default_cache_duration(text: Option<&str>, invalid: &mut Invalid<'_>) {
    match text {
        None => invalid(
            Rule::KubeletDefaultCacheDuration,
            "defaultCacheDuration",
            "defaultCacheDuration is required".into(),
        ),
        Some(text) => match wicp_base::duration::parse_go(text) {
            None => invalid(
                Rule::KubeletDefaultCacheDuration,
                "defaultCacheDuration",
                format!("time: invalid duration {text:?}"),
            ),
            Some(secs) if secs < 0.0 => invalid(
                Rule::KubeletDefaultCacheDuration,
                "defaultCacheDuration",
                format!("defaultCacheDuration {text:?} must be greater than or equal to 0"),
            ),
            Some(_) => {}
        },
    }
}

/// `tokenAttributes`: the audience, `requireServiceAccount`, the
/// annotation keys and `cacheType`, only in the v1 exec API.
fn token_attributes(attrs: &TokenAttributes, api_version: &str, invalid: &mut Invalid<'_>) {
    if attrs.audience().is_empty() {
        invalid(
            Rule::KubeletTokenAttributes,
            "tokenAttributes.serviceAccountTokenAudience",
            "serviceAccountTokenAudience is required".into(),
        );
    }
    if attrs.require_service_account.is_none() {
        invalid(
            Rule::KubeletTokenAttributes,
            "tokenAttributes.requireServiceAccount",
            "requireServiceAccount is required".into(),
        );
    }
    if api_version != PROVIDER_V1 {
        invalid(
            Rule::KubeletTokenAttributes,
            "tokenAttributes",
            format!("tokenAttributes is only supported for {PROVIDER_V1} API version"),
        );
    }
    if attrs.require_service_account == Some(false) && !attrs.required_keys().is_empty() {
        invalid(Rule::KubeletTokenAttributes,
            "tokenAttributes.requiredServiceAccountAnnotationKeys",
            "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"
                .into(),
        );
    }
    annotation_keys(attrs, invalid);
    match attrs.cache_type.as_deref().unwrap_or("") {
        "" => invalid(
            Rule::KubeletCacheType,
            "tokenAttributes.cacheType",
            format!(
                "cacheType is required to be set when tokenAttributes is specified. Supported values are: {}",
                CACHE_TYPES.join(", ")
            ),
        ),
        t if CACHE_TYPES.contains(&t) => {}
        t => invalid(
            Rule::KubeletCacheType,
            "tokenAttributes.cacheType",
            format!(
                "cacheType {t:?} is not supported (supported: {})",
                CACHE_TYPES.join(", ")
            ),
        ),
    }
}

/// The annotation keys: each a qualified name, none twice, none both
/// required and optional.
fn annotation_keys(attrs: &TokenAttributes, invalid: &mut Invalid<'_>) {
    for (field, keys) in [
        (
            "tokenAttributes.requiredServiceAccountAnnotationKeys",
            attrs.required_keys(),
        ),
        (
            "tokenAttributes.optionalServiceAccountAnnotationKeys",
            attrs.optional_keys(),
        ),
    ] {
        let mut seen = BTreeSet::new();
        for key in keys {
            for why in qualified_name_errors(&key.to_lowercase()) {
                invalid(
                    Rule::KubeletAnnotationKeys,
                    field,
                    format!("annotation key {key:?} is invalid: {why}"),
                );
            }
            if !seen.insert(key.as_str()) {
                invalid(
                    Rule::KubeletAnnotationKeys,
                    field,
                    format!("duplicate annotation key {key:?}"),
                );
            }
        }
    }
    let required: BTreeSet<&str> = attrs.required_keys().iter().map(String::as_str).collect();
    let both: Vec<&str> = attrs
        .optional_keys()
        .iter()
        .map(String::as_str)
        .filter(|k| required.contains(k))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !both.is_empty() {
        invalid(
            Rule::KubeletAnnotationKeys,
            "tokenAttributes",
            format!("annotation keys cannot be both required and optional: {both:?}"),
        );
    }
}

/// Whether `findings` has an error.
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}

/// A `matchImages` entry as the kubelet parses it: Go's
/// `url.Parse("https://" + entry)` with the scheme dropped.
#[derive(Debug, PartialEq, Eq)]
pub struct SchemelessUrl<'a> {
    /// `host[:port]`, as Go's `URL.Host`.
    pub host: &'a str,
    /// The path, with its leading `/`, or empty.
    pub path: &'a str,
    /// What followed a `?`: Go reads it as a query, not part of the pattern.
    pub query: Option<&'a str>,
    /// What followed a `#`.
    pub fragment: Option<&'a str>,
}

/// Go's `net/url` parsing of `https://<s>`, far enough to accept and refuse
/// what the kubelet does and to split host, path, query and fragment.
pub fn parse_schemeless_url(s: &str) -> Result<SchemelessUrl<'_>, String> {
    if s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".into());
    }
    let (rest, fragment) = match s.split_once('#') {
        Some((rest, fragment)) => (rest, Some(fragment)),
        None => (s, None),
    };
    if let Some(fragment) = fragment {
        check_escapes(fragment)?;
    }
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (rest.get(..i).unwrap_or(rest), rest.get(i..).unwrap_or("")),
        None => (rest, ""),
    };
    let host = match authority.rfind('@') {
        Some(i) => {
            let userinfo = authority.get(..i).unwrap_or("");
            if !userinfo
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&b))
            {
                return Err("net/url: invalid userinfo".into());
            }
            check_escapes(userinfo)?;
            authority.get(i + 1..).unwrap_or("")
        }
        None => authority,
    };
    check_host(host)?;
    check_escapes(path)?;
    Ok(SchemelessUrl {
        host,
        path,
        query,
        fragment,
    })
}

fn valid_optional_port(port: &str) -> bool {
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
}

/// Go's `parseHost` plus `unescape(host, encodeHost)`.
fn check_host(host: &str) -> Result<(), String> {
    if host.starts_with('[') {
        let Some(end) = host.rfind(']') else {
            return Err("missing ']' in host".into());
        };
        let port = host.get(end + 1..).unwrap_or("");
        if !valid_optional_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
    } else if let Some(i) = host.rfind(':') {
        let port = host.get(i..).unwrap_or("");
        if !valid_optional_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
    }
    let bytes = host.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes.get(i + 1..i + 3).unwrap_or(&[]);
            if hex.len() != 2 || !hex.iter().all(u8::is_ascii_hexdigit) {
                return Err(format!(
                    "invalid URL escape {:?}",
                    host.get(i..).unwrap_or("")
                ));
            }
            // Percent-encoded ASCII is refused in a host, except %25.
            if hex.first().is_some_and(|h| *h < b'8') && hex != b"25" {
                return Err(format!(
                    "invalid URL escape {:?}",
                    host.get(i..i + 3).unwrap_or("")
                ));
            }
            i += 3;
            continue;
        }
        let allowed =
            b >= 0x80 || b.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]<>\"".contains(&b);
        if !allowed {
            return Err(format!(
                "invalid character {:?} in host name",
                char::from(b)
            ));
        }
        i += 1;
    }
    Ok(())
}

/// `%` must start a two-digit hex escape.
fn check_escapes(s: &str) -> Result<(), String> {
    let bytes = s.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'%' {
            let hex = bytes.get(i + 1..i + 3).unwrap_or(&[]);
            if hex.len() != 2 || !hex.iter().all(u8::is_ascii_hexdigit) {
                return Err(format!("invalid URL escape {:?}", s.get(i..).unwrap_or("")));
            }
        }
    }
    Ok(())
}

/// The messages of apimachinery's `validation.IsQualifiedName`: an optional
/// DNS subdomain prefix and `/`, then a name of at most 63 alphanumerics,
/// `-`, `_` or `.`, starting and ending alphanumeric.
fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            } else {
                errors.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            *name
        }
        _ => {
            errors.push(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', \
                 and must start and end with an alphanumeric character, with an optional DNS \
                 subdomain prefix and '/' (e.g. 'example.com/MyName')"
                    .to_string(),
            );
            return errors;
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".to_string());
    }
    let bytes = name.as_bytes();
    let alnum = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    let well_formed = alnum(bytes.first())
        && alnum(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b));
    if !name.is_empty() && !well_formed {
        errors.push(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must \
             start and end with an alphanumeric character"
                .to_string(),
        );
    }
    errors
}

fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 253 {
        errors.push("must be no more than 253 characters".to_string());
    }
    let label_ok = |label: &str| {
        let b = label.as_bytes();
        let edge = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        edge(b.first())
            && edge(b.last())
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    };
    if !value.split('.').all(label_ok) {
        errors.push(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character"
                .to_string(),
        );
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemeless_urls_as_go_parses_them() {
        let u = parse_schemeless_url("*.dkr.ecr.*.amazonaws.com").unwrap();
        assert_eq!((u.host, u.path), ("*.dkr.ecr.*.amazonaws.com", ""));
        let u = parse_schemeless_url("reg.io:5000/team/*").unwrap();
        assert_eq!((u.host, u.path), ("reg.io:5000", "/team/*"));
        let u = parse_schemeless_url("r?g.io/x").unwrap();
        assert_eq!((u.host, u.query), ("r", Some("g.io/x")));
        assert!(parse_schemeless_url("r[a-e]g.io").is_ok());
        // A leading '[' is an IPv6 literal to Go: the rest must be a port.
        assert!(parse_schemeless_url("[a-c]eg.io").is_err());
        assert!(parse_schemeless_url("[::1]:5000").is_ok());
        for bad in [
            "reg.io:port",
            "reg.io:*",
            "a b.io",
            "reg.io\n",
            "a{b}.io",
            "a|b.io",
            "a%zz.io",
            "a%41.io",
            "[::1",
            "reg.io/%zz",
            "us^er@reg.io",
        ] {
            assert!(parse_schemeless_url(bad).is_err(), "{bad:?} should fail");
        }
        assert!(parse_schemeless_url("reg.io:").is_ok());
        assert!(parse_schemeless_url("").is_ok());
    }

    #[test]
    fn go_durations() {
        for (text, secs) in [
            ("0", 0.0),
            ("0s", 0.0),
            ("12h", 43200.0),
            ("1h30m", 5400.0),
            ("-5m", -300.0),
            ("1.5h", 5400.0),
            ("300ms", 0.3),
            ("10us", 1e-5),
            ("1µs", 1e-6),
        ] {
            let got = wicp_base::duration::parse_go(text).unwrap();
            assert!((got - secs).abs() < 1e-9, "{text}: {got}");
        }
        for bad in [
            "", "5", "1d", "h", "1.2.3s", "-", "+", ".s", "1h 30m", "3000000h",
        ] {
            assert!(wicp_base::duration::parse_go(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn qualified_names() {
        for ok in [
            "eks.amazonaws.com/role-arn",
            "azure.workload.identity/client-id",
            "iam.gke.io/gcp-service-account",
            "simple",
            "a_b.c-d",
        ] {
            assert!(qualified_name_errors(ok).is_empty(), "{ok}");
        }
        for bad in [
            "",
            "/name",
            "a/b/c",
            "-bad",
            "bad-",
            "Example.com/x",
            "exa_mple.com/x",
            "x/",
            "has space",
        ] {
            assert!(!qualified_name_errors(bad).is_empty(), "{bad:?}");
        }
        assert!(!qualified_name_errors(&"a".repeat(64)).is_empty());
    }
}
