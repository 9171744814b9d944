//! What a configuration is judged by: every rule, kubelet's and ours, and
//! the finding one produces, located by file, provider entry and field.

use std::fmt;
use std::path::Path;

use serde::Serialize;

/// Defines [`Rule`] with its names and the list of all rules from one table,
/// so the fixture test can require a failing and a passing case for each.
macro_rules! rules {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// Every check `check-config` makes. The `kubelet.*` rules are the
        /// kubelet's own: it refuses to start when one fails.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Rule { $($(#[$doc])* $variant,)* }

        impl Rule {
            pub const ALL: &[Rule] = &[$(Rule::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self { $(Rule::$variant => $name,)* }
            }
        }
    };
}

rules! {
    /// The config path cannot be read, or a directory has no config file.
    KubeletRead = "kubelet.read",
    /// Strict decoding: unknown, misspelt or duplicated fields, wrong types.
    KubeletDecode = "kubelet.decode",
    /// `apiVersion` and `kind` of the file.
    KubeletTypeMeta = "kubelet.type-meta",
    /// More than one YAML document: the kubelet reads the first only.
    KubeletMultipleDocuments = "kubelet.multiple-documents",
    /// At least one provider.
    KubeletProviders = "kubelet.providers",
    /// The provider name: no `/`, no space, not `.` or `..`.
    KubeletName = "kubelet.name",
    /// Unique provider names, across the files of a directory too.
    KubeletDuplicateName = "kubelet.duplicate-name",
    /// The provider's exec `apiVersion`.
    KubeletApiVersion = "kubelet.api-version",
    /// At least one `matchImages` entry, each a parsable URL.
    KubeletMatchImages = "kubelet.match-images",
    /// `defaultCacheDuration`: required, a Go duration, not negative.
    KubeletDefaultCacheDuration = "kubelet.default-cache-duration",
    /// `tokenAttributes`: audience and requireServiceAccount required, v1 only.
    KubeletTokenAttributes = "kubelet.token-attributes",
    /// Annotation keys: qualified names, no duplicates, not both lists.
    KubeletAnnotationKeys = "kubelet.annotation-keys",
    /// `cacheType`: required, `Token` or `ServiceAccount`.
    KubeletCacheType = "kubelet.cache-type",
    /// A `matchImages` path with a glob: a literal prefix that never matches.
    MatchImagesPathGlob = "match-images.path-glob",
    /// A `?` or `#` in `matchImages`: Go's URL parser cuts the pattern there.
    MatchImagesQuery = "match-images.query",
    /// A `matchImages` entry without a host.
    MatchImagesEmpty = "match-images.empty",
    /// A `matchImages` entry with a scheme: the kubelet reads `https:` as its
    /// host and never runs the plugin.
    MatchImagesScheme = "match-images.scheme",
    /// `index.docker.io`: the kubelet matches Docker Hub images as docker.io.
    MatchImagesDockerHub = "match-images.docker-hub",
    /// No executable for the provider name in `--bin-dir`.
    BinDirMissing = "bin-dir.missing",
    /// The entry's args or env make the binary refuse to run.
    ArgsInvalid = "args.invalid",
    /// A `WICP_*` variable the binary does not read.
    EnvUnknown = "env.unknown",
    /// The name's suffix and `--provider` disagree.
    NameProviderMismatch = "name.provider-mismatch",
    /// A `wi-credential-provider-<suffix>` name naming no provider.
    NameUnknownSuffix = "name.unknown-suffix",
    /// The exchanger needs the token but the entry has no `tokenAttributes`.
    TokenMissing = "token.missing",
    /// Passthrough with `cacheType: ServiceAccount`.
    PassthroughCacheType = "passthrough.cache-type",
    /// The audience is not the one the routed exchanger expects.
    AudienceMismatch = "audience.mismatch",
    /// The exchanger reads an annotation the entry does not list.
    AnnotationsNotListed = "annotations.not-listed",
    /// A `matchImages` registry the routed exchanger does not serve.
    RegistryNotServed = "registry.not-served",
    /// `auto` routing with a token: one audience cannot suit every provider.
    AutoWithToken = "auto.with-token",
    /// `defaultCacheDuration` longer than the credentials live.
    CacheDurationTooLong = "cache-duration.too-long",
    /// A node-identity provider (no `tokenAttributes`) whose `matchImages`
    /// overlap ours: pods denied their own access pull with the node's.
    OverlapNodeIdentity = "overlap.node-identity",
    /// The kubelet does not verify present images (KEP-2535), so an image
    /// pulled with one service account's identity serves every pod.
    ImageReuse = "image-reuse",
    /// A config directory given to a kubelet older than 1.34.
    DirConfigKubeletVersion = "dir-config.kubelet-version",
    /// A `--registry-mirror` whose target the routed exchanger does not
    /// serve (an error), or whose source no `matchImages` entry matches,
    /// so the kubelet never asks (a warning).
    RegistryMirror = "registry-mirror",
    /// `--identity spiffe` without its admin socket, SPIFFE flags without
    /// it, or no audience for the JWT-SVID.
    Spiffe = "spiffe",
    /// `tokenAttributes` for a kubelet without KEP-4412 (below 1.33, or its
    /// feature gate off): the kubelet refuses the config and exits.
    TokenAttributesKubeletGate = "token-attributes.kubelet-gate",
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// How bad a finding is. Errors make `check-config` exit 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The kubelet refuses the config, or the entry can never yield a credential.
    Error,
    /// Probably a mistake, but there is a case where it works.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One problem, located by file, provider entry and field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// Which check, by a stable name for scripts and tests.
    pub rule: Rule,
    pub file: String,
    /// The provider entry's name, when the finding is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Where in the file: `providers[0].tokenAttributes.cacheType`.
    pub field: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub fn new(
        severity: Severity,
        rule: Rule,
        file: &Path,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            severity,
            rule,
            file: file.display().to_string(),
            provider: None,
            field: field.into(),
            message: message.into(),
            fix: None,
        }
    }

    pub fn provider(mut self, name: &str) -> Self {
        self.provider = Some(name.to_string());
        self
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file)?;
        if let Some(provider) = &self.provider {
            write!(f, "provider {provider:?}: ")?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}: {}", self.severity, self.message)?;
        if let Some(fix) = &self.fix {
            write!(f, "; fix: {fix}")?;
        }
        Ok(())
    }
}
