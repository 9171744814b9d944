//! What containerd does with the credential of a `--registry-mirror`
//! entry, checked on the node.
//!
//! The kubelet hands containerd a login without a server address, and
//! containerd offers it to every host of the image's registry that
//! challenges. With a `hosts.toml` for SOURCE (in the CRI plugin's
//! `config_path`, `/etc/containerd/certs.d` by convention), those hosts
//! are its `[host."..."]` entries in order and then, always last, its
//! `server`; without `server`, that last host is SOURCE's own upstream
//! (`registry-1.docker.io` for `docker.io`). Source: containerd
//! `core/remotes/docker/config/hosts.go` @301026e5 (`parseHostsFile`
//! appends the root `server` as the last host; `ConfigureHosts` fills an
//! empty one with the upstream). So a mirror credential reaches SOURCE's
//! upstream whenever the mirror fails, unless `server` names the mirror,
//! and goes there directly when SOURCE has no `hosts.toml` at all.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::checks::{Check, Verdict, check};
use wicp_base::platform::Host;
use wicp_kubelet::config::provider_config::Entry;
use wicp_net::inputs::Env;
use wicp_providers::mirror::Rule;

/// containerd's main config, read for the CRI registry `config_path`.
const CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
/// Where `hosts.toml` directories live when the config names none.
const DEFAULT_HOSTS_DIR: &str = "/etc/containerd/certs.d";

/// The mirror rules of our entries, each checked against containerd's
/// hosts configuration under `host`.
pub(super) fn checks(host: &Host, ours: &[&Entry], env: &Env) -> Vec<Check> {
    let rules: Vec<Rule> = super::checks::entry_options(ours, env)
        .into_iter()
        .flat_map(|(_, options)| options.mirrors.registry_mirror)
        .collect();
    if rules.is_empty() {
        return Vec::new();
    }
    let dirs = hosts_dirs(host);
    rules
        .iter()
        .flat_map(|rule| check_rule(host, &dirs, rule))
        .collect()
}

/// The `config_path` directories of containerd's config (1.x
/// `plugins."io.containerd.grpc.v1.cri".registry`, 2.x
/// `plugins."io.containerd.cri.v1.images".registry`; `:`-separated),
/// else the conventional one.
fn hosts_dirs(host: &Host) -> Vec<PathBuf> {
    let configured = host
        .read_bytes(Path::new(CONTAINERD_CONFIG), 1024 * 1024)
        .ok()
        .flatten()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| toml::from_str::<toml::Table>(&text).ok())
        .and_then(|config| {
            let plugins = config.get("plugins")?.as_table()?;
            ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images"]
                .iter()
                .find_map(|name| {
                    plugins
                        .get(*name)?
                        .get("registry")?
                        .get("config_path")?
                        .as_str()
                        .map(str::to_string)
                })
        });
    match configured {
        Some(paths) if !paths.is_empty() => paths.split(':').map(PathBuf::from).collect(),
        _ => vec![PathBuf::from(DEFAULT_HOSTS_DIR)],
    }
}

#[derive(Deserialize)]
struct HostsFile {
    server: Option<String>,
    /// The `[host."..."]` tables, by their key (a URL or a host).
    #[serde(default)]
    host: std::collections::BTreeMap<String, toml::Value>,
}

