//! What each node distribution does with the kubelet's credential-provider
//! set-up: where the flags, config and bin dir live, what rewrites them and
//! when, which unit runs the kubelet, and where installing is impossible.
//!
//! Sources (checked with the distributions' own code where said; see also
//! `tests/fixtures/node/<distribution>/README.md`):
//! - EKS AL2023: awslabs/amazon-eks-ami `templates/al2023/runtime/rootfs/etc/systemd/system/kubelet.service`
//!   (`EnvironmentFile=/etc/eks/kubelet/environment`, `ExecStart=/usr/bin/kubelet $NODEADM_KUBELET_ARGS`),
//!   `nodeadm/internal/kubelet/environment.go` (one `NAME=value` line per variable, flags `--name=value`
//!   from a map, user flags last) and `image-credential-provider.go` (config `/etc/eks/image-credential-provider/config.json`,
//!   0644, bin dir its directory). Read at the commits named in the fixture README.
//! - AKS: Azure/AgentBaker `parts/linux/cloud-init/artifacts/` (`kubelet.service`, `cse_config.sh`), as
//!   summarised in the project's reference notes (nodes.md §3); not re-read here.
//! - GKE COS: kubernetes `cluster/gce/gci/configure-helper.sh` and GKE's `gke-internal-configure-helper.sh`
//!   (nodes.md §4); GKE's own path is unverified beyond those two sources.
//! - kubeadm: kubernetes/release `10-kubeadm.conf` (nodes.md §5).
//! - k3s / RKE2: k3s `pkg/cli/cmds/agent.go` defaults and `ImageCredProvAvailable` (nodes.md §6).
//! - Bottlerocket: nodes.md §2. Talos, OpenShift and MicroShift: read from
//!   their own source, cited in `talos.rs`, `openshift.rs` and
//!   docs/node-systems.md (MicroShift: openshift/microshift 8e16b12f).
//! - AKS Windows: Azure/AgentBaker @06836ee `staging/cse/windows/kubernetesfunc.ps1`
//!   (`Write-KubeClusterConfig`: `Kubernetes.Kubelet.ConfigArgs` and `Kubernetes.Source.Release` in
//!   `c:\k\kubeclusterconfig.json`), `provisioningscripts/kubeletstart.ps1` (rereads it at every
//!   start), `kubeletfunc.ps1` (`New-NSSMService`: the service `Kubelet`) and `configfunc.ps1`
//!   (`Config-CredentialProvider`); windows-and-more.md §2 and §10.
//! - EKS Windows: only an old `Start-EKSBootstrap.ps1` is public (windows-and-more.md §3): detected,
//!   and refused with the route.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use wicp_base::platform::Host;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Distro {
    EksAl2023,
    Aks,
    GkeCos,
    Kubeadm,
    K3s,
    Rke2,
    Bottlerocket,
    Talos,
    OpenShift,
    MicroShift,
    AksWindows,
    EksWindows,
    Unknown,
}

impl fmt::Display for Distro {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Distro::EksAl2023 => "EKS (Amazon Linux 2023, nodeadm)",
            Distro::Aks => "AKS (AgentBaker)",
            Distro::GkeCos => "GKE (Container-Optimized OS)",
            Distro::Kubeadm => "kubeadm (deb/rpm packages)",
            Distro::K3s => "k3s",
            Distro::Rke2 => "RKE2",
            Distro::Bottlerocket => "Bottlerocket",
            Distro::Talos => "Talos",
            Distro::OpenShift => "OpenShift (RHCOS)",
            Distro::MicroShift => "MicroShift",
            Distro::AksWindows => "AKS Windows (AgentBaker)",
            Distro::EksWindows => "EKS Windows",
            Distro::Unknown => "an unknown distribution",
        })
    }
}

