//! The plan of an install: which entries are ours, where the kubelet on
//! this distribution reads its config and runs plugins from, and which
//! files change (config, environment file, own drop-ins). Nothing here
//! writes; every path is looked at inside the root.

pub(crate) mod stage;

use std::path::{Path, PathBuf};

use serde::Serialize;
use yaml_serde::Value;

use crate::commands::node::discover::distro::{self, Distro};
use crate::commands::node::discover::systemd;
use crate::commands::node::discover::{self, BIN_DIR_FLAG, CONFIG_FLAG, Discovery};
use wicp_base::error::{Error, Result};
use wicp_base::platform::Host;
use wicp_kubelet::config::merge::{self, Replace};
use wicp_providers::fallback::Fallback;

/// The ready entry for each provider: the one in config-examples.
const AWS: &str =
    include_str!("../../../../config-examples/aws-web-identity/credential-provider-config.yaml");
const AZURE: &str =
    include_str!("../../../../config-examples/azure/credential-provider-config.yaml");
const GCP: &str =
    include_str!("../../../../config-examples/gcp-federation/credential-provider-config.yaml");

/// Our own file in a config directory.
const DIR_FILE: &str = "wi-credential-provider";

/// The NodeConfig drop-in that keeps our flag across nodeadm's rewrites.
const NODEADM_DROP_IN: &str = "/etc/eks/nodeadm.d/90-wi-credential-provider.yaml";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ReadyProvider {
    Aws,
    Azure,
    Gcp,
}

/// Where our entries go.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub(crate) enum ConfigTarget {
    /// Merge into `path`, starting from `base` (the same file, or on EKS
    /// nodeadm's config.json copied into our own file).
    File { path: PathBuf, base: PathBuf },
    /// A config directory: our own file in it.
    Directory { dir: PathBuf, path: PathBuf },
}

impl ConfigTarget {
    pub(crate) fn path(&self) -> &Path {
        match self {
            ConfigTarget::File { path, .. } | ConfigTarget::Directory { path, .. } => path,
        }
    }
}

/// A flag added to an environment file's variable.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct FlagEdit {
    pub(crate) file: PathBuf,
    pub(crate) var: String,
    pub(crate) flags: Vec<(String, String)>,
    /// The variable's value from elsewhere (a drop-in's `Environment=`),
    /// kept when the file gets the variable for the first time.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) inherited: String,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Plan {
    pub(crate) bin_dir: PathBuf,
    pub(crate) config: ConfigTarget,
    pub(crate) flag_edit: Option<FlagEdit>,
    /// An own file (host path, bytes) such as the nodeadm drop-in.
    #[serde(skip)]
    pub(crate) own_files: Vec<(PathBuf, Vec<u8>)>,
    pub(crate) own_file_paths: Vec<PathBuf>,
    pub(crate) notes: Vec<String>,
}

/// AKS's cloud config, which the stock acr-credential-provider entry
/// passes as its argument and `--fallback node` reads the kubelet identity
/// from.
/// On AKS Windows it is `c:\k\azure.json` (AgentBaker `configfunc.ps1`).
const AKS_CLOUD_CONFIG: &str = if wicp_base::platform::WINDOWS {
    r"c:\k\azure.json"
} else {
    "/etc/kubernetes/azure.json"
};

