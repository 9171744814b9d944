//! `node render talos`: the machine-configuration patch that turns on our
//! provider entries on a Talos node, whose kubelet configuration lives in
//! the machine configuration and whose plugins come from a system
//! extension. Nothing on a Talos node can be installed by hand.
//!
//! Sources (siderolabs/talos, read at the tags named):
//! - `pkg/machinery/constants/constants.go` (v1.14.0-rc.1, 7a84d742):
//!   `KubeletCredentialProviderBinDir = "/usr/local/lib/kubelet/credentialproviders"`
//!   and the config written to `/etc/kubernetes/kubelet-credentialproviderconfig.yaml`.
//! - `pkg/machinery/config/types/v1alpha1/v1alpha1_types.go`: the field
//!   `machine.kubelet.credentialProviderConfig` (an unstructured
//!   CredentialProviderConfig), in every release from v1.6; deprecated in
//!   v1.14 with the rest of `.machine.kubelet` (`hack/release.toml`).
//! - `pkg/machinery/config/types/k8s/credential_provider.go` (v1.14): the
//!   `KubeCredentialProviderConfig` document (`apiVersion: v1alpha1`,
//!   `configuration:` the CredentialProviderConfig), refused beside any
//!   legacy `.machine.kubelet` ("cannot use KubeCredentialProviderConfig
//!   with legacy kubelet configuration").
//! - `pkg/machinery/config/schemas/config.schema.json` at v1.11.0
//!   (d9d89a3a), v1.12.0 (ac91ade2), v1.13.0 (b9e9c657) and v1.14.0-rc.1:
//!   the published schemas the tests validate the patch against.
//! - `DefaultKubernetesVersion`: 1.34.0 in Talos v1.11, 1.35.0 in v1.12,
//!   1.36.0 in v1.13, 1.37 in v1.14.

use std::fmt::Write as _;

use yaml_serde::{Mapping, Value};

use crate::commands::check_config::isolation::KubeletFacts;
use crate::options::BINARY;
use wicp_base::error::{Error, Result};
use wicp_kubelet::config::configuration::Version;
use wicp_kubelet::config::merge;
use wicp_net::inputs::Env;

/// Where Talos's kubelet finds plugins: the extension's directory.
pub(crate) const BIN_DIR: &str = "/usr/local/lib/kubelet/credentialproviders";

/// The oldest Talos whose default Kubernetes (1.34) passes service
/// account tokens to plugins with KEP-4412 beta on by default.
const OLDEST: TalosVersion = TalosVersion(1, 11);
/// The first Talos with the `KubeCredentialProviderConfig` document.
const DOCUMENT_FROM: TalosVersion = TalosVersion(1, 14);

#[derive(clap::Args, Clone, Debug)]
pub(crate) struct Args {
    /// The Talos version of the machines (v1.11 or later): v1.14 and later
    /// get a KubeCredentialProviderConfig document, earlier ones the
    /// machine.kubelet.credentialProviderConfig field.
    #[arg(long, value_name = "VERSION", value_parser = parse_talos)]
    pub(crate) talos_version: TalosVersion,

    /// On Talos v1.14 or later, still render the deprecated
    /// machine.kubelet.credentialProviderConfig field: Talos refuses the
    /// new document beside any other .machine.kubelet setting.
    #[arg(long)]
    pub(crate) machine_kubelet: bool,

    #[command(flatten)]
    pub(crate) entries: crate::commands::node::Entries,

    /// The cluster's Kubernetes version, checked against the entries
    /// (default: the one this Talos version installs by default).
    #[arg(long, value_name = "VERSION", value_parser = crate::commands::node::parse_version)]
    pub(crate) kubelet_version: Option<Version>,
}

/// A Talos release, major and minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct TalosVersion(u64, u64);

fn parse_talos(text: &str) -> std::result::Result<TalosVersion, String> {
    let bare = text.strip_prefix('v').unwrap_or(text);
    let mut parts = bare.split('.');
    let number = |p: Option<&str>| p.and_then(|n| n.parse::<u64>().ok());
    let (Some(major), Some(minor)) = (number(parts.next()), number(parts.next())) else {
        return Err(format!("{text:?} is not a Talos version such as v1.13"));
    };
    if TalosVersion(major, minor) < OLDEST {
        return Err(format!(
            "Talos {text} is too old: its Kubernetes does not pass service account tokens to \
             plugins; v1.11 (Kubernetes 1.34) is the oldest"
        ));
    }
    Ok(TalosVersion(major, minor))
}