/// EKS paths (amazon-eks-ami nodeadm).
pub(crate) const EKS_ENV_FILE: &str = "/etc/eks/kubelet/environment";
pub(crate) const EKS_ENV_VAR: &str = "NODEADM_KUBELET_ARGS";
pub(crate) const EKS_PROVIDER_DIR: &str = "/etc/eks/image-credential-provider";
pub(crate) const EKS_CONFIG: &str = "/etc/eks/image-credential-provider/config.json";
/// Our own complete config on EKS below kubelet 1.34 (or with --replace):
/// outside nodeadm's directory, so nodeadm never rewrites it.
pub(crate) const EKS_OWN_CONFIG: &str = "/etc/eks/wi-credential-provider/config.json";

/// k3s and RKE2 built-in defaults (k3s `pkg/cli/cmds/agent.go`).
pub(crate) const RANCHER_CONFIG: &str = "/var/lib/rancher/credentialprovider/config.yaml";
pub(crate) const RANCHER_BIN_DIR: &str = "/var/lib/rancher/credentialprovider/bin";

/// Our choice where the distribution has none (kubeadm): the paths
/// node-install/install.sh has always used.
pub(crate) const OWN_CONFIG: &str = "/etc/kubernetes/credential-provider.yaml";
pub(crate) const OWN_BIN_DIR: &str =
    "/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec";

/// MicroShift: its configuration directory (`pkg/config/files.go`) and the
/// unit its RPM installs (`packaging/rpm/microshift.spec`), which runs the
/// kubelet inside `microshift run`.
pub(crate) const MICROSHIFT_CONFIG_DIR: &str = "/etc/microshift";
pub(crate) const MICROSHIFT_UNIT: &str = "/usr/lib/systemd/system/microshift.service";

/// AKS Windows: the file `Write-KubeClusterConfig` writes once, and the
/// script the `Kubelet` service runs, which rereads it at every start.
pub(crate) const AKS_WINDOWS_CLUSTER_CONFIG: &str = r"c:\k\kubeclusterconfig.json";
pub(crate) const AKS_WINDOWS_KUBELET_START: &str = r"c:\k\kubeletstart.ps1";
/// The NSSM service that runs `kubeletstart.ps1` (`New-NSSMService`).
pub(crate) const AKS_WINDOWS_SERVICE: &str = "Kubelet";
/// Where EKS's Windows AMIs keep their bootstrap script.
pub(crate) const EKS_WINDOWS_DIR: &str = r"c:\Program Files\Amazon\EKS";

impl Distro {
    /// Recognises the distribution under `host`, with the evidence.
    pub(crate) fn detect(host: &Host) -> (Distro, String) {
        if wicp_base::platform::WINDOWS {
            return Self::detect_windows(host);
        }
        let read = |p: &str| {
            host.read_bytes(Path::new(p), 64 * 1024)
                .ok()
                .flatten()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        };
        let os_release = read("/etc/os-release")
            .or_else(|| read("/usr/lib/os-release"))
            .unwrap_or_default();
        let os_id = os_release
            .lines()
            .find_map(|l| l.strip_prefix("ID="))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_default();
        let exists = |p: &str| host.exists(Path::new(p));
        let checks: [(bool, Distro, String); 11] = [
            (
                os_id == "bottlerocket",
                Distro::Bottlerocket,
                "ID=bottlerocket in /etc/os-release".into(),
            ),
            (
                os_id == "talos",
                Distro::Talos,
                "ID=talos in /etc/os-release".into(),
            ),
            (
                os_id == "rhcos" || exists("/etc/machine-config-daemon"),
                Distro::OpenShift,
                "RHCOS (/etc/os-release or /etc/machine-config-daemon)".into(),
            ),
            (
                exists(MICROSHIFT_CONFIG_DIR) || exists(MICROSHIFT_UNIT),
                Distro::MicroShift,
                format!("{MICROSHIFT_CONFIG_DIR} or {MICROSHIFT_UNIT}"),
            ),
            (
                exists(EKS_ENV_FILE) || exists("/usr/bin/nodeadm"),
                Distro::EksAl2023,
                format!("{EKS_ENV_FILE} or /usr/bin/nodeadm"),
            ),
            (
                exists("/etc/default/kubeletconfig.json") || exists("/etc/kubernetes/azure.json"),
                Distro::Aks,
                "/etc/default/kubeletconfig.json or /etc/kubernetes/azure.json (AgentBaker)".into(),
            ),
            (
                os_id == "cos" || exists("/etc/srv/kubernetes") && exists("/home/kubernetes/bin"),
                Distro::GkeCos,
                "ID=cos, or /etc/srv/kubernetes and /home/kubernetes/bin (configure-helper.sh)"
                    .into(),
            ),
            (
                exists("/etc/rancher/rke2") || exists("/var/lib/rancher/rke2"),
                Distro::Rke2,
                "/etc/rancher/rke2 or /var/lib/rancher/rke2".into(),
            ),
            (
                exists("/etc/rancher/k3s") || exists("/var/lib/rancher/k3s"),
                Distro::K3s,
                "/etc/rancher/k3s or /var/lib/rancher/k3s".into(),
            ),
            (
                exists("/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf")
                    || exists("/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"),
                Distro::Kubeadm,
                "kubelet.service.d/10-kubeadm.conf".into(),
            ),
            (false, Distro::Unknown, String::new()),
        ];
        checks
            .into_iter()
            .find(|(hit, _, _)| *hit)
            .map(|(_, d, why)| (d, why))
            .unwrap_or((Distro::Unknown, "no known distribution marker".into()))
    }

