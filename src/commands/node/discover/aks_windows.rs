//! AKS Windows nodes keep the kubelet's flags in `c:\k\kubeclusterconfig.json`,
//! not in a service definition: AgentBaker's `Write-KubeClusterConfig`
//! writes `Kubernetes.Kubelet.ConfigArgs` (a list of `--name=value`
//! strings, sorted, from the RP's kubelet config) and
//! `Kubernetes.Source.Release` (the kubelet's version, e.g. `1.33.2`) once
//! at provisioning, and the NSSM service `Kubelet` runs `kubeletstart.ps1`,
//! which rereads the file at every start and appends a few flags of its
//! own (node labels, volume-plugin dir, priority class, runtime endpoint;
//! none of ours). Source: Azure/AgentBaker @06836ee
//! `staging/cse/windows/kubernetesfunc.ps1` and
//! `provisioningscripts/kubeletstart.ps1`.
//!
//! The file is written by Windows PowerShell's `Out-File` without an
//! encoding, which is UTF-16LE with a byte-order mark; it is read here in
//! UTF-16 (either order, with its mark) or UTF-8 (with or without one).
//! Some values are the two characters `""` (how the template quotes an
//! empty value): they are kept as they are.

use std::path::Path;

use serde::Deserialize;

use super::distro::AKS_WINDOWS_CLUSTER_CONFIG;
use wicp_base::platform::Host;

/// Larger than any cluster config AgentBaker writes (a few KiB).
const MAX_BYTES: u64 = 1024 * 1024;

