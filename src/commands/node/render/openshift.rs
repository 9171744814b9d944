//! `node render openshift`: what the Machine Config Operator applies to a
//! pool so that its kubelets run our entries, with nothing edited by hand
//! (a hand edit of a file the MCO renders is drift, and `/usr` is read-only
//! ostree).
//!
//! Two objects, applied together:
//! - a `MachineConfig` (Ignition 3.5) holding the kubelet's
//!   credential-provider config: on AWS, Azure and GCP the platform's own
//!   file, its stock entry kept and ours added (a later MachineConfig's file
//!   replaces an earlier one of the same path: the MCO merges them sorted
//!   by name, `MergeMachineConfigs`), elsewhere a file of our own and a
//!   kubelet drop-in setting the variable the on-prem unit reads;
//! - a `MachineOSConfig` whose Containerfile adds the binary and its
//!   provider links to the plugin directory from the release's node image,
//!   pinned by digest. A MachineConfig cannot carry the binary: the daemon
//!   writes only inline `data:` sources and a rendered MachineConfig must
//!   stay under 1.5 MiB. With On-Cluster Layering the MCO builds one image
//!   from both and boots the pool into it, so the config never arrives on a
//!   node without the binaries it names (the kubelet refuses to start then).
//!
//! Sources (openshift/machine-config-operator at 7ff337a4, 2026-08-20):
//! `pkg/controller/template/render.go` (`credentialProviderConfigFlag`: the
//! bin dir and the per-platform config path), `templates/common/<platform>/
//! files/etc-kubernetes-credential-providers-*.yaml` (the stock entries
//! below, byte for byte), `templates/worker/01-worker-kubelet/on-prem/units/
//! kubelet.service.yaml` (`$KUBELET_CRIO_IMAGE_CREDENTIAL_PROVIDER_FLAGS`),
//! `pkg/controller/container-runtime-config/helpers.go`
//! (`generateDropinUnitCredProviderConfig`, the drop-in this one mirrors),
//! `pkg/controller/common/helpers.go` (Ignition `v3_5`, file modes, the size
//! limit), `pkg/daemon/file_writers.go` (only inline sources) and
//! `docs/onclusterlayering-quickstart.md` (`MachineOSConfig`, `FROM configs
//! AS final`, `ostree container commit`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use yaml_serde::{Mapping, Value};

use crate::commands::check_config::isolation::KubeletFacts;
use crate::options::BINARY;
use wicp_base::error::{Error, Result};
use wicp_kubelet::config::configuration::Version;
use wicp_kubelet::config::merge::{self, Format, Replace};
use wicp_net::inputs::Env;

/// The kubelet's plugin directory on RHCOS (`render.go`).
pub(crate) const BIN_DIR: &str = "/usr/libexec/kubelet-image-credential-provider-plugins";
/// Where the platform configs live (`KubernetesCredentialProvidersDir`).
const CONFIG_DIR: &str = "/etc/kubernetes/credential-providers";
/// Ignition spec the MCO parses (`ign3types` is `v3_5`).
const IGNITION_VERSION: &str = "3.5.0";
/// etcd's request limit the MCO checks a rendered MachineConfig against
/// (`MaxMachineConfigSize`).
const MAX_MACHINE_CONFIG: usize = 1_572_864;
/// The most a Containerfile in a MachineOSConfig may hold (its CRD).
const MAX_CONTAINERFILE: usize = 4096;

/// The cluster's platform, as the MCO's `Infrastructure` names it.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Platform {
    Aws,
    Azure,
    Gcp,
    /// Bare metal, vSphere, OpenStack, Nutanix, None: the kubelet gets
    /// credential-provider flags only from a drop-in.
    Other,
}

impl Platform {
    /// The platform's config file and the stock entries the MCO renders
    /// into it (the `inline` text of its template).
    fn stock(self) -> Option<(&'static str, &'static str)> {
        match self {
            Platform::Aws => Some(("ecr-credential-provider.yaml", STOCK_AWS)),
            Platform::Azure => Some(("acr-credential-provider.yaml", STOCK_AZURE)),
            Platform::Gcp => Some(("gcr-credential-provider.yaml", STOCK_GCP)),
            Platform::Other => None,
        }
    }
}