    /// A Windows node: the marker files of the distributions we know.
    fn detect_windows(host: &Host) -> (Distro, String) {
        let exists = |p: &str| host.exists(Path::new(p));
        if exists(AKS_WINDOWS_CLUSTER_CONFIG) && exists(AKS_WINDOWS_KUBELET_START) {
            return (
                Distro::AksWindows,
                format!(
                    "{AKS_WINDOWS_CLUSTER_CONFIG} and {AKS_WINDOWS_KUBELET_START} (AgentBaker)"
                ),
            );
        }
        if exists(EKS_WINDOWS_DIR) {
            return (
                Distro::EksWindows,
                format!("{EKS_WINDOWS_DIR} (the EKS Windows AMI's bootstrap)"),
            );
        }
        (
            Distro::Unknown,
            "no known Windows distribution marker".into(),
        )
    }

    /// The Windows service that runs the kubelet, on a Windows node.
    pub(crate) fn windows_service(self) -> Option<&'static str> {
        match self {
            Distro::AksWindows => Some(AKS_WINDOWS_SERVICE),
            _ => None,
        }
    }

    /// k3s's or RKE2's own configuration file (its `--config` default).
    pub(crate) fn rancher_config_file(self) -> &'static str {
        match self {
            Distro::Rke2 => "/etc/rancher/rke2/config.yaml",
            _ => "/etc/rancher/k3s/config.yaml",
        }
    }

    /// The systemd unit to restart so the kubelet rereads its flags.
    pub(crate) fn units(self) -> &'static [&'static str] {
        match self {
            Distro::K3s => &["k3s.service", "k3s-agent.service"],
            Distro::Rke2 => &["rke2-server.service", "rke2-agent.service"],
            _ => &["kubelet.service"],
        }
    }

    /// Where installing cannot work, the supported route instead.
    pub(crate) fn refusal(self) -> Option<&'static str> {
        match self {
            Distro::Bottlerocket => Some(
                "Bottlerocket renders the kubelet's credential-provider config from its settings at every boot \
                 (settings.kubernetes.credential-providers, for the plugins it ships: ecr-credential-provider), \
                 without tokenAttributes, and its plugin directory (/usr/libexec/kubernetes/kubelet/plugins) \
                 is on read-only dm-verity /usr, so no plugin can be added (bottlerocket-os/bottlerocket#4165). \
                 Supported route: build a custom variant (twoliter, a kit packaging this binary into the plugin \
                 directory, and a template change adding tokenAttributes), or keep image pull secrets \
                 (docs/node-systems.md#bottlerocket)",
            ),
            Distro::Talos => Some(
                "Talos keeps the kubelet's credential-provider config in the machine configuration and runs plugins \
                 only from a system extension (/usr/local/lib/kubelet/credentialproviders, read-only). \
                 Supported route: add the release's Talos extension image (wi-credential-provider-<version>-talos-extension) \
                 to the machines' image, then patch their configuration with the output of \
                 `wi-credential-provider node render talos --talos-version <version> --config <file>` \
                 (docs/talos.md)",
            ),
            Distro::OpenShift => Some(
                "OpenShift's Machine Config Operator renders the kubelet's flags and its credential-provider \
                 config (/etc/kubernetes/credential-providers/), and a hand edit of a file it manages is drift; \
                 the plugin directory /usr/libexec/kubelet-image-credential-provider-plugins is on read-only \
                 ostree /usr. Supported route: `wi-credential-provider node render openshift --platform <aws|azure|gcp|other> \
                 --pool <pool> --image <the release's node image>@sha256:<digest> --push-spec <registry/image:tag> \
                 --push-secret <secret> --config <file>` prints a MachineConfig for the config and a MachineOSConfig \
                 that layers the binary into the pool's image; apply both with oc (docs/node-systems.md#openshift)",
            ),
            Distro::MicroShift => Some(
                "MicroShift runs the kubelet inside `microshift run` and no released MicroShift passes it \
                 credential-provider flags: the keys kubelet.imageCredentialProviderConfigPath and \
                 kubelet.imageCredentialProviderBinDir (openshift/enhancements#2089) arrive with \
                 openshift/microshift#7337, and a MicroShift without them ignores them. Supported route: once \
                 your MicroShift has them, install the package and set both keys in a drop-in under \
                 /etc/microshift/config.d/ (docs/node-systems.md#microshift)",
            ),
            Distro::EksWindows => Some(
                "the EKS Windows AMI's kubelet service and credential-provider paths are not public \
                 (its build is closed; the only public Start-EKSBootstrap.ps1 is from Kubernetes 1.14-1.16), \
                 so install does not guess where to write. Supported route: read the kubelet's \
                 --image-credential-provider-config and --image-credential-provider-bin-dir on the node \
                 (sc.exe qc kubelet) and install by hand (docs/windows.md#installing-by-hand)",
            ),
            _ => None,
        }
    }

    /// `Err` with the supported route where installing cannot work: before
    /// anything else is looked at, so the route is what the admin reads.
    pub(crate) fn refuse(self) -> wicp_base::error::Result<()> {
        match self.refusal() {
            Some(route) => Err(wicp_base::error::Error::config(format!(
                "cannot install on {self}; nothing was changed"
            ))
            .fix(route)),
            None => Ok(()),
        }
    }

    /// What rewrites the credential-provider files on this distribution.
    pub(crate) fn rewritten_by(self) -> Option<&'static str> {
        match self {
            Distro::EksAl2023 => Some(
                "nodeadm rewrites /etc/eks/image-credential-provider/config.json and /etc/eks/kubelet/environment at every boot; \
                 the flags survive through a NodeConfig drop-in in /etc/eks/nodeadm.d/",
            ),
            Distro::Aks => Some(
                "AKS's CSE rewrites /etc/default/kubelet and the credential-provider config on provisioning, reimage and node-image upgrade \
                 (not at a plain reboot): the DaemonSet re-applies at every pod start",
            ),
            Distro::GkeCos => Some(
                "configure-helper.sh rewrites /etc (a tmpfs on COS) at every boot: the DaemonSet re-applies and restarts the kubelet after each reboot",
            ),
            Distro::Kubeadm => Some(
                "kubeadm rewrites only /var/lib/kubelet/kubeadm-flags.env; /etc/default/kubelet (or /etc/sysconfig/kubelet) is yours and survives upgrades",
            ),
            Distro::AksWindows => Some(
                "AKS's Windows CSE rewrites c:\\k\\credential-provider-config.yaml and kubeclusterconfig.json on provisioning, \
                 reimage and node-image upgrade (not at a reboot or a kubelet restart): the DaemonSet re-applies at every pod start",
            ),
            Distro::K3s | Distro::Rke2 => Some(
                "nothing rewrites /var/lib/rancher/credentialprovider/; k3s/RKE2 pass the flags only when the config is a file and the bin dir exists",
            ),
            _ => None,
        }
    }
}