/// Turns a ready entry into one that replaces the stock cloud plugin: the
/// plugin gets `--fallback node`, the kubelet runs it for pods without a
/// service account too (`requireServiceAccount: false`), azure reads the
/// kubelet identity from AKS's cloud config, and gcp is passed GKE's
/// opt-in annotation.
fn with_node_fallback(entry: &mut Value, provider: ReadyProvider) {
    let Some(map) = entry.as_mapping_mut() else {
        return;
    };
    let mut args = vec!["--fallback", "node"];
    if provider == ReadyProvider::Azure {
        args.extend(["--azure-cloud-config", AKS_CLOUD_CONFIG]);
    }
    let list = map
        .entry(Value::from("args"))
        .or_insert_with(|| Value::Sequence(Vec::new()));
    if let Some(seq) = list.as_sequence_mut() {
        seq.extend(args.into_iter().map(Value::from));
    }
    if let Some(attrs) = map
        .get_mut("tokenAttributes")
        .and_then(Value::as_mapping_mut)
    {
        attrs.insert(Value::from("requireServiceAccount"), Value::Bool(false));
        if provider == ReadyProvider::Gcp {
            let keys = attrs
                .entry(Value::from("optionalServiceAccountAnnotationKeys"))
                .or_insert_with(|| Value::Sequence(Vec::new()));
            if let Some(seq) = keys.as_sequence_mut() {
                seq.push(Value::from(
                    wicp_providers::gcp::ENABLE_IMAGE_PULL_ANNOTATION,
                ));
            }
        }
    }
}

/// The stock plugin's identity-binding flags and ours (cloud-provider-azure
/// #9907; AgentBaker's `writeCredentialProviderConfig` passes them with
/// `SERVICE_ACCOUNT_IMAGE_PULL_ENABLED`).
const IDENTITY_BINDING_FLAGS: [(&str, &str); 4] = [
    ("--ib-sni-name=", "--azure-identity-binding-sni="),
    ("--ib-apiserver-ip=", "--azure-identity-binding-address="),
    (
        "--ib-default-client-id=",
        "--azure-identity-binding-client-id=",
    ),
    ("--ib-default-tenant-id=", "--azure-tenant-id="),
];

/// On an AKS node whose stock `acr-credential-provider` entry uses AKS
/// identity bindings (`--ib-sni-name`, audience `api://AKSIdentityBinding`),
/// our azure entries take the same endpoint with our flags and audience,
/// so that replacing the stock entry keeps pods' pulls working the way the
/// cluster is set up (their identities have no federated credential of
/// their own for this cluster). Returns what was carried, for the report.
pub(crate) fn carry_identity_binding(existing: &Value, ours: &mut [Value]) -> Option<String> {
    let (args, from_stock) = binding_args(existing, ours)?;
    let mut carried = Vec::new();
    for entry in ours.iter_mut() {
        let name = merge::entry_name(entry).to_ascii_lowercase();
        if name
            .trim_end_matches(".exe")
            .ends_with("wi-credential-provider-azure")
            && with_binding_args(entry, &args)
        {
            carried.push(name);
        }
    }
    (from_stock && !carried.is_empty()).then(|| {
        format!(
            "acr-credential-provider uses AKS identity bindings: {} use the same endpoint ({}) and audience {}",
            carried.join(", "),
            args.join(" "),
            wicp_providers::azure::binding::AUDIENCE
        )
    })
}

