//! Reading a `CredentialProviderConfig` file or directory the way the kubelet
//! does (`readCredentialProviderConfig` and `decode` in the kubelet's
//! `pkg/credentialprovider/plugin/config.go`):
//!
//! - a directory means every `*.json`, `*.yaml` and `*.yml` in it, in
//!   lexicographic order, merged (newer kubelets only);
//! - each file is decoded strictly: an unknown or misspelt field (names are
//!   case-sensitive), a duplicated field or a wrong type is an error;
//! - `apiVersion` and `kind` are required, and must be a
//!   `kubelet.config.k8s.io` version and `CredentialProviderConfig`;
//! - `tokenAttributes` exists only in `kubelet.config.k8s.io/v1`; in the
//!   older versions it is an unknown field.
//!
//! The kubelet converts YAML to JSON with the first document only, so a file
//! with several documents silently loses the others.

use std::path::{Path, PathBuf};

use std::fmt;

use serde::de::Visitor;
use serde::{Deserialize, Deserializer};

use super::{Finding, Rule, Severity};

/// The config API version that has `tokenAttributes`.
const CONFIG_V1: &str = "kubelet.config.k8s.io/v1";
const CONFIG_VERSIONS: [&str; 3] = [
    CONFIG_V1,
    "kubelet.config.k8s.io/v1beta1",
    "kubelet.config.k8s.io/v1alpha1",
];
const CONFIG_KIND: &str = "CredentialProviderConfig";

/// The exec protocol version that carries the service account token.
pub const PROVIDER_V1: &str = "credentialprovider.kubelet.k8s.io/v1";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireConfig {
    #[serde(rename = "apiVersion")]
    #[serde(default, deserialize_with = "text")]
    api_version: Option<String>,
    #[serde(default, deserialize_with = "text")]
    kind: Option<String>,
    providers: Option<Vec<CredentialProvider>>,
}

/// A string exactly as Go's JSON decoding of the kubelet wants it. YAML
/// would happily read the plain scalar `0` or `1h` as a string for a string
/// field, but the kubelet converts YAML to JSON first, where `0` is a number
/// and `defaultCacheDuration: 0` is a decoding error. So only scalars that
/// are strings in YAML (quoted, or plain but not a number, bool or null)
/// are accepted.
struct Text(String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StringOnly;
        impl Visitor<'_> for StringOnly {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
        }
        deserializer.deserialize_any(StringOnly)
    }
}

fn text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<Text>::deserialize(deserializer)?.map(|t| t.0))
}

fn texts<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Vec<String>>, D::Error> {
    Ok(Option::<Vec<Text>>::deserialize(deserializer)?
        .map(|list| list.into_iter().map(|t| t.0).collect()))
}

/// One provider entry, field for field as the kubelet's Go type. Every
/// field is optional here so that a missing one gets the kubelet's
/// validation message rather than a decoding error; Go's zero values and
/// `null` both read as absent.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialProvider {
    #[serde(default, deserialize_with = "text")]
    pub name: Option<String>,
    #[serde(rename = "matchImages")]
    #[serde(default, deserialize_with = "texts")]
    pub match_images: Option<Vec<String>>,
    #[serde(rename = "defaultCacheDuration")]
    #[serde(default, deserialize_with = "text")]
    pub default_cache_duration: Option<String>,
    #[serde(rename = "apiVersion")]
    #[serde(default, deserialize_with = "text")]
    pub api_version: Option<String>,
    #[serde(default, deserialize_with = "texts")]
    pub args: Option<Vec<String>>,
    pub env: Option<Vec<EnvVar>>,
    #[serde(rename = "tokenAttributes")]
    pub token_attributes: Option<TokenAttributes>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    #[serde(default, deserialize_with = "text")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub value: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenAttributes {
    #[serde(rename = "serviceAccountTokenAudience")]
    #[serde(default, deserialize_with = "text")]
    pub service_account_token_audience: Option<String>,
    #[serde(rename = "cacheType")]
    #[serde(default, deserialize_with = "text")]
    pub cache_type: Option<String>,
    #[serde(rename = "requireServiceAccount")]
    pub require_service_account: Option<bool>,
    #[serde(rename = "requiredServiceAccountAnnotationKeys")]
    #[serde(default, deserialize_with = "texts")]
    pub required_service_account_annotation_keys: Option<Vec<String>>,
    #[serde(rename = "optionalServiceAccountAnnotationKeys")]
    #[serde(default, deserialize_with = "texts")]
    pub optional_service_account_annotation_keys: Option<Vec<String>>,
}