pub(crate) const STOCK_AWS: &str = "apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: ecr-credential-provider
    matchImages:
      - \"*.dkr.ecr.*.amazonaws.com\"
      - \"*.dkr.ecr.*.amazonaws.com.cn\"
      - \"*.dkr.ecr-fips.*.amazonaws.com\"
      - \"*.dkr.ecr.us-iso-east-1.c2s.ic.gov\"
      - \"*.dkr.ecr.us-isob-east-1.sc2s.sgov.gov\"
    defaultCacheDuration: \"12h\"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
";

pub(crate) const STOCK_AZURE: &str = "apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: acr-credential-provider
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    defaultCacheDuration: \"10m\"
    matchImages:
      - \"*.azurecr.io\"
      - \"*.azurecr.cn\"
      - \"*.azurecr.de\"
      - \"*.azurecr.us\"
    args:
      - /etc/kubernetes/cloud.conf

";

pub(crate) const STOCK_GCP: &str = "apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: gcr-credential-provider
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    matchImages:
      - \"gcr.io\"
      - \"*.gcr.io\"
      - \"*.pkg.dev\"
      - \"container.cloud.google.com\"
    defaultCacheDuration: \"1m\"
    args:
      - get-credentials
      - --v=3
";

#[derive(clap::Args, Clone, Debug)]
pub(crate) struct Args {
    /// The cluster's platform: aws, azure and gcp keep the platform's own
    /// credential-provider entry in its file; other gets a file of its own.
    #[arg(long, value_enum, value_name = "PLATFORM")]
    pub(crate) platform: Platform,

    /// The MachineConfigPool to configure.
    #[arg(long, value_name = "POOL", default_value = "worker")]
    pub(crate) pool: String,

    /// The release's node image, pinned by digest
    /// (registry/path/wi-credential-provider@sha256:<64 hex>): the
    /// Containerfile copies the binary out of it.
    #[arg(long, value_name = "IMAGE@sha256:DIGEST")]
    pub(crate) image: String,

    /// Where On-Cluster Layering pushes the pool's image
    /// (`host[:port]/path/name:tag`).
    #[arg(long, value_name = "IMAGE:TAG")]
    pub(crate) push_spec: String,

    /// The secret in openshift-machine-config-operator that may push there.
    #[arg(long, value_name = "NAME")]
    pub(crate) push_secret: String,

    /// The platform's config as the pool's nodes have it (for example from
    /// `oc debug node/<node> -- cat /host/etc/kubernetes/credential-providers/ecr-credential-provider.yaml`),
    /// instead of the stock entries of the MCO release this was read from.
    #[arg(long, value_name = "FILE")]
    pub(crate) platform_config: Option<PathBuf>,

    #[command(flatten)]
    pub(crate) entries: crate::commands::node::Entries,

    /// Remove another provider (NAME), or narrow its matchImages
    /// (NAME=PATTERN,PATTERN...), e.g. the platform's ecr-credential-provider.
    #[arg(long, value_name = "NAME[=PATTERNS]")]
    pub(crate) replace: Vec<Replace>,

    /// The cluster's Kubernetes version, checked against the entries.
    #[arg(long, value_name = "VERSION", value_parser = crate::commands::node::parse_version)]
    pub(crate) kubelet_version: Option<Version>,
}