/// The identity-binding args our azure entries should carry, and whether
/// they come from the stock entry (translated) rather than from what an
/// earlier run gave our own entry (a later run, after `--replace` removed
/// the stock one).
fn binding_args(existing: &Value, ours: &[Value]) -> Option<(Vec<String>, bool)> {
    let entries = merge::providers(existing);
    let args_of = |entry: &Value| -> Vec<String> {
        entry
            .get("args")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let has_sni = |args: &[String]| {
        args.iter()
            .any(|a| a.starts_with("--azure-identity-binding-sni="))
    };
    let stock: Vec<String> = entries
        .iter()
        .filter(|e| merge::same_provider(merge::entry_name(e), "acr-credential-provider"))
        .flat_map(args_of)
        .filter_map(|arg| {
            IDENTITY_BINDING_FLAGS
                .iter()
                .find_map(|(theirs, mine)| arg.strip_prefix(theirs).map(|v| format!("{mine}{v}")))
        })
        .collect();
    if has_sni(&stock) {
        return Some((stock, true));
    }
    let names: Vec<&str> = ours.iter().map(merge::entry_name).collect();
    let own = entries
        .iter()
        .filter(|e| {
            names
                .iter()
                .any(|n| merge::same_provider(n, merge::entry_name(e)))
        })
        .map(args_of)
        .find(|a| has_sni(a))?
        .into_iter()
        .filter(|a| {
            IDENTITY_BINDING_FLAGS
                .iter()
                .any(|(_, mine)| a.starts_with(mine))
        })
        .collect();
    Some((own, false))
}

/// Adds `args` and the binding's audience to `entry`, unless it already
/// names a binding; whether it did.
fn with_binding_args(entry: &mut Value, args: &[String]) -> bool {
    let Some(map) = entry.as_mapping_mut() else {
        return false;
    };
    let list = map
        .entry(Value::from("args"))
        .or_insert_with(|| Value::Sequence(Vec::new()));
    let Some(seq) = list.as_sequence_mut() else {
        return false;
    };
    if seq
        .iter()
        .filter_map(Value::as_str)
        .any(|a| a.starts_with("--azure-identity-binding-sni"))
    {
        return false;
    }
    seq.extend(args.iter().cloned().map(Value::from));
    if let Some(attrs) = map
        .get_mut("tokenAttributes")
        .and_then(Value::as_mapping_mut)
    {
        attrs.insert(
            Value::from("serviceAccountTokenAudience"),
            Value::from(wicp_providers::azure::binding::AUDIENCE),
        );
    }
    true
}

/// Names a Windows entry with its `.exe`: a kubelet before 1.30 finds a
/// plugin only by its exact file name but runs `name.exe`, so the name
/// with the extension is the one that works on every version (kube-up's
/// GCE Windows names `auth-provider-gcp.exe` the same way). Install puts
/// a copy of the binary under each such name.
fn with_exe_name(entry: &mut Value) {
    let name = merge::entry_name(entry);
    if name.is_empty() || name.to_ascii_lowercase().ends_with(".exe") {
        return;
    }
    let named = wicp_base::platform::executable_name(name);
    if let Some(map) = entry.as_mapping_mut() {
        map.insert(Value::from("name"), Value::from(named));
    }
}

/// Our entries from --provider (with `--fallback node`, each replacing the
/// stock cloud plugin) and --config.
pub(crate) fn our_entries(
    providers: &[ReadyProvider],
    fallback: Fallback,
    config: Option<&Path>,
) -> Result<Vec<Value>> {
    let mut entries = Vec::new();
    for p in providers {
        let text = match p {
            ReadyProvider::Aws => AWS,
            ReadyProvider::Azure => AZURE,
            ReadyProvider::Gcp => GCP,
        };
        let doc = merge::parse(text.as_bytes(), Path::new("config-examples"))?;
        for mut entry in merge::providers(&doc) {
            if fallback == Fallback::Node {
                with_node_fallback(&mut entry, *p);
            }
            entries.push(entry);
        }
    }
    if let Some(file) = config {
        let bytes = wicp_base::yaml::read(file)
            .map_err(|e| Error::config(format!("cannot read --config {}: {e}", file.display())))?;
        let doc = merge::parse(&bytes, file)?;
        let list = merge::providers(&doc);
        if list.is_empty() {
            return Err(Error::config(format!(
                "--config {} has no providers",
                file.display()
            )));
        }
        entries.extend(list);
    }
    if entries.is_empty() {
        return Err(Error::config("nothing to install")
            .fix("pass --provider aws|azure|gcp or --config FILE"));
    }
    if wicp_base::platform::WINDOWS {
        entries.iter_mut().for_each(with_exe_name);
    }
    let mut seen = std::collections::BTreeSet::new();
    for e in &entries {
        let name = merge::entry_name(e);
        if !seen.insert(name.to_string()) {
            return Err(Error::config(format!(
                "the provider {name:?} is given twice"
            )));
        }
    }
    Ok(entries)
}

/// What to add where, when discovery found nothing to merge into.
fn nothing_found(d: &Discovery) -> Error {
    let how = match d.distro {
        Distro::Kubeadm | Distro::Unknown => format!(
            "add `--{CONFIG_FLAG}={} --{BIN_DIR_FLAG}={}` to KUBELET_EXTRA_ARGS in /etc/default/kubelet (deb) or /etc/sysconfig/kubelet (rpm), \
             or pass --kubelet-credential-config and --kubelet-bin-dir",
            distro::OWN_CONFIG,
            distro::OWN_BIN_DIR
        ),
        Distro::EksAl2023 => format!(
            "nodeadm should have set --{CONFIG_FLAG}={}: check /etc/eks/kubelet/environment",
            distro::EKS_CONFIG
        ),
        Distro::Aks => "AKS sets the flags in KUBELET_FLAGS in /etc/default/kubelet when the cluster enables credential providers".into(),
        Distro::GkeCos => "GKE sets the flags in KUBELET_OPTS in /etc/default/kubelet".into(),
        Distro::AksWindows => match &d.flags_unreadable {
            Some(why) => format!("{why}: the kubelet's flags are there; look at the file on the node"),
            None => format!(
                "AKS puts both flags in Kubernetes.Kubelet.ConfigArgs of {} from Kubernetes 1.30 (1.29 optionally): upgrade the node pool",
                distro::AKS_WINDOWS_CLUSTER_CONFIG
            ),
        },
        _ => "pass --kubelet-credential-config and --kubelet-bin-dir".into(),
    };
    let looked = match d.distro {
        Distro::AksWindows => distro::AKS_WINDOWS_CLUSTER_CONFIG,
        _ => "the kubelet process, the systemd unit and the distribution's defaults",
    };
    Error::config(format!(
        "found no kubelet credential-provider set-up on {} (looked at {looked}); nothing was changed",
        d.distro
    ))
    .fix(how)
}

/// The env file and variable a kubeadm node's user flags go in: the
/// environment file that sets `KUBELET_EXTRA_ARGS` now (the last one to,
/// as systemd applies them), else `/etc/default/kubelet` (deb) or
/// `/etc/sysconfig/kubelet` (rpm) from the unit's `EnvironmentFile=`.
fn kubeadm_extra_args(host: &Host, d: &Discovery) -> Result<Option<FlagEdit>> {
    let Some(unit) = d.unit.as_ref() else {
        return Ok(None);
    };
    let var = "KUBELET_EXTRA_ARGS";
    let current = unit.vars.get(var);
    let file = current
        .map(|v| v.file.clone())
        .filter(|f| unit.env_files.contains(f))
        .or_else(|| {
            unit.env_files
                .iter()
                .find(|f| f.as_path() == Path::new("/etc/default/kubelet") && host.exists(f))
                .or_else(|| {
                    unit.env_files
                        .iter()
                        .find(|f| f.as_path() == Path::new("/etc/sysconfig/kubelet"))
                })
                .or_else(|| {
                    unit.env_files
                        .iter()
                        .find(|f| f.as_path() == Path::new("/etc/default/kubelet"))
                })
                .cloned()
        });
    let Some(file) = file else {
        return Ok(None);
    };
    if unit.not_utf8.contains(&file) {
        return Err(Error::config(format!(
            "{} is not valid UTF-8: systemd ignores its bad lines, and install does not edit it",
            file.display()
        ))
        .fix("make the file valid UTF-8 (systemd logs which line it ignores), then run again"));
    }
    // A value set by Environment= in a drop-in is replaced, not extended,
    // by the file's: carry it over.
    let inherited = current
        .filter(|v| v.file != file)
        .map(|v| v.value.clone())
        .unwrap_or_default();
    Ok(Some(FlagEdit {
        file,
        var: var.into(),
        flags: Vec::new(),
        inherited,
    }))
}

pub(crate) fn plan(host: &Host, d: &Discovery, replace: &[Replace]) -> Result<Plan> {
    d.distro.refuse()?;
    let mut notes = Vec::new();
    if let Some(r) = d.distro.rewritten_by() {
        notes.push(r.to_string());
    }
    match d.distro {
        Distro::EksAl2023 => plan_eks(host, d, replace, notes),
        Distro::K3s | Distro::Rke2 => plan_rancher(host, d, notes),
        _ => plan_kubelet_flags(host, d, replace, notes),
    }
}

/// EKS AL2023: nodeadm rewrites its config at every boot, so ours goes
/// beside it (a config directory from kubelet 1.34, else our own complete
/// file) and a NodeConfig drop-in keeps the kubelet's flag.
fn plan_eks(
    host: &Host,
    d: &Discovery,
    replace: &[Replace],
    mut notes: Vec<String>,
) -> Result<Plan> {
    let bin_dir = d
        .bin_dir
        .as_ref()
        .map_or(PathBuf::from(distro::EKS_PROVIDER_DIR), |f| f.value.clone());
    let directory_ok = d
        .version
        .is_some_and(|v| v >= wicp_kubelet::config::configuration::DIRECTORY_CONFIG_SINCE)
        && replace.is_empty();
    let nodeadm_config = PathBuf::from(distro::EKS_CONFIG);
    let (config, flag_value) = if directory_ok {
        let dir = PathBuf::from(distro::EKS_PROVIDER_DIR);
        notes.push(format!(
            "kubelet {} reads a config directory: the kubelet reads nodeadm's config.json and our own file in {}",
            d.version.map(|v| v.to_string()).unwrap_or_default(),
            dir.display()
        ));
        (
            ConfigTarget::Directory {
                path: dir.join(format!("{DIR_FILE}.json")),
                dir: dir.clone(),
            },
            dir,
        )
    } else {
        let own = PathBuf::from(distro::EKS_OWN_CONFIG);
        notes.push(format!(
            "our own complete config {} (nodeadm's entries copied in{}), outside the file nodeadm rewrites at boot",
            own.display(),
            if replace.is_empty() { "" } else { ", --replace applied" }
        ));
        let base = if host.exists(&own) {
            own.clone()
        } else {
            nodeadm_config
        };
        (
            ConfigTarget::File {
                path: own.clone(),
                base,
            },
            own,
        )
    };
    let flag = format!("--{CONFIG_FLAG}={}", flag_value.display());
    let drop_in = format!(
        "# Written by `wi-credential-provider node install`: nodeadm merges this\n\
         # NodeConfig over the user data at every boot and appends these flags\n\
         # last, so the kubelet keeps reading this plugin's config.\n\
         apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    flags:\n      - {flag}\n"
    );
    Ok(Plan {
        bin_dir,
        config,
        flag_edit: Some(FlagEdit {
            file: PathBuf::from(distro::EKS_ENV_FILE),
            var: distro::EKS_ENV_VAR.into(),
            flags: vec![(CONFIG_FLAG.into(), flag_value.display().to_string())],
            inherited: String::new(),
        }),
        own_files: vec![(PathBuf::from(NODEADM_DROP_IN), drop_in.into_bytes())],
        own_file_paths: vec![PathBuf::from(NODEADM_DROP_IN)],
        notes,
    })
}

/// k3s and RKE2: their own config file and bin dir, which they pass to the
/// kubelet when both exist.
fn plan_rancher(host: &Host, d: &Discovery, notes: Vec<String>) -> Result<Plan> {
    let found_config = d.credential_config.as_ref().map(|f| f.value.clone());
    let config = found_config.unwrap_or_else(|| PathBuf::from(distro::RANCHER_CONFIG));
    if host.is_dir(&config) {
        return Err(Error::config(format!(
            "{} is a directory: k3s/RKE2 pass the credential-provider flags only when the config is a file, so the kubelet would ignore it",
            config.display()
        ))
        .fix("replace the directory by one config file, or pass the flag with kubelet-arg (kubelet 1.34+)"));
    }
    let bin_dir = d
        .bin_dir
        .as_ref()
        .map_or(PathBuf::from(distro::RANCHER_BIN_DIR), |f| f.value.clone());
    Ok(Plan {
        bin_dir,
        config: ConfigTarget::File {
            path: config.clone(),
            base: config,
        },
        flag_edit: None,
        own_files: Vec::new(),
        own_file_paths: Vec::new(),
        notes,
    })
}

/// Any other kubelet: the config and bin dir its flags name, or, on
/// kubeadm without them, our defaults and the flags added to its
/// environment file.
fn plan_kubelet_flags(
    host: &Host,
    d: &Discovery,
    replace: &[Replace],
    mut notes: Vec<String>,
) -> Result<Plan> {
    let found_config = d.credential_config.as_ref().map(|f| f.value.clone());
    let (config, bin_dir, flag_edit) = match (found_config, d.bin_dir.as_ref()) {
        (Some(c), Some(b)) => (c, b.value.clone(), None),
        (Some(_), None) | (None, Some(_)) => {
            return Err(Error::config(format!(
                "the kubelet has only one of --{CONFIG_FLAG} and --{BIN_DIR_FLAG}; it needs both"
            ))
            .fix("pass the other with --kubelet-credential-config or --kubelet-bin-dir"));
        }
        (None, None) if d.distro == Distro::Kubeadm => {
            let Some(mut edit) = kubeadm_extra_args(host, d)? else {
                return Err(nothing_found(d));
            };
            edit.flags = vec![
                (CONFIG_FLAG.into(), distro::OWN_CONFIG.into()),
                (BIN_DIR_FLAG.into(), distro::OWN_BIN_DIR.into()),
            ];
            notes.push(format!(
                "the kubelet had no credential-provider flags: adding them to {} in {}",
                edit.var,
                edit.file.display()
            ));
            (
                PathBuf::from(distro::OWN_CONFIG),
                PathBuf::from(distro::OWN_BIN_DIR),
                Some(edit),
            )
        }
        (None, None) => return Err(nothing_found(d)),
    };
    let target = if host.is_dir(&config) {
        if !replace.is_empty() {
            return Err(Error::config(
                "--replace cannot change the other files of a config directory",
            )
            .fix("edit or remove the other provider's file yourself"));
        }
        ConfigTarget::Directory {
            path: config.join(format!("{DIR_FILE}.yaml")),
            dir: config,
        }
    } else {
        ConfigTarget::File {
            path: config.clone(),
            base: config,
        }
    };
    Ok(Plan {
        bin_dir,
        config: target,
        flag_edit,
        own_files: Vec::new(),
        own_file_paths: Vec::new(),
        notes,
    })
}

/// The new bytes of an environment file with `flags` appended to `var`,
/// and the exact text inserted; `None` when the flags already hold.
pub(crate) fn append_flags(
    text: &str,
    var: &str,
    flags: &[(String, String)],
    inherited: &str,
) -> Option<(String, String)> {
    let lines: Vec<&str> = text.split('\n').collect();
    let index = lines
        .iter()
        .rposition(|l| l.trim_start().starts_with(&format!("{var}=")));
    let current = match index {
        Some(_) => systemd::parse_env_file(text)
            .into_iter()
            .rev()
            .find(|(k, _)| k == var)
            .map(|(_, v)| v)
            .unwrap_or_default(),
        None => inherited.to_string(),
    };
    let have = discover::parse_flags(&systemd::split_words(&current));
    let missing: Vec<&(String, String)> = flags
        .iter()
        .filter(|(f, v)| have.get(f) != Some(v))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let words = missing
        .iter()
        .map(|(f, v)| format!("--{f}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    match index {
        Some(first) => {
            // The assignment's last physical line: systemd joins lines
            // ending in a backslash.
            let mut i = first;
            while lines.get(i).is_some_and(|l| l.trim_end().ends_with('\\')) && i + 1 < lines.len()
            {
                i += 1;
            }
            let line = lines.get(i).copied().unwrap_or("");
            let trimmed = line.trim_end();
            let (new_line, inserted) = if let Some(body) = trimmed.strip_suffix('"') {
                let sep = if body.ends_with('=') || body.ends_with('"') {
                    ""
                } else {
                    " "
                };
                let ins = format!("{sep}{words}");
                (format!("{body}{ins}\""), ins)
            } else {
                let sep = if trimmed.ends_with('=') { "" } else { " " };
                let ins = format!("{sep}{words}");
                (format!("{trimmed}{ins}"), ins)
            };
            let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
            if let Some(slot) = out.get_mut(i) {
                *slot = new_line;
            }
            Some((out.join("\n"), inserted))
        }
        None => {
            let sep = if text.is_empty() || text.ends_with('\n') {
                ""
            } else {
                "\n"
            };
            let value = if inherited.is_empty() {
                words
            } else {
                format!("{inherited} {words}")
            };
            let escaped: String = value
                .chars()
                .flat_map(|c| {
                    let escape = matches!(c, '"' | '\\' | '`' | '$');
                    escape.then_some('\\').into_iter().chain(std::iter::once(c))
                })
                .collect();
            let ins = format!("{sep}{var}=\"{escaped}\"\n");
            Some((format!("{text}{ins}"), ins))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(entries: &'a [Value], name: &str) -> &'a Value {
        entries
            .iter()
            .find(|e| merge::entry_name(e) == name)
            .unwrap()
    }

    /// The ready entries are the clouds': the providers `auto` picks by
    /// registry host, whose node identity `--fallback node` can use.
    #[test]
    fn the_ready_providers_are_the_clouds() {
        use clap::ValueEnum;
        let ready: Vec<String> = ReadyProvider::value_variants()
            .iter()
            .filter_map(|p| p.to_possible_value())
            .map(|v| v.get_name().to_string())
            .collect();
        let clouds: Vec<String> = wicp_providers::ALL
            .iter()
            .filter(|p| p.auto.is_some() && p.node_identity.is_some())
            .map(|p| p.name.to_string())
            .collect();
        assert_eq!(ready, clouds);
    }

    #[test]
    fn fallback_node_makes_each_ready_entry_a_replacement_for_the_stock_plugin() {
        let all = [ReadyProvider::Aws, ReadyProvider::Azure, ReadyProvider::Gcp];
        let plain = our_entries(&all, Fallback::None, None).unwrap();
        let node = our_entries(&all, Fallback::Node, None).unwrap();
        let text = |v: &Value| yaml_serde::to_string(v).unwrap();
        for name in [
            "wi-credential-provider-aws",
            "wi-credential-provider-azure",
            "wi-credential-provider-gcp",
        ] {
            let (before, after) = (text(entry(&plain, name)), text(entry(&node, name)));
            assert!(!before.contains("--fallback"), "{before}");
            let args = entry(&node, name)
                .get("args")
                .unwrap()
                .as_sequence()
                .unwrap();
            let args: Vec<&str> = args.iter().filter_map(Value::as_str).collect();
            assert!(
                args.windows(2).any(|w| w == ["--fallback", "node"]),
                "{after}"
            );
            assert!(after.contains("requireServiceAccount: false"), "{after}");
        }
        let azure = text(entry(&node, "wi-credential-provider-azure"));
        assert!(azure.contains("--azure-cloud-config"), "{azure}");
        assert!(azure.contains("/etc/kubernetes/azure.json"), "{azure}");
        let gcp = text(entry(&node, "wi-credential-provider-gcp"));
        assert!(gcp.contains("iam.gke.io/enable-wi-image-pull"), "{gcp}");
    }
}