impl TokenAttributes {
    pub fn audience(&self) -> &str {
        self.service_account_token_audience.as_deref().unwrap_or("")
    }

    pub fn required_keys(&self) -> &[String] {
        self.required_service_account_annotation_keys
            .as_deref()
            .unwrap_or(&[])
    }

    pub fn optional_keys(&self) -> &[String] {
        self.optional_service_account_annotation_keys
            .as_deref()
            .unwrap_or(&[])
    }

    /// Whether the kubelet passes this annotation key to the plugin.
    pub fn lists(&self, key: &str) -> bool {
        self.required_keys()
            .iter()
            .chain(self.optional_keys())
            .any(|k| k == key)
    }
}

impl CredentialProvider {
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    pub fn match_images(&self) -> &[String] {
        self.match_images.as_deref().unwrap_or(&[])
    }

    pub fn api_version(&self) -> &str {
        self.api_version.as_deref().unwrap_or("")
    }

    pub fn args(&self) -> &[String] {
        self.args.as_deref().unwrap_or(&[])
    }

    /// The `env` entries as name and value pairs (absent parts read as "").
    pub fn env(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .flatten()
            .map(|v| {
                (
                    v.name.clone().unwrap_or_default(),
                    v.value.clone().unwrap_or_default(),
                )
            })
            .collect()
    }
}

/// A provider entry and where it came from.
#[derive(Clone, Debug)]
pub struct Entry {
    pub file: PathBuf,
    /// Its index in its file's `providers` list.
    pub index: usize,
    pub provider: CredentialProvider,
}

impl Entry {
    pub fn name(&self) -> &str {
        self.provider.name()
    }

    /// `providers[3].tokenAttributes`, for a finding's field.
    pub fn field(&self, field: &str) -> String {
        if field.is_empty() {
            format!("providers[{}]", self.index)
        } else {
            format!("providers[{}].{field}", self.index)
        }
    }

    pub fn error(&self, rule: Rule, field: &str, message: impl Into<String>) -> Finding {
        Finding::new(
            Severity::Error,
            rule,
            &self.file,
            self.field(field),
            message,
        )
        .provider(self.name())
    }

    pub fn warning(&self, rule: Rule, field: &str, message: impl Into<String>) -> Finding {
        Finding::new(
            Severity::Warning,
            rule,
            &self.file,
            self.field(field),
            message,
        )
        .provider(self.name())
    }
}

/// What was read: every provider entry of every file that decoded, in the
/// kubelet's order, and the findings made while reading.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The path given: a file or a directory.
    pub path: PathBuf,
    pub files: Vec<PathBuf>,
    pub entries: Vec<Entry>,
    pub findings: Vec<Finding>,
}

impl Loaded {
    /// Whether some file could not be read or decoded. The kubelet would not
    /// start, so there is no merged config to validate as a whole.
    pub fn has_decode_errors(&self) -> bool {
        self.findings
            .iter()
            .any(|f| f.severity == super::Severity::Error)
    }
}

/// Reads `path` (a file or a directory) as the kubelet's
/// `--image-credential-provider-config`.
pub fn load(path: &Path) -> Loaded {
    let mut loaded = Loaded {
        path: path.to_path_buf(),
        ..Loaded::default()
    };
    let files = match config_files(path) {
        Ok(files) => files,
        Err(finding) => {
            loaded.findings.push(*finding);
            return loaded;
        }
    };
    for file in files {
        match wicp_base::yaml::read(&file) {
            Err(why) => loaded.findings.push(
                Finding::new(Severity::Error, Rule::KubeletRead, &file, "", why)
                    .fix("the kubelet must be able to read every config file, and check-config reads at most 1 MiB"),
            ),
            Ok(bytes) => {
                let (providers, findings) = decode(&file, &bytes);
                loaded.findings.extend(findings);
                loaded.entries.extend(providers.into_iter().enumerate().map(
                    |(index, provider)| Entry {
                        file: file.clone(),
                        index,
                        provider,
                    },
                ));
            }
        }
        loaded.files.push(file);
    }
    loaded
}