/// The host part of a `server` value (`https://registry-1.docker.io/v2`).
fn server_host(server: &str) -> &str {
    let rest = server.split_once("://").map_or(server, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

/// Whether `server` is SOURCE's own upstream.
fn is_upstream(rule: &Rule, server: &str) -> bool {
    let host = server_host(server).to_ascii_lowercase();
    let source = rule.source.to_ascii_lowercase();
    host == source
        || (source == "docker.io"
            && ["registry-1.docker.io", "index.docker.io"].contains(&host.as_str()))
}

fn check_rule(host: &Host, dirs: &[PathBuf], rule: &Rule) -> Vec<Check> {
    let name = "registry-mirror";
    let target = format!("https://{}", rule.target);
    let fix = format!(
        "write {}/{}/hosts.toml with server = \"{target}\" and a [host.\"{target}\"] entry (capabilities pull, resolve), so containerd never falls back to {} (docs/mirrors.md)",
        dirs.first()
            .map_or(DEFAULT_HOSTS_DIR.into(), |d| d.display().to_string()),
        rule.source,
        rule.source
    );
    let found = dirs.iter().find_map(|dir| {
        let path = dir.join(&rule.source).join("hosts.toml");
        host.read_bytes(&path, 1024 * 1024)
            .ok()
            .flatten()
            .map(|bytes| (path, bytes))
    });
    let Some((path, bytes)) = found else {
        return vec![check(
            Verdict::Warn,
            name,
            format!(
                "--registry-mirror {rule}: containerd has no hosts.toml for {} (looked in {}), so it pulls {} images from {} itself and offers it the credential for {}",
                rule.source,
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                rule.source,
                rule.source,
                rule.target
            ),
            Some(fix),
        )];
    };
    verdicts(rule, &path, &bytes, fix)
}

/// The verdicts on SOURCE's `hosts.toml` at `path`: its `server` must name
/// a host other than SOURCE's upstream, and every other host containerd
/// would offer the credential to (each `[host]` table, then `server`) must
/// be TARGET: any other, the upstream included, is named.
fn verdicts(rule: &Rule, path: &Path, bytes: &[u8], fix: String) -> Vec<Check> {
    let parsed = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| toml::from_str::<HostsFile>(text).ok());
    let Some(file) = parsed else {
        return vec![server_verdict(rule, path, None, fix)];
    };
    let mut out: Vec<Check> = file
        .host
        .keys()
        .filter(|key| !is_target(rule, key))
        .map(|key| {
            check(
                Verdict::Warn,
                "registry-mirror",
                format!(
                    "{} lists [host.{key:?}]{}, which is not the mirror {}: containerd offers it the credential for {} too",
                    path.display(),
                    if is_upstream(rule, key) {
                        format!(" ({}'s upstream)", rule.source)
                    } else {
                        String::new()
                    },
                    rule.target,
                    rule.target
                ),
                Some(fix.clone()),
            )
        })
        .collect();
    if let Some(server) = file
        .server
        .as_deref()
        .filter(|s| !s.is_empty() && !is_target(rule, s) && !is_upstream(rule, s))
    {
        out.push(check(
            Verdict::Warn,
            "registry-mirror",
            format!(
                "{} has server = {server:?}, neither the mirror {} nor {}'s upstream: containerd offers it the credential for {}",
                path.display(),
                rule.target,
                rule.source,
                rule.target
            ),
            Some(fix.clone()),
        ));
    }
    let warned = !out.is_empty();
    let server = server_verdict(rule, path, Some(&file), fix);
    if !(warned && server.verdict == Verdict::Ok) {
        out.push(server);
    }
    out
}

/// Whether `server` (a `[host]` key or `server` value) is TARGET's host.
fn is_target(rule: &Rule, server: &str) -> bool {
    server_host(server).eq_ignore_ascii_case(&rule.target)
}

/// The verdict on `server` of SOURCE's `hosts.toml` at `path` (`None`:
/// not TOML containerd can read).
fn server_verdict(rule: &Rule, path: &Path, file: Option<&HostsFile>, fix: String) -> Check {
    let name = "registry-mirror";
    let Some(file) = file else {
        return check(
            Verdict::Warn,
            name,
            format!(
                "{} is not TOML containerd can read: it ignores the mirror",
                path.display()
            ),
            Some(fix),
        );
    };
    match file.server.as_deref().filter(|s| !s.is_empty()) {
        None => check(
            Verdict::Warn,
            name,
            format!(
                "{} has no server, so containerd tries {}'s upstream last and, when the mirror fails, offers it the credential for {}",
                path.display(),
                rule.source,
                rule.target
            ),
            Some(fix),
        ),
        Some(server) if is_upstream(rule, server) => check(
            Verdict::Warn,
            name,
            format!(
                "{} has server = {server:?}, {}'s upstream: containerd falls back to it when the mirror fails and offers it the credential for {}",
                path.display(),
                rule.source,
                rule.target
            ),
            Some(fix),
        ),
        Some(server) => check(
            Verdict::Ok,
            name,
            format!(
                "{} sends {} pulls to {server} with no fallback to the upstream",
                path.display(),
                rule.source
            ),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Rule {
        Rule::parse(text).unwrap()
    }

    #[test]
    fn the_upstream_is_the_source_or_docker_hubs_registry() {
        let hub = rule("docker.io=123456789012.dkr.ecr.us-east-1.amazonaws.com/docker-hub");
        assert!(is_upstream(&hub, "https://registry-1.docker.io"));
        assert!(is_upstream(&hub, "docker.io"));
        assert!(!is_upstream(
            &hub,
            "https://123456789012.dkr.ecr.us-east-1.amazonaws.com/v2/docker-hub"
        ));
        let mcr = rule("mcr.microsoft.com=contoso.azurecr.io");
        assert!(is_upstream(&mcr, "https://mcr.microsoft.com"));
        assert!(!is_upstream(&mcr, "https://contoso.azurecr.io"));
    }

    #[test]
    fn each_hosts_toml_gets_its_verdict() {
        let hub = rule("docker.io=123456789012.dkr.ecr.us-east-1.amazonaws.com/docker-hub");
        let dirs = [PathBuf::from(DEFAULT_HOSTS_DIR)];
        let verdicts = |files: &[(&str, &[u8])]| {
            let (_dir, host) = wicp_base::platform::test_root(files);
            check_rule(&host, &dirs, &hub)
        };
        let verdict = |files: &[(&str, &[u8])]| {
            let mut all = verdicts(files);
            assert_eq!(all.len(), 1, "{all:?}");
            all.remove(0)
        };
        let none = verdict(&[]);
        assert_eq!(none.verdict, Verdict::Warn);
        assert!(none.message.contains("no hosts.toml"), "{}", none.message);
        let fallback = verdict(&[(
            "/etc/containerd/certs.d/docker.io/hosts.toml",
            b"[host.\"https://123456789012.dkr.ecr.us-east-1.amazonaws.com/v2/docker-hub\"]\n  capabilities = [\"pull\", \"resolve\"]\n  override_path = true\n",
        )]);
        assert_eq!(fallback.verdict, Verdict::Warn);
        assert!(
            fallback.message.contains("has no server"),
            "{}",
            fallback.message
        );
        let upstream = verdict(&[(
            "/etc/containerd/certs.d/docker.io/hosts.toml",
            b"server = \"https://registry-1.docker.io\"\n",
        )]);
        assert_eq!(upstream.verdict, Verdict::Warn);
        let ok = verdict(&[(
            "/etc/containerd/certs.d/docker.io/hosts.toml",
            b"server = \"https://123456789012.dkr.ecr.us-east-1.amazonaws.com/v2/docker-hub\"\noverride_path = true\n",
        )]);
        assert_eq!(ok.verdict, Verdict::Ok, "{}", ok.message);

        // Round-5 item 5: every host the credential is offered to that is
        // neither the mirror nor the upstream fallback is named.
        let mirror = "https://123456789012.dkr.ecr.us-east-1.amazonaws.com/v2/docker-hub";
        let other_first = format!(
            "server = \"{mirror}\"\n[host.\"https://cache.example.net\"]\n  capabilities = [\"pull\"]\n[host.\"{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        );
        let all = verdicts(&[(
            "/etc/containerd/certs.d/docker.io/hosts.toml",
            other_first.as_bytes(),
        )]);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0].verdict, Verdict::Warn);
        assert!(all[0].message.contains("cache.example.net"), "{all:?}");
        let third = verdicts(&[(
            "/etc/containerd/certs.d/docker.io/hosts.toml",
            b"server = \"https://third.example.org\"\n",
        )]);
        assert_eq!(third.len(), 1, "{third:?}");
        assert_eq!(third[0].verdict, Verdict::Warn);
        assert!(third[0].message.contains("third.example.org"), "{third:?}");
        let upstream_listed = verdicts(&[(
            "/etc/containerd/certs.d/docker.io/hosts.toml",
            format!("server = \"{mirror}\"\n[host.\"https://registry-1.docker.io\"]\n").as_bytes(),
        )]);
        assert_eq!(upstream_listed.len(), 1, "{upstream_listed:?}");
        assert!(
            upstream_listed[0].message.contains("docker.io's upstream"),
            "{upstream_listed:?}"
        );
    }

    #[test]
    fn the_config_path_comes_from_containerds_config() {
        let (_dir, host) = wicp_base::platform::test_root(&[(
            CONTAINERD_CONFIG,
            b"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d:/etc/docker/certs.d\"\n",
        )]);
        assert_eq!(
            hosts_dirs(&host),
            vec![
                PathBuf::from("/etc/containerd/certs.d"),
                PathBuf::from("/etc/docker/certs.d")
            ]
        );
        let (_dir, bare) = wicp_base::platform::test_root(&[]);
        assert_eq!(hosts_dirs(&bare), vec![PathBuf::from(DEFAULT_HOSTS_DIR)]);
    }
}