/// A DNS-1123 subdomain, as Kubernetes names objects: lowercase letters,
/// digits, `-` and `.`, starting and ending with a letter or digit.
fn is_subdomain(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 253
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'.')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// An image reference pinned by digest: a repository of the characters
/// references use, then `@sha256:` and 64 lowercase hex digits. It goes
/// into a Containerfile, so nothing else (no space, no newline) may.
fn is_pinned_image(image: &str) -> bool {
    let Some((repository, digest)) = image.split_once("@sha256:") else {
        return false;
    };
    let repository_ok = repository.contains('/')
        && repository
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && repository.bytes().all(|b| {
            b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || matches!(b, b'.' | b'-' | b'_' | b'/' | b':')
        });
    repository_ok
        && digest.len() == 64
        && digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A push spec as the MachineOSConfig CRD accepts it
/// (`host[:port][/namespace]/name:tag`), checked by hand to the same
/// shape: a dotted host, an optional port, path segments, a tag.
fn is_push_spec(spec: &str) -> bool {
    let Some((name, tag)) = spec.rsplit_once(':') else {
        return false;
    };
    let tag_ok = !tag.is_empty()
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    let mut parts = name.split('/');
    let host = parts.next().unwrap_or_default();
    let (host, port) = host.split_once(':').unwrap_or((host, ""));
    let host_ok = host.contains('.')
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    let port_ok = port.is_empty()
        || (2..=5).contains(&port.len()) && port.bytes().all(|b| b.is_ascii_digit());
    let segments: Vec<&str> = parts.collect();
    let path_ok = !segments.is_empty()
        && segments.iter().all(|s| {
            !s.is_empty()
                && s.len() <= 61
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        });
    tag_ok && host_ok && port_ok && path_ok
}

fn check_names(args: &Args) -> Result<()> {
    // (valid, flag, value, what it must be, how to fix it)
    let checks = [
        (
            is_subdomain(&args.pool) && args.pool.len() <= 200,
            "--pool",
            &args.pool,
            "a MachineConfigPool name",
            "pass the pool's name as `oc get machineconfigpool` lists it (lowercase letters, digits, '-' and '.')",
        ),
        (
            is_pinned_image(&args.image),
            "--image",
            &args.image,
            "an image pinned by digest",
            "pass the release's node image as registry/path/wi-credential-provider@sha256:<the .digest file's 64 hex digits>",
        ),
        (
            is_push_spec(&args.push_spec),
            "--push-spec",
            &args.push_spec,
            "where On-Cluster Layering can push",
            "pass host[:port]/path/name:tag, as a MachineOSConfig's renderedImagePushSpec",
        ),
        (
            is_subdomain(&args.push_secret),
            "--push-secret",
            &args.push_secret,
            "a secret name",
            "pass the name of the push secret in openshift-machine-config-operator",
        ),
    ];
    match checks.into_iter().find(|check| !check.0) {
        Some((_, flag, value, what, fix)) => {
            Err(Error::config(format!("{flag} {value:?} is not {what}")).fix(fix))
        }
        None => Ok(()),
    }
}

/// The config file the kubelet reads on this platform, and its bytes with
/// our entries merged in.
fn config_file(args: &Args, ours: &[Value]) -> Result<(String, Vec<u8>)> {
    let (name, existing): (String, Option<Vec<u8>>) = match args.platform.stock() {
        Some((file, stock)) => {
            let bytes = match &args.platform_config {
                Some(path) => wicp_base::yaml::read(path).map_err(|e| {
                    Error::config(format!(
                        "cannot read --platform-config {}: {e}",
                        path.display()
                    ))
                })?,
                None => stock.as_bytes().to_vec(),
            };
            (file.to_string(), Some(bytes))
        }
        None => {
            if args.platform_config.is_some() {
                return Err(Error::config(
                    "--platform-config is for aws, azure and gcp: other platforms have no platform config",
                )
                .fix("drop --platform-config"));
            }
            (format!("{BINARY}.yaml"), None)
        }
    };
    let path = format!("{CONFIG_DIR}/{name}");
    let merged = merge::merge(
        existing.as_deref(),
        Path::new(&path),
        Format::Yaml,
        ours,
        &args.replace,
    )?;
    let bytes = match merged.bytes {
        Some(b) => b,
        None => merge::render(&merged.value, Format::Yaml)?,
    };
    Ok((path, bytes))
}

/// The drop-in that gives the on-prem kubelet unit its flags, as the
/// MCO's own for a CRIOCredentialProviderConfig does (ours sorts after its
/// `40-`, so ours is the one in force if both exist).
fn drop_in(config: &str) -> String {
    format!(
        "[Service]\n# wi-credential-provider: the kubelet's credential-provider flags (node render openshift)\nEnvironment=\"KUBELET_CRIO_IMAGE_CREDENTIAL_PROVIDER_FLAGS=--image-credential-provider-bin-dir={BIN_DIR} --image-credential-provider-config={config}\"\n"
    )
}
const DROP_IN: &str = "/etc/systemd/system/kubelet.service.d/41-wi-credential-provider.conf";

/// An Ignition file entry: root-owned, inline as a base64 data URL.
fn ignition_file(path: &str, mode: u32, bytes: &[u8]) -> Value {
    let mut contents = Mapping::new();
    contents.insert(
        "source".into(),
        format!(
            "data:;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
        .into(),
    );
    let mut file = Mapping::new();
    file.insert("path".into(), path.into());
    file.insert("mode".into(), Value::Number(mode.into()));
    file.insert("overwrite".into(), true.into());
    file.insert("contents".into(), Value::Mapping(contents));
    Value::Mapping(file)
}

/// The Containerfile On-Cluster Layering builds: the binary from the
/// release's image into the plugin directory, a link per provider.
fn containerfile(image: &str) -> String {
    let links: Vec<String> = crate::version::plugin_names()
        .into_iter()
        .filter(|n| n != BINARY)
        .map(|n| format!("ln -s {BINARY} {BIN_DIR}/{n}"))
        .collect();
    format!(
        "FROM configs AS final\nCOPY --from={image} /usr/bin/{BINARY} {BIN_DIR}/{BINARY}\nRUN chmod 0755 {BIN_DIR}/{BINARY} && \\\n    {} && \\\n    ostree container commit\n",
        links.join(" && \\\n    ")
    )
}

/// The two objects for `args`, after check-config passes the merged
/// config with a bin dir holding the platform's plugins and ours.
pub(crate) fn render(args: &Args, env: &Env) -> Result<String> {
    check_names(args)?;
    let ours = args.entries.read()?;
    let (config_path, config_bytes) = config_file(args, &ours)?;
    check(&config_bytes, args, env)?;
    let machine_config = machine_config(args, &config_path, &config_bytes)?;
    let machine_os_config = machine_os_config(args)?;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# OpenShift pool {pool}: the kubelet's credential-provider config ({config_path}) as a MachineConfig,\n\
         # and the binary in {BIN_DIR} through On-Cluster Layering (MachineOSConfig).\n\
         # Apply both at once (oc apply -f <this file>): the MCO builds one image from both, so no node\n\
         # boots with a config naming a plugin it does not have. If the pool has a MachineOSConfig already,\n\
         # add this Containerfile's lines to it instead of the second object.\n\
         # The kubelet also needs RBAC for the token audiences: {BINARY} node render rbac (the same entry flags).",
        pool = args.pool
    );
    for doc in [machine_config, machine_os_config] {
        text.push_str("---\n");
        text.push_str(
            &yaml_serde::to_string(&doc)
                .map_err(|e| Error::config(format!("cannot write YAML: {e}")))?,
        );
    }
    Ok(text)
}

/// The MachineConfig: the config file (and on other platforms the
/// kubelet drop-in), inline, within the MCO's size limit.
fn machine_config(args: &Args, config_path: &str, config_bytes: &[u8]) -> Result<Value> {
    let mut files = vec![ignition_file(config_path, 0o644, config_bytes)];
    if args.platform == Platform::Other {
        files.push(ignition_file(
            DROP_IN,
            0o644,
            drop_in(config_path).as_bytes(),
        ));
    }
    let mut storage = Mapping::new();
    storage.insert("files".into(), Value::Sequence(files));
    let mut ignition = Mapping::new();
    ignition.insert("version".into(), IGNITION_VERSION.into());
    let mut config = Mapping::new();
    config.insert("ignition".into(), Value::Mapping(ignition));
    config.insert("storage".into(), Value::Mapping(storage));
    let machine_config = object(
        "MachineConfig",
        &format!("99-{}-{BINARY}", args.pool),
        Some(&args.pool),
        Value::Mapping(Mapping::from_iter([(
            "config".into(),
            Value::Mapping(config),
        )])),
    );
    let size = serde_json::to_vec(&machine_config)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > MAX_MACHINE_CONFIG / 2 {
        return Err(Error::config(format!(
            "the MachineConfig would be {size} bytes: too much of the pool's {MAX_MACHINE_CONFIG}-byte rendered config"
        ))
        .fix("keep the credential-provider config small"));
    }
    Ok(machine_config)
}

/// The MachineOSConfig whose Containerfile layers the binary in.
fn machine_os_config(args: &Args) -> Result<Value> {
    let containerfile = containerfile(&args.image);
    if containerfile.len() > MAX_CONTAINERFILE {
        return Err(Error::config(format!(
            "the Containerfile would be {} characters, more than a MachineOSConfig holds ({MAX_CONTAINERFILE})",
            containerfile.len()
        )));
    }
    let name = |n: &str| Value::Mapping(Mapping::from_iter([("name".into(), n.into())]));
    let mut file = Mapping::new();
    file.insert("containerfileArch".into(), "NoArch".into());
    file.insert("content".into(), containerfile.into());
    let mut spec = Mapping::new();
    spec.insert("machineConfigPool".into(), name(&args.pool));
    spec.insert(
        "imageBuilder".into(),
        Value::Mapping(Mapping::from_iter([(
            "imageBuilderType".into(),
            "Job".into(),
        )])),
    );
    spec.insert("renderedImagePushSecret".into(), name(&args.push_secret));
    spec.insert(
        "renderedImagePushSpec".into(),
        args.push_spec.as_str().into(),
    );
    spec.insert(
        "containerFile".into(),
        Value::Sequence(vec![Value::Mapping(file)]),
    );
    Ok(object(
        "MachineOSConfig",
        &args.pool,
        None,
        Value::Mapping(spec),
    ))
}

/// A machineconfiguration.openshift.io/v1 object.
fn object(kind: &str, name: &str, role: Option<&str>, spec: Value) -> Value {
    let mut metadata = Mapping::new();
    metadata.insert("name".into(), name.into());
    if let Some(role) = role {
        let mut labels = Mapping::new();
        labels.insert("machineconfiguration.openshift.io/role".into(), role.into());
        metadata.insert("labels".into(), Value::Mapping(labels));
    }
    let mut doc = Mapping::new();
    doc.insert(
        "apiVersion".into(),
        "machineconfiguration.openshift.io/v1".into(),
    );
    doc.insert("kind".into(), kind.into());
    doc.insert("metadata".into(), Value::Mapping(metadata));
    doc.insert("spec".into(), spec);
    Value::Mapping(doc)
}

/// check-config over the merged config, with a bin dir as the layered
/// image has it: ours, and the platform's own plugins.
fn check(config: &[u8], args: &Args, env: &Env) -> Result<()> {
    let facts = KubeletFacts {
        env: env.clone(),
        config: None,
        version: args.kubelet_version,
    };
    crate::commands::node::plan::stage::check_rendered(
        config,
        &facts,
        "the MachineConfig's CredentialProviderConfig",
        "fix the entries, or pass --replace for a provider that overlaps ours",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_image_pinned_by_digest_is_taken() {
        let digest = "0".repeat(64);
        assert!(is_pinned_image(&format!(
            "registry.example.com/platform/wi-credential-provider@sha256:{digest}"
        )));
        for bad in [
            "registry.example.com/platform/wi-credential-provider:0.1.0".to_string(),
            format!("registry.example.com/x@sha256:{}", "0".repeat(63)),
            format!("registry.example.com/x@sha256:{}", "A".repeat(64)),
            format!("registry.example.com/x\nRUN curl evil@sha256:{digest}"),
            format!("registry.example.com/x y@sha256:{digest}"),
            format!("wi-credential-provider@sha256:{digest}"),
        ] {
            assert!(!is_pinned_image(&bad), "{bad:?}");
        }
    }

    #[test]
    fn push_specs_and_names_follow_the_crd() {
        assert!(is_push_spec("quay.io/example/layered-rhcos:latest"));
        assert!(is_push_spec("registry.example.com:5000/os/worker:v1"));
        assert!(!is_push_spec("quay.io/example/layered-rhcos"));
        assert!(!is_push_spec("localhost/os:v1"));
        assert!(is_subdomain("worker"));
        assert!(is_subdomain("infra.gpu-1"));
        assert!(!is_subdomain("Worker"));
        assert!(!is_subdomain("-worker"));
    }

    #[test]
    fn the_containerfile_links_every_provider() {
        let file = containerfile("r.example.com/w@sha256:0");
        for p in wicp_providers::ALL {
            assert!(
                file.contains(&format!("{BIN_DIR}/{BINARY}-{}", p.name)),
                "{file}"
            );
        }
        assert!(file.starts_with("FROM configs AS final\n"));
        assert!(file.ends_with("ostree container commit\n"));
    }
}