fn config_files(path: &Path) -> Result<Vec<PathBuf>, Box<Finding>> {
    let meta = std::fs::metadata(path).map_err(|e| {
        Box::new(
            Finding::new(Severity::Error, Rule::KubeletRead, path, "", format!("unable to access the path: {e}"))
                .fix("pass the file or directory given to the kubelet's --image-credential-provider-config"),
        )
    })?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let dir = std::fs::read_dir(path).map_err(|e| {
        Box::new(Finding::new(
            Severity::Error,
            Rule::KubeletRead,
            path,
            "",
            format!("unable to read the directory: {e}"),
        ))
    })?;
    let mut files: Vec<PathBuf> = dir
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "json" | "yaml" | "yml"))
        })
        .collect();
    files.sort_by(|a, b| {
        a.as_os_str()
            .as_encoded_bytes()
            .cmp(b.as_os_str().as_encoded_bytes())
    });
    if files.is_empty() {
        return Err(Box::new(
            Finding::new(
                Severity::Error,
                Rule::KubeletRead,
                path,
                "",
                "no configuration files (*.json, *.yaml, *.yml) in the directory",
            )
            .fix("the kubelet refuses to start with an empty config directory"),
        ));
    }
    Ok(files)
}

/// Decodes one file strictly. Returns its provider entries (none when it
/// does not decode) and the findings.
fn decode(file: &Path, bytes: &[u8]) -> (Vec<CredentialProvider>, Vec<Finding>) {
    let mut findings = Vec::new();
    let fail = |rule, message: String| {
        Finding::new(Severity::Error, rule, file, "", message)
            .fix("the kubelet refuses to start with this file; it decodes the config strictly")
    };
    let Ok(text) = std::str::from_utf8(bytes) else {
        findings.push(fail(Rule::KubeletDecode, "the file is not UTF-8".into()));
        return (Vec::new(), findings);
    };
    if let Err(why) = wicp_base::yaml::check_depth(text) {
        findings.push(
            Finding::new(Severity::Error, Rule::KubeletDecode, file, "", why)
                .fix("a kubelet config is a few levels deep: check that this is the right file"),
        );
        return (Vec::new(), findings);
    }
    if let Err(why) = wicp_base::yaml::check_strict_keys(text) {
        findings.push(
            fail(Rule::KubeletDecode, format!("cannot decode: {why}"))
                .fix("set each key once per mapping, a merge key (<<) counting as setting every key it merges: the kubelet's strict YAML decoder refuses a key set twice, so drop one of the two"),
        );
        return (Vec::new(), findings);
    }
    let mut documents = yaml_serde::Deserializer::from_str(text);
    let Some(first) = documents.next() else {
        findings.push(fail(
            Rule::KubeletTypeMeta,
            "the file is empty: Object 'Kind' is missing".into(),
        ));
        return (Vec::new(), findings);
    };
    // The kubelet's YAML library applies merge keys (`<<`) before its
    // strict decode, so the decode here runs on the merged document. A
    // failure is reported from the document as written, which says where.
    let merged =
        yaml_serde::Value::deserialize(first).and_then(|mut v| v.apply_merge().map(|()| v));
    let config = match merged.and_then(WireConfig::deserialize) {
        Ok(config) => config,
        Err(merged_error) => {
            let e = yaml_serde::Deserializer::from_str(text)
                .next()
                .map(WireConfig::deserialize)
                .and_then(Result::err)
                .map_or(merged_error.to_string(), |e| e.to_string());
            findings.push(fail(Rule::KubeletDecode, format!("cannot decode: {e}")));
            return (Vec::new(), findings);
        }
    };
    if documents.next().is_some() {
        findings.push(
            Finding::new(
                Severity::Warning,
                Rule::KubeletMultipleDocuments,
                file,
                "",
                "the file has more than one YAML document; the kubelet reads only the first",
            )
            .fix("put one CredentialProviderConfig per file (a config directory merges several files)"),
        );
    }
    let api_version = config.api_version.unwrap_or_default();
    let kind = config.kind.unwrap_or_default();
    let wrong = type_meta_errors(&kind, &api_version);
    if !wrong.is_empty() {
        findings.extend(wrong.into_iter().map(|m| fail(Rule::KubeletTypeMeta, m)));
        return (Vec::new(), findings);
    }
    let providers = config.providers.unwrap_or_default();
    if api_version != CONFIG_V1 {
        let unknown = token_attributes_unknown(file, &api_version, &providers);
        if !unknown.is_empty() {
            findings.extend(unknown);
            return (Vec::new(), findings);
        }
    }
    (providers, findings)
}

