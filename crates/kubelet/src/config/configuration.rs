//! The few `KubeletConfiguration` facts that decide whether per-pod identity
//! holds on a node, and the kubelet's version.
//!
//! Read leniently: a KubeletConfiguration has hundreds of fields we do not
//! care about, and the kubelet itself checks it. The file is the kubelet's
//! `--config` (YAML or JSON), with the `.conf` drop-ins of `--config-dir`
//! laid over it in lexicographic order, each top-level field replacing the
//! earlier one (EKS writes `40-nodeadm.conf` there), which is close enough
//! to the kubelet's merge for the fields read here.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use yaml_serde::Value;

use wicp_base::error::{Error, Result};

/// The kubelet's defaults (v1beta1 `SetDefaults_KubeletConfiguration`;
/// `pkg/cluster/ports` `KubeletHealthzPort`).
const DEFAULT_HEALTHZ_ADDRESS: &str = "127.0.0.1";
const DEFAULT_HEALTHZ_PORT: u16 = 10248;

/// The KEP-2535 feature gate (alpha 1.33, beta and on by default 1.35).
pub const ENSURE_SECRET_PULLED_IMAGES: &str = "KubeletEnsureSecretPulledImages";

/// The KEP-4412 feature gate that lets a plugin entry carry
/// `tokenAttributes` (alpha and off in 1.33, beta and on from 1.34; with
/// it off the kubelet refuses such a config and exits).
pub const SERVICE_ACCOUNT_TOKEN_GATE: &str = "KubeletServiceAccountTokenForCredentialProviders";
pub const SERVICE_ACCOUNT_TOKEN_SINCE: Version = Version::new(1, 33);
pub const SERVICE_ACCOUNT_TOKEN_ON_SINCE: Version = Version::new(1, 34);