impl TalosVersion {
    /// The Kubernetes version this Talos installs unless told otherwise
    /// (`DefaultKubernetesVersion`): 1.34 for v1.11, one more per minor.
    fn default_kubernetes(self) -> Option<Version> {
        let minor = 34 + self.1.checked_sub(OLDEST.1)?;
        Version::parse(&format!("v1.{minor}.0"))
    }
}

/// The patch for `args`, after the kubelet's own checks of its
/// CredentialProviderConfig pass with the extension's names.
pub(crate) fn render(args: &Args, env: &Env) -> Result<String> {
    let entries = args.entries.read()?;
    let mut config = merge::empty_document();
    if let Some(Value::Sequence(list)) = config.get_mut("providers") {
        list.extend(entries.iter().cloned());
    }
    check(&config, &entries, args, env)?;
    let document = args.talos_version >= DOCUMENT_FROM && !args.machine_kubelet;
    let patch = if document {
        let mut doc = Mapping::new();
        doc.insert("apiVersion".into(), "v1alpha1".into());
        doc.insert("kind".into(), "KubeCredentialProviderConfig".into());
        doc.insert("configuration".into(), config);
        Value::Mapping(doc)
    } else {
        let mut kubelet = Mapping::new();
        kubelet.insert("credentialProviderConfig".into(), config);
        let mut machine = Mapping::new();
        machine.insert("kubelet".into(), Value::Mapping(kubelet));
        let mut doc = Mapping::new();
        doc.insert("machine".into(), Value::Mapping(machine));
        Value::Mapping(doc)
    };
    let body = yaml_serde::to_string(&patch)
        .map_err(|e| Error::config(format!("cannot write YAML: {e}")))?;
    let TalosVersion(major, minor) = args.talos_version;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# Talos v{major}.{minor} machine-configuration patch: the kubelet runs {BINARY} from the \
         system extension\n# (its image: {BINARY}-<version>-talos-extension.oci.tar) in {BIN_DIR}."
    );
    let _ = writeln!(
        text,
        "# Apply with: talosctl patch machineconfig --nodes <nodes> --patch @<this file>"
    );
    let _ = writeln!(
        text,
        "# The kubelet also needs RBAC for the token audiences: {BINARY} node render rbac (the same entry flags) | kubectl apply -f -"
    );
    if document {
        text.push_str("---\n");
    }
    text.push_str(&body);
    Ok(text)
}

/// The kubelet's checks and ours (check-config) of the config as Talos
/// will write it, with a bin dir holding what the extension holds: an
/// entry naming anything else is refused first.
fn check(config: &Value, entries: &[Value], args: &Args, env: &Env) -> Result<()> {
    let names = crate::version::plugin_names();
    if let Some(name) = entries
        .iter()
        .map(merge::entry_name)
        .find(|name| !names.iter().any(|n| n == name))
    {
        return Err(Error::config(format!(
            "provider entry {name:?} names no binary in the Talos extension, which holds {}",
            names.join(", ")
        ))
        .fix(format!("name the entry {BINARY}-<provider>")));
    }
    let facts = KubeletFacts {
        env: env.clone(),
        config: None,
        version: args
            .kubelet_version
            .or_else(|| args.talos_version.default_kubernetes()),
    };
    crate::commands::node::plan::stage::check_rendered(
        &merge::render(config, merge::Format::Yaml)?,
        &facts,
        "the patch's CredentialProviderConfig",
        "fix the entries (check-config shows them in full)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_before_v1_11_are_refused_and_v_is_optional() {
        assert_eq!(parse_talos("v1.13.2"), Ok(TalosVersion(1, 13)));
        assert_eq!(parse_talos("1.14"), Ok(TalosVersion(1, 14)));
        assert!(parse_talos("v1.10").unwrap_err().contains("too old"));
        assert!(parse_talos("latest").unwrap_err().contains("v1.13"));
    }

    #[test]
    fn the_default_kubernetes_follows_the_talos_minor() {
        assert_eq!(
            TalosVersion(1, 11).default_kubernetes(),
            Version::parse("v1.34.0")
        );
        assert_eq!(
            TalosVersion(1, 13).default_kubernetes(),
            Version::parse("v1.36.0")
        );
    }

    #[test]
    fn the_plugin_names_hold_one_per_provider() {
        let names = crate::version::plugin_names();
        assert_eq!(names[0], BINARY);
        for p in wicp_providers::ALL {
            assert!(names.contains(&format!("{BINARY}-{}", p.name)), "{names:?}");
        }
    }
}