/// What install and doctor need from the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClusterConfig {
    /// `Kubernetes.Kubelet.ConfigArgs`, in order.
    pub(crate) args: Vec<String>,
    /// `Kubernetes.Source.Release`, when set.
    pub(crate) release: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct File {
    kubernetes: Option<Kubernetes>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Kubernetes {
    source: Option<Source>,
    kubelet: Option<Kubelet>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Source {
    release: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Kubelet {
    config_args: Option<Args>,
}

/// PowerShell's `ConvertTo-Json` writes a one-element array as the bare
/// element.
#[derive(Deserialize)]
#[serde(untagged)]
enum Args {
    List(Vec<String>),
    One(String),
}

/// The text of the file's bytes: UTF-16 by its byte-order mark, else
/// UTF-8 (a mark dropped).
pub(crate) fn decode(bytes: &[u8]) -> Result<String, String> {
    let utf16 = |rest: &[u8], little: bool| -> Result<String, String> {
        let (pairs, odd) = rest.as_chunks::<2>();
        if !odd.is_empty() {
            return Err("it has a UTF-16 byte-order mark and an odd number of bytes".into());
        }
        let units = pairs.iter().map(|&pair| {
            if little {
                u16::from_le_bytes(pair)
            } else {
                u16::from_be_bytes(pair)
            }
        });
        char::decode_utf16(units)
            .collect::<Result<String, _>>()
            .map_err(|_| "it is not valid UTF-16".to_string())
    };
    match bytes {
        [0xFF, 0xFE, rest @ ..] => utf16(rest, true),
        [0xFE, 0xFF, rest @ ..] => utf16(rest, false),
        [0xEF, 0xBB, 0xBF, rest @ ..] => {
            String::from_utf8(rest.to_vec()).map_err(|_| "it is not valid UTF-8".into())
        }
        _ => String::from_utf8(bytes.to_vec())
            .map_err(|_| "it is neither UTF-8 nor UTF-16 with a byte-order mark".into()),
    }
}

/// Parses the file's bytes.
pub(crate) fn parse(bytes: &[u8]) -> Result<ClusterConfig, String> {
    let text = decode(bytes)?;
    let file: File = serde_json::from_str(&text).map_err(|e| {
        format!(
            "it is not the JSON AgentBaker writes ({} at line {}, column {})",
            match e.classify() {
                serde_json::error::Category::Data => "a field of the wrong type",
                serde_json::error::Category::Eof => "it ends early",
                _ => "a syntax error",
            },
            e.line(),
            e.column()
        )
    })?;
    let kubernetes = file.kubernetes;
    let release = kubernetes
        .as_ref()
        .and_then(|k| k.source.as_ref())
        .and_then(|s| s.release.clone())
        .filter(|r| !r.is_empty());
    let args = match kubernetes
        .and_then(|k| k.kubelet)
        .and_then(|k| k.config_args)
    {
        Some(Args::List(list)) => list,
        Some(Args::One(one)) => vec![one],
        None => Vec::new(),
    };
    Ok(ClusterConfig { args, release })
}

impl ClusterConfig {
    /// The kubelet's arguments as the kubelet itself receives them:
    /// `kubeletstart.ps1` joins `ConfigArgs` with spaces into one command
    /// line (`$args = ($KubeletArgList -join " ")`, then
    /// `[RunProcess.exec]::RunProcess($exe, $args, ...)`; AgentBaker
    /// @0268abae), and the kubelet, a Go program, splits it back with Go's
    /// Windows rules ([`windows_argv`]). So
    /// `--image-credential-provider-config="c:\k\x.yaml"` reaches it
    /// without its quotes, and `--eviction-hard=""` empty.
    pub(crate) fn kubelet_argv(&self) -> Vec<String> {
        windows_argv(&self.args.join(" "))
    }
}

/// Splits a Windows command line as a Go program's `os.Args` does (Go's
/// `syscall` `readNextArg`): spaces and tabs separate arguments outside
/// quotes; `"` toggles quoting and is dropped; `""` inside quotes is one
/// literal `"` and ends the quoting (the "prior to 2008" rule Go
/// follows); backslashes are literal except before a `"`, where each pair
/// is one backslash and an odd one makes the `"` literal.
fn windows_argv(line: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
        if chars.peek().is_none() {
            return args;
        }
        let mut arg = String::new();
        let mut quoted = false;
        let mut slashes = 0usize;
        while let Some(c) = chars.next() {
            match c {
                ' ' | '\t' if !quoted => break,
                '\\' => {
                    slashes += 1;
                    continue;
                }
                '"' => {
                    arg.extend(std::iter::repeat_n('\\', slashes / 2));
                    if slashes % 2 == 1 {
                        arg.push('"');
                    } else {
                        if quoted && chars.next_if_eq(&'"').is_some() {
                            arg.push('"');
                        }
                        quoted = !quoted;
                    }
                    slashes = 0;
                    continue;
                }
                _ => {}
            }
            arg.extend(std::iter::repeat_n('\\', slashes));
            slashes = 0;
            arg.push(c);
        }
        arg.extend(std::iter::repeat_n('\\', slashes));
        args.push(arg);
    }
}

/// Reads the node's `kubeclusterconfig.json` inside the root, bounded.
pub(crate) fn read(host: &Host) -> Result<ClusterConfig, String> {
    let path = Path::new(AKS_WINDOWS_CLUSTER_CONFIG);
    let bytes = host
        .read_bytes(path, MAX_BYTES)
        .map_err(|e| format!("cannot read {AKS_WINDOWS_CLUSTER_CONFIG}: {e}"))?
        .ok_or_else(|| format!("{AKS_WINDOWS_CLUSTER_CONFIG} does not exist"))?;
    parse(&bytes).map_err(|why| format!("cannot use {AKS_WINDOWS_CLUSTER_CONFIG}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round-5 item 7: the kubelet gets its flags unquoted, as Go splits
    /// the command line kubeletstart.ps1 builds.
    #[test]
    fn the_kubelet_gets_its_arguments_as_go_splits_the_command_line() {
        let config = ClusterConfig {
            args: [
                r#"--image-credential-provider-config="c:\k\credential-provider-config.yaml""#,
                r#"--enforce-node-allocatable="""#,
                r#"--node-labels="a=b c""#,
                r"--cloud-config=c:\k\azure.json",
                r#"--x=a\"b"#,
                r#"--y="a""b"#,
                r#"--z="c:\dir\\""#,
            ]
            .map(String::from)
            .to_vec(),
            release: None,
        };
        assert_eq!(
            config.kubelet_argv(),
            [
                r"--image-credential-provider-config=c:\k\credential-provider-config.yaml",
                "--enforce-node-allocatable=",
                "--node-labels=a=b c",
                r"--cloud-config=c:\k\azure.json",
                r#"--x=a"b"#,
                r#"--y=a"b"#,
                r"--z=c:\dir\",
            ]
        );
    }

    const SAMPLE: &str = r#"{"Cri":{"Name":"containerd"},"Kubernetes":{"Source":{"Release":"1.33.2"},"Kubelet":{"NodeLabels":"a=b","ConfigArgs":["--cloud-config=c:\\k\\azure.json","--enforce-node-allocatable=\"\"","--image-credential-provider-bin-dir=c:\\var\\lib\\kubelet\\credential-provider","--image-credential-provider-config=c:\\k\\credential-provider-config.yaml"]}}}"#;

    fn utf16le_with_bom(text: &str) -> Vec<u8> {
        let mut out = vec![0xFF, 0xFE];
        for unit in text.encode_utf16() {
            out.extend_from_slice(&unit.to_le_bytes());
        }
        out
    }

    #[test]
    fn reads_utf16_with_its_mark_and_utf8_with_or_without_one() {
        let want = parse(SAMPLE.as_bytes()).unwrap();
        assert_eq!(want.release.as_deref(), Some("1.33.2"));
        assert_eq!(want.args.len(), 4);
        assert_eq!(want.args[1], "--enforce-node-allocatable=\"\"");
        assert_eq!(parse(&utf16le_with_bom(SAMPLE)).unwrap(), want);
        let mut bom = vec![0xEF, 0xBB, 0xBF];
        bom.extend_from_slice(SAMPLE.as_bytes());
        assert_eq!(parse(&bom).unwrap(), want);
        let mut be = vec![0xFE, 0xFF];
        for unit in SAMPLE.encode_utf16() {
            be.extend_from_slice(&unit.to_be_bytes());
        }
        assert_eq!(parse(&be).unwrap(), want);
    }

    #[test]
    fn one_argument_is_written_bare_and_bad_files_say_why_without_quoting_them() {
        let one = parse(br#"{"Kubernetes":{"Kubelet":{"ConfigArgs":"--v=2"}}}"#).unwrap();
        assert_eq!(one.args, vec!["--v=2".to_string()]);
        assert_eq!(one.release, None);
        let odd = parse(&[0xFF, 0xFE, b'{']).unwrap_err();
        assert!(odd.contains("odd number"), "{odd}");
        let latin1 = parse(b"{\"K\xe9\": 1}").unwrap_err();
        assert!(latin1.contains("neither UTF-8 nor UTF-16"), "{latin1}");
        let wrong =
            parse(br#"{"Kubernetes":{"Kubelet":{"ConfigArgs":{"secret":"x"}}}}"#).unwrap_err();
        assert!(
            wrong.contains("line 1") && !wrong.contains("secret"),
            "{wrong}"
        );
    }
}