/// A kubelet version, major and minor (`v1.34.2` is 1.34).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32) -> Self {
        Version { major, minor }
    }

    /// Reads `v1.34.2`, `1.34`, `Kubernetes v1.34.2-eks-113cf36` (the
    /// output of `kubelet --version`).
    pub fn parse(text: &str) -> Option<Version> {
        let word = text.split_whitespace().find(|w| {
            w.trim_start_matches('v')
                .starts_with(|c: char| c.is_ascii_digit())
        })?;
        let mut parts = word.trim_start_matches('v').split(['.', '-', '+']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Version { major, minor })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Directory configs for `--image-credential-provider-config` (PR #131658).
pub const DIRECTORY_CONFIG_SINCE: Version = Version::new(1, 34);
/// `KubeletEnsureSecretPulledImages` exists from 1.33 and is on from 1.35.
pub const ENSURE_GATE_SINCE: Version = Version::new(1, 33);
pub const ENSURE_GATE_ON_SINCE: Version = Version::new(1, 35);

/// What was read from the KubeletConfiguration.
#[derive(Clone, Debug, Default)]
pub struct KubeletConfig {
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// `featureGates.KubeletEnsureSecretPulledImages`, when set.
    pub ensure_secret_pulled_images: Option<bool>,
    /// `featureGates.KubeletServiceAccountTokenForCredentialProviders`,
    /// when set.
    pub service_account_token_gate: Option<bool>,
    pub image_pull_credentials_verification_policy: Option<String>,
    pub preloaded_images_verification_allowlist: Vec<String>,
    pub healthz_bind_address: Option<String>,
    pub healthz_port: Option<u16>,
}

impl KubeletConfig {
    /// Reads `file` and the `*.conf` files of `drop_in_dir` over it, each
    /// through the bounded reader ([`wicp_base::yaml`]).
    pub fn read(file: &Path, drop_in_dir: Option<&Path>) -> Result<KubeletConfig> {
        let mut files = vec![file.to_path_buf()];
        if let Some(dir) = drop_in_dir {
            let mut extra: Vec<PathBuf> = std::fs::read_dir(dir)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|e| e == "conf"))
                        .collect()
                })
                .unwrap_or_default();
            extra.sort();
            files.extend(extra);
        }
        let mut documents = Vec::new();
        for path in files {
            let bytes = wicp_base::yaml::read(&path).map_err(|e| {
                Error::config(format!(
                    "cannot read the KubeletConfiguration {}: {e}",
                    path.display()
                ))
            })?;
            documents.push((path, bytes));
        }
        Self::from_documents(documents)
    }

    /// The facts of a KubeletConfiguration and its drop-ins, already read
    /// (bounded), in the order the kubelet applies them.
    pub fn from_documents(documents: Vec<(PathBuf, Vec<u8>)>) -> Result<KubeletConfig> {
        let mut merged = yaml_serde::Mapping::new();
        let mut files = Vec::new();
        for (path, bytes) in documents {
            let value = wicp_base::yaml::parse(&bytes).map_err(|e| {
                Error::config(format!(
                    "{} is not a YAML or JSON KubeletConfiguration: {e}",
                    path.display()
                ))
            })?;
            if let Value::Mapping(map) = value {
                for (k, v) in map {
                    merged.insert(k, v);
                }
            }
            files.push(path);
        }
        let get = |key: &str| merged.get(key);
        let gate = |name: &str| {
            get("featureGates")
                .and_then(|g| g.get(name))
                .and_then(Value::as_bool)
        };
        Ok(KubeletConfig {
            files,
            ensure_secret_pulled_images: gate(ENSURE_SECRET_PULLED_IMAGES),
            service_account_token_gate: gate(SERVICE_ACCOUNT_TOKEN_GATE),
            image_pull_credentials_verification_policy: get(
                "imagePullCredentialsVerificationPolicy",
            )
            .and_then(Value::as_str)
            .map(str::to_string),
            preloaded_images_verification_allowlist: get("preloadedImagesVerificationAllowlist")
                .and_then(Value::as_sequence)
                .map(|s| {
                    s.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            healthz_bind_address: get("healthzBindAddress")
                .and_then(Value::as_str)
                .map(str::to_string),
            healthz_port: get("healthzPort")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok()),
        })
    }

    /// The facts the kubelet's command-line `flags` give, laid over this
    /// file's (a flag wins over the file): `--feature-gates` (merged gate
    /// by gate), `--healthz-bind-address` and `--healthz-port`. AKS
    /// Windows passes these only as flags.
    pub fn with_flags(mut self, flags: &BTreeMap<String, String>) -> KubeletConfig {
        if let Some(gates) = flags.get("feature-gates") {
            for pair in gates.split(',') {
                let Some((name, value)) = pair.split_once('=') else {
                    continue;
                };
                let value = match value.trim() {
                    v if v.eq_ignore_ascii_case("true") => true,
                    v if v.eq_ignore_ascii_case("false") => false,
                    _ => continue,
                };
                match name.trim() {
                    ENSURE_SECRET_PULLED_IMAGES => self.ensure_secret_pulled_images = Some(value),
                    SERVICE_ACCOUNT_TOKEN_GATE => self.service_account_token_gate = Some(value),
                    _ => {}
                }
            }
        }
        if let Some(address) = flags.get("healthz-bind-address") {
            self.healthz_bind_address = Some(address.clone());
        }
        if let Some(port) = flags.get("healthz-port").and_then(|p| p.parse().ok()) {
            self.healthz_port = Some(port);
        }
        self
    }

    /// The facts of a kubelet run with flags only (no `--config`), `None`
    /// when its flags set none of them.
    pub fn from_flags(flags: &BTreeMap<String, String>) -> Option<KubeletConfig> {
        ["feature-gates", "healthz-bind-address", "healthz-port"]
            .iter()
            .any(|f| flags.contains_key(*f))
            .then(|| KubeletConfig::default().with_flags(flags))
    }

    /// Whether a kubelet of `version` with these gates accepts
    /// `tokenAttributes` in a plugin entry; `None` when it cannot be told
    /// (the version is unknown and the gate not set).
    pub fn accepts_token_attributes(&self, version: Option<Version>) -> Option<bool> {
        match (version, self.service_account_token_gate) {
            (Some(v), _) if v < SERVICE_ACCOUNT_TOKEN_SINCE => Some(false),
            (_, Some(gate)) => Some(gate),
            (Some(v), None) => Some(v >= SERVICE_ACCOUNT_TOKEN_ON_SINCE),
            (None, None) => None,
        }
    }

    /// The kubelet's health endpoint, `None` when `healthzPort: 0` turns it off.
    pub fn healthz(&self) -> Option<(String, u16)> {
        let port = self.healthz_port.unwrap_or(DEFAULT_HEALTHZ_PORT);
        if port == 0 {
            return None;
        }
        let address = match self.healthz_bind_address.as_deref() {
            None | Some("") | Some("0.0.0.0") => DEFAULT_HEALTHZ_ADDRESS.to_string(),
            Some("::") => "::1".to_string(),
            Some(a) => a.to_string(),
        };
        Some((address, port))
    }

    /// Whether the kubelet verifies that a pod may use an image already on
    /// the node, given its version when known; `None` when it cannot be told.
    pub fn verifies_present_images(&self, version: Option<Version>) -> Option<bool> {
        if self.image_pull_credentials_verification_policy.as_deref() == Some("NeverVerify") {
            return Some(false);
        }
        match (self.ensure_secret_pulled_images, version) {
            (_, Some(v)) if v < ENSURE_GATE_SINCE => Some(false),
            (Some(gate), _) => Some(gate),
            (None, Some(v)) => Some(v >= ENSURE_GATE_ON_SINCE),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file_and_decide_token_attributes() {
        let flags: BTreeMap<String, String> = [
            (
                "feature-gates",
                "KubeletServiceAccountTokenForCredentialProviders=true, Other=false",
            ),
            ("healthz-port", "12345"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let config = KubeletConfig::from_flags(&flags).unwrap();
        assert_eq!(config.healthz(), Some(("127.0.0.1".into(), 12345)));
        assert_eq!(config.service_account_token_gate, Some(true));
        assert_eq!(
            config.accepts_token_attributes(Some(Version::new(1, 33))),
            Some(true)
        );
        assert_eq!(
            config.accepts_token_attributes(Some(Version::new(1, 32))),
            Some(false)
        );
        let none = KubeletConfig::default();
        assert_eq!(
            none.accepts_token_attributes(Some(Version::new(1, 33))),
            Some(false)
        );
        assert_eq!(
            none.accepts_token_attributes(Some(Version::new(1, 34))),
            Some(true)
        );
        assert_eq!(none.accepts_token_attributes(None), None);
        assert!(KubeletConfig::from_flags(&BTreeMap::new()).is_none());
    }

    #[test]
    fn versions() {
        assert_eq!(
            Version::parse("Kubernetes v1.34.2-eks-113cf36"),
            Some(Version::new(1, 34))
        );
        assert_eq!(Version::parse("1.33"), Some(Version::new(1, 33)));
        assert_eq!(Version::parse("v1.35.0+k3s1"), Some(Version::new(1, 35)));
        assert_eq!(Version::parse("nope"), None);
        assert!(Version::new(1, 33) < DIRECTORY_CONFIG_SINCE);
    }

    #[test]
    fn reads_the_facts_with_drop_ins() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("config.json");
        std::fs::write(
            &main,
            r#"{"kind":"KubeletConfiguration","healthzPort":10248,"featureGates":{"KubeletEnsureSecretPulledImages":true}}"#,
        )
        .unwrap();
        let d = dir.path().join("config.json.d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(
            d.join("40-nodeadm.conf"),
            "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [\"reg.io/*\"]\nhealthzPort: 1234\n",
        )
        .unwrap();
        let c = KubeletConfig::read(&main, Some(&d)).unwrap();
        assert_eq!(c.files.len(), 2);
        assert_eq!(c.ensure_secret_pulled_images, Some(true));
        assert_eq!(c.healthz(), Some(("127.0.0.1".to_string(), 1234)));
        assert_eq!(c.preloaded_images_verification_allowlist, ["reg.io/*"]);
        assert_eq!(c.verifies_present_images(None), Some(true));
    }

    #[test]
    fn verification_by_version_and_policy() {
        let c = KubeletConfig::default();
        assert_eq!(
            c.verifies_present_images(Some(Version::new(1, 34))),
            Some(false)
        );
        assert_eq!(
            c.verifies_present_images(Some(Version::new(1, 35))),
            Some(true)
        );
        assert_eq!(c.verifies_present_images(None), None);
        let never = KubeletConfig {
            image_pull_credentials_verification_policy: Some("NeverVerify".into()),
            ..KubeletConfig::default()
        };
        assert_eq!(
            never.verifies_present_images(Some(Version::new(1, 36))),
            Some(false)
        );
    }
}