/// The kubelet's TypeMeta checks: a `kind` and an `apiVersion` it knows.
fn type_meta_errors(kind: &str, api_version: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if kind.is_empty() {
        errors.push("Object 'Kind' is missing".into());
    } else if kind != CONFIG_KIND {
        errors.push(format!("kind is {kind:?}, not {CONFIG_KIND:?}"));
    }
    if api_version.is_empty() {
        errors.push("Object 'apiVersion' is missing".into());
    } else if !CONFIG_VERSIONS.contains(&api_version) {
        errors.push(format!(
            "apiVersion {api_version:?} is not one the kubelet knows ({})",
            CONFIG_VERSIONS.join(", ")
        ));
    }
    errors
}

/// `tokenAttributes` in a config of an older `api_version`, which the
/// kubelet's strict decoding refuses as an unknown field.
fn token_attributes_unknown(
    file: &Path,
    api_version: &str,
    providers: &[CredentialProvider],
) -> Vec<Finding> {
    providers
        .iter()
        .enumerate()
        .filter(|(_, provider)| provider.token_attributes.is_some())
        .map(|(index, provider)| {
            Finding::new(
                Severity::Error,
                Rule::KubeletDecode,
                file,
                format!("providers[{index}].tokenAttributes"),
                format!("unknown field \"tokenAttributes\": {api_version} has no such field"),
            )
            .provider(provider.name())
            .fix(format!("use apiVersion: {CONFIG_V1}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_str(text: &str) -> (Vec<CredentialProvider>, Vec<Finding>) {
        decode(Path::new("c.yaml"), text.as_bytes())
    }

    #[test]
    fn decodes_a_v1_config() {
        let (providers, findings) = decode_str(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
             - name: a\n  matchImages: [\"*.io\"]\n  defaultCacheDuration: 1h\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n\
             \x20 env: [{name: X, value: y}]\n  tokenAttributes: {serviceAccountTokenAudience: aud, cacheType: Token, requireServiceAccount: true}\n",
        );
        assert!(findings.is_empty(), "{findings:?}");
        let p = &providers[0];
        assert_eq!(p.name(), "a");
        assert_eq!(p.env(), [("X".to_string(), "y".to_string())]);
        assert_eq!(p.token_attributes.as_ref().unwrap().audience(), "aud");
    }

    #[test]
    fn merge_keys_are_applied_before_the_strict_decode_and_errors_say_where() {
        let (providers, findings) = decode_str(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n\
             providers:\n- <<: {defaultCacheDuration: 1h, apiVersion: credentialprovider.kubelet.k8s.io/v1}\n  name: a\n  matchImages: [\"*.io\"]\n",
        );
        assert!(findings.is_empty(), "{findings:?}");
        assert_eq!(
            providers[0].api_version(),
            "credentialprovider.kubelet.k8s.io/v1"
        );
        let (_, findings) = decode_str(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: a\n  bogus: 1\n",
        );
        assert!(findings[0].to_string().contains("line"), "{findings:?}");
    }

    #[test]
    fn decoding_is_strict() {
        for (text, needle) in [
            (
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: [{nmae: a}]\n",
                "unknown field `nmae`",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: [{MatchImages: [a]}]\n",
                "unknown field `MatchImages`",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: [{name: a, name: b}]\n",
                "line 3: key \"name\" already set in map",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: [{defaultCacheDuration: 0}]\n",
                "invalid type",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nextra: 1\n",
                "unknown field `extra`",
            ),
            (
                "kind: CredentialProviderConfig\nproviders: []\n",
                "'apiVersion' is missing",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1\nproviders: []\n",
                "'Kind' is missing",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v2\nkind: CredentialProviderConfig\n",
                "not one the kubelet knows",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
                "not \"CredentialProviderConfig\"",
            ),
            ("", "'Kind' is missing"),
            (
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: CredentialProviderConfig\nproviders: [{name: a, tokenAttributes: {}}]\n",
                "unknown field \"tokenAttributes\"",
            ),
        ] {
            let (_, findings) = decode_str(text);
            assert!(
                findings
                    .iter()
                    .any(|f| f.severity == super::super::Severity::Error
                        && f.message.contains(needle)),
                "{text:?}: {findings:?}"
            );
        }
    }

    #[test]
    fn later_documents_are_flagged() {
        let (providers, findings) = decode_str(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: [{name: a}]\n---\nkind: Other\n",
        );
        assert_eq!(providers.len(), 1);
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].rule, Rule::KubeletMultipleDocuments);
    }
}
