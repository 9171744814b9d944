//! The proxy variables, read once at start and applied to every client that
//! may use a proxy (the hand-written calls and the AWS SDK's alike).
//!
//! `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` are honoured, the
//! uppercase form winning over the lowercase one and an empty value counting
//! as unset. A value without a scheme means `http://`, as in curl.
//!
//! `NO_PROXY` is read as the kubelet and containerd read it, with Go's
//! `golang.org/x/net/http/httpproxy` ([`Bypass`]): `*` bypasses the proxy
//! for every host, IP literals and CIDRs included (reqwest's own reading
//! left IP literals on the proxy, with a service account token in the
//! body). Link-local addresses (EKS Pod Identity's `169.254.170.23`, the
//! metadata services) are never proxied. Unlike Go, loopback and
//! `localhost` follow the list like any host (see [`Bypass`]).
//!
//! A node that must go through a proxy must not send traffic around it: a
//! set value that is not a usable proxy URL is refused with an error naming
//! the variable, where reqwest would skip it silently and connect directly.

use wicp_base::error::{Error, Fact, Result, quote};

/// The variables, each with its lowercase form.
const HTTPS: [&str; 2] = ["HTTPS_PROXY", "https_proxy"];
const HTTP: [&str; 2] = ["HTTP_PROXY", "http_proxy"];
const ALL: [&str; 2] = ["ALL_PROXY", "all_proxy"];
const NO_PROXY: [&str; 2] = ["NO_PROXY", "no_proxy"];

/// One variable that is set: its name and value.
#[derive(Clone, PartialEq, Eq)]
struct Setting {
    name: &'static str,
    value: String,
}

/// The proxy settings in effect.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Proxies {
    https: Option<Setting>,
    http: Option<Setting>,
    all: Option<Setting>,
    no_proxy: Option<Setting>,
}

/// Never prints a proxy password.
impl std::fmt::Debug for Proxies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe().as_deref().unwrap_or("no proxy"))
    }
}

impl Proxies {
    pub fn from_lookup(env: impl Fn(&str) -> Option<String>) -> Self {
        let first = |names: [&'static str; 2]| {
            names.iter().find_map(|&name| {
                env(name)
                    .filter(|v| !v.is_empty())
                    .map(|value| Setting { name, value })
            })
        };
        Proxies {
            https: first(HTTPS),
            http: first(HTTP),
            all: first(ALL),
            no_proxy: first(NO_PROXY),
        }
    }

    /// The settings with any credentials in them hidden, for logs and
    /// transport errors (whether a call went through a proxy is the first
    /// question when it fails); `None` when no variable is set.
    pub fn describe(&self) -> Option<String> {
        let lines: Vec<String> = [&self.https, &self.http, &self.all, &self.no_proxy]
            .into_iter()
            .flatten()
            .map(|s| format!("{}={}", s.name, hide_credentials(&s.value)))
            .collect();
        (!lines.is_empty()).then(|| lines.join(", "))
    }

    /// Replaces whatever reqwest would read from the process environment
    /// with these settings, each checked: one proxy rule that picks the
    /// proxy for a URL's scheme and leaves out what [`Bypass`] bypasses.
    pub fn apply(&self, builder: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder> {
        let checked = |setting: &Option<Setting>| setting.as_ref().map(proxy_url).transpose();
        let route = Route {
            https: checked(&self.https)?,
            http: checked(&self.http)?,
            all: checked(&self.all)?,
            bypass: Bypass::parse(self.no_proxy.as_ref().map_or("", |s| s.value.as_str())),
        };
        let builder = builder.no_proxy();
        if route.https.is_none() && route.http.is_none() && route.all.is_none() {
            return Ok(builder);
        }
        Ok(builder.proxy(reqwest::Proxy::custom(move |url| route.proxy_for(url))))
    }
}

/// Which proxy each URL goes through.
#[derive(Debug)]
struct Route {
    https: Option<url::Url>,
    http: Option<url::Url>,
    all: Option<url::Url>,
    bypass: Bypass,
}

impl Route {
    /// The proxy for `url`: its scheme's, else `ALL_PROXY`'s; none for a
    /// host the bypass list or the fixed rules leave out.
    fn proxy_for(&self, url: &url::Url) -> Option<url::Url> {
        let proxy = match url.scheme() {
            "https" => self.https.as_ref().or(self.all.as_ref()),
            "http" => self.http.as_ref().or(self.all.as_ref()),
            _ => self.all.as_ref(),
        }?;
        let host = url.host()?;
        let port = url.port_or_known_default().unwrap_or(0);
        if self.bypass.bypasses(&host, port) {
            return None;
        }
        Some(proxy.clone())
    }
}

/// `NO_PROXY`, read as Go's `httpproxy` reads it (the kubelet's and
/// containerd's reading; `golang.org/x/net/http/httpproxy`, `config.init`
/// and `useProxy`): comma-separated, trimmed, lowercased entries; `*`
/// alone bypasses everything; an IP (optionally `ip:port`, `[v6]:port`)
/// bypasses that address; a CIDR bypasses its network; `example.com`
/// bypasses the host and its subdomains, `.example.com` and
/// `*.example.com` the subdomains only; a `:port` suffix narrows an entry
/// to that port. Whatever the list, link-local addresses are never
/// proxied: a link-local service (Pod Identity, IMDS) is on the node's own
/// link, and a proxy can only be the wrong place for its token.
///
/// One difference from Go remains: Go also never proxies `localhost` and
/// loopback addresses; here they follow the list (the test suite observes
/// its proxy through loopback servers). List them in `NO_PROXY` to get
/// Go's behaviour.
#[derive(Debug, Default)]
struct Bypass {
    everything: bool,
    ips: Vec<(std::net::IpAddr, Option<u16>)>,
    networks: Vec<(std::net::IpAddr, u8)>,
    domains: Vec<Domain>,
}

#[derive(Debug)]
struct Domain {
    /// `.example.com`: the suffix a subdomain ends with.
    suffix: String,
    /// Whether `example.com` itself matches too.
    itself: bool,
    port: Option<u16>,
}

impl Bypass {
    pub(crate) fn parse(list: &str) -> Self {
        let mut bypass = Bypass::default();
        for entry in list.split(',') {
            let entry = entry.trim().to_ascii_lowercase();
            if entry.is_empty() {
                continue;
            }
            if entry == "*" {
                bypass.everything = true;
                continue;
            }
            if let Some(network) = parse_cidr(&entry) {
                bypass.networks.push(network);
                continue;
            }
            let (host, port) = split_port(&entry);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if let Ok(ip) = host.parse::<std::net::IpAddr>() {
                bypass.ips.push((ip, port));
                continue;
            }
            let host = host.strip_prefix('*').unwrap_or(host);
            if host.is_empty() {
                continue;
            }
            let (suffix, itself) = match host.strip_prefix('.') {
                Some(_) => (host.to_string(), false),
                None => (format!(".{host}"), true),
            };
            bypass.domains.push(Domain {
                suffix,
                itself,
                port,
            });
        }
        bypass
    }

    /// Whether a request to `host` on `port` goes around the proxy.
    fn bypasses(&self, host: &url::Host<&str>, port: u16) -> bool {
        let ip = match host {
            url::Host::Ipv4(ip) => Some(std::net::IpAddr::V4(*ip)),
            url::Host::Ipv6(ip) => Some(std::net::IpAddr::V6(*ip)),
            url::Host::Domain(_) => None,
        };
        if ip.is_some_and(is_link_local) {
            return true;
        }
        if self.everything {
            return true;
        }
        let port_matches = |wanted: Option<u16>| wanted.is_none_or(|p| p == port);
        match (ip, host) {
            (Some(ip), _) => {
                self.ips
                    .iter()
                    .any(|(entry, p)| *entry == ip && port_matches(*p))
                    || self
                        .networks
                        .iter()
                        .any(|(network, bits)| in_network(ip, *network, *bits))
            }
            (None, url::Host::Domain(name)) => {
                let name = name.to_ascii_lowercase();
                self.domains.iter().any(|d| {
                    (name.ends_with(&d.suffix)
                        || (d.itself && d.suffix.get(1..) == Some(name.as_str())))
                        && port_matches(d.port)
                })
            }
            (None, _) => false,
        }
    }
}

/// `169.254.0.0/16` and `fe80::/10`.
fn is_link_local(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_link_local(),
        std::net::IpAddr::V6(v6) => {
            (v6.segments().first().copied().unwrap_or(0) & 0xffc0) == 0xfe80
        }
    }
}

/// `10.0.0.0/8`, `fd00::/8`: the network and its prefix length.
fn parse_cidr(entry: &str) -> Option<(std::net::IpAddr, u8)> {
    let (ip, bits) = entry.split_once('/')?;
    let ip: std::net::IpAddr = ip.parse().ok()?;
    let bits: u8 = bits.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

fn in_network(ip: std::net::IpAddr, network: std::net::IpAddr, bits: u8) -> bool {
    let (ip, network, width) = match (ip, network) {
        (std::net::IpAddr::V4(a), std::net::IpAddr::V4(b)) => {
            (u128::from(u32::from(a)), u128::from(u32::from(b)), 32u32)
        }
        (std::net::IpAddr::V6(a), std::net::IpAddr::V6(b)) => {
            (u128::from(a), u128::from(b), 128u32)
        }
        _ => return false,
    };
    let bits = u32::from(bits);
    if bits == 0 {
        return true;
    }
    let shift = width - bits.min(width);
    (ip >> shift) == (network >> shift)
}

/// `host:port`, `[v6]:port`, or a bare host (a bare IPv6 address keeps
/// its colons).
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if let Some((host, after)) = entry
        .strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
    {
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
        return (host, port);
    }
    match entry.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(port) => (host, Some(port)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

/// Parses a proxy variable with the `url` crate, refusing what a proxy
/// URL cannot be (reqwest would skip such a value silently).
fn proxy_url(setting: &Setting) -> Result<url::Url> {
    let value = setting.value.trim();
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(unusable(
            setting,
            "it contains a space or a control character",
        ));
    }
    let full = if value.contains("://") {
        value.to_string()
    } else {
        format!("http://{value}")
    };
    let url = url::Url::parse(&full).map_err(|e| unusable(setting, &e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(unusable(
            setting,
            &format!(
                "scheme {}:// is not supported, only http:// and https:// proxies",
                url.scheme()
            ),
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(unusable(setting, "it names no host"));
    }
    if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
        return Err(unusable(
            setting,
            "a proxy URL has no path, query or fragment",
        ));
    }
    Ok(url)
}

fn unusable(setting: &Setting, why: &str) -> Error {
    Error::config(format!(
        "{} is {}, which is not a usable proxy URL: {why}",
        setting.name,
        quote(&hide_credentials(&setting.value))
    ))
    .fix(format!(
        "write {} as http://[user:password@]host:port (percent-encode special characters in the user and password), \
         or unset it; the plugin does not connect around a proxy setting it cannot use",
        setting.name
    ))
    .with(Fact::Flag(wicp_base::error::Setting::Variable(setting.name)))
    .with(Fact::Problem(why.to_string()))
}

/// `http://user:pass@proxy:3128` as `http://<credentials>@proxy:3128`:
/// everything between the scheme and the last `@` is hidden, wherever it
/// stands, since a malformed password may hold any of the characters that
/// would end an authority (`/`, `?`, `#`). For proxy settings and endpoint
/// URLs, in logs and errors.
pub fn hide_credentials(value: &str) -> String {
    let (scheme, rest) = match value.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), value),
    };
    match rest.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}<credentials>@{host}"),
        None => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn settings_hide_credentials() {
        assert_eq!(Proxies::from_lookup(env(&[])).describe(), None);
        assert_eq!(
            Proxies::from_lookup(env(&[("HTTPS_PROXY", "")])).describe(),
            None
        );
        assert_eq!(
            Proxies::from_lookup(env(&[
                ("https_proxy", "http://user:p%40ss@proxy.corp:3128/"),
                ("NO_PROXY", "169.254.169.254,.internal"),
                ("http_proxy", "proxy.corp:3128"),
            ]))
            .describe()
            .unwrap(),
            "https_proxy=http://<credentials>@proxy.corp:3128/, http_proxy=proxy.corp:3128, NO_PROXY=169.254.169.254,.internal"
        );
        // The uppercase form wins, as in reqwest.
        assert_eq!(
            Proxies::from_lookup(env(&[
                ("HTTPS_PROXY", "http://a:3128"),
                ("https_proxy", "http://b:3128")
            ]))
            .describe()
            .unwrap(),
            "HTTPS_PROXY=http://a:3128"
        );
        assert_eq!(hide_credentials("u:p@h:1"), "<credentials>@h:1");
        assert_eq!(hide_credentials("http://h:1"), "http://h:1");
        assert_eq!(
            hide_credentials("socks5://u:p@a@h"),
            "socks5://<credentials>@h"
        );
        // A password holding '/' is hidden whole (an authority split at
        // the first '/' would show "u:pa").
        assert_eq!(
            hide_credentials("http://u:pa/ss@h:1"),
            "http://<credentials>@h:1"
        );
        let shown = format!(
            "{:?}",
            Proxies::from_lookup(env(&[("HTTPS_PROXY", "http://u:secret@p:1")]))
        );
        assert!(!shown.contains("secret"), "{shown}");
    }

    fn bypassed(list: &str, url: &str) -> bool {
        let url = url::Url::parse(url).unwrap();
        Bypass::parse(list).bypasses(&url.host().unwrap(), url.port_or_known_default().unwrap())
    }

    /// The cases of Go's `httpproxy` tests (`proxy_test.go`,
    /// `TestUseProxy`-style), and ours on top.
    #[test]
    fn no_proxy_is_read_as_go_reads_it() {
        // `*` covers every host, IP literals included.
        for url in [
            "http://127.0.0.1:8080/",
            "http://10.0.0.1/",
            "https://registry.example.com/",
            "http://[2001:db8::1]/",
        ] {
            assert!(bypassed("*", url), "{url}");
        }
        // Link-local: never proxied, whatever the list.
        for url in [
            "http://169.254.170.23/v1/credentials",
            "http://169.254.169.254/",
            "http://[fe80::1]/",
        ] {
            assert!(bypassed("", url), "{url}");
        }
        assert!(!bypassed("", "http://10.0.0.1/"));
        assert!(!bypassed("", "http://127.0.0.1:1/"));
        assert!(bypassed("localhost,127.0.0.1", "http://127.0.0.1:1/"));
        assert!(bypassed("localhost,127.0.0.1", "http://localhost:1/"));
        // Domains: the host and its subdomains; a leading dot or `*.`:
        // subdomains only.
        assert!(bypassed("example.com", "https://example.com/"));
        assert!(bypassed("example.com", "https://a.b.example.com/"));
        assert!(!bypassed("example.com", "https://notexample.com/"));
        assert!(!bypassed(".example.com", "https://example.com/"));
        assert!(bypassed(".example.com", "https://a.example.com/"));
        assert!(!bypassed("*.example.com", "https://example.com/"));
        assert!(bypassed("*.example.com", "https://a.example.com/"));
        assert!(bypassed(" Example.COM ,other", "https://EXAMPLE.com/"));
        // Ports narrow an entry.
        assert!(bypassed("example.com:8443", "https://example.com:8443/"));
        assert!(!bypassed("example.com:8443", "https://example.com/"));
        assert!(bypassed("10.1.2.3:443", "https://10.1.2.3/"));
        assert!(!bypassed("10.1.2.3:80", "https://10.1.2.3/"));
        assert!(bypassed("[2001:db8::1]:443", "https://[2001:db8::1]/"));
        // IPs and CIDRs.
        assert!(bypassed("10.1.2.3", "http://10.1.2.3/"));
        assert!(!bypassed("10.1.2.3", "http://10.1.2.4/"));
        assert!(bypassed("10.0.0.0/8", "http://10.200.1.1/"));
        assert!(!bypassed("10.0.0.0/8", "http://11.0.0.1/"));
        assert!(bypassed("2001:db8::/32", "http://[2001:db8:1::5]/"));
        assert!(!bypassed("2001:db8::/32", "http://10.0.0.1/"));
        assert!(bypassed("0.0.0.0/0", "http://8.8.8.8/"));
        // An IP entry does not match a name, nor a name an IP.
        assert!(!bypassed("10.1.2.3", "http://registry.example.com/"));
        assert!(!bypassed("example.com", "http://10.1.2.3/"));
    }

    #[test]
    fn each_scheme_gets_its_proxy_and_the_bypass_wins() {
        let p = |u: &str| Some(url::Url::parse(u).unwrap());
        let route = Route {
            https: p("http://secure-proxy:3128"),
            http: None,
            all: p("http://any-proxy:3128"),
            bypass: Bypass::parse("internal.example,10.0.0.0/8"),
        };
        let via = |u: &str| {
            route
                .proxy_for(&url::Url::parse(u).unwrap())
                .map(|p| p.host_str().unwrap_or_default().to_string())
        };
        for (target, proxy) in [
            ("https://registry.example/", Some("secure-proxy")),
            ("http://registry.example/", Some("any-proxy")),
            ("https://registry.internal.example/", None),
            ("http://10.9.9.9/", None),
            ("http://169.254.170.23/", None),
        ] {
            assert_eq!(via(target).as_deref(), proxy, "{target}");
        }
    }

    #[test]
    fn usable_settings_are_applied() {
        for value in [
            "http://proxy.corp:3128",
            "http://proxy.corp:3128/",
            "proxy.corp:3128",
            "https://u:p%20w@proxy.corp",
            "http://[::1]:3128",
        ] {
            let proxies = Proxies {
                https: Some(Setting {
                    name: "HTTPS_PROXY",
                    value: value.into(),
                }),
                ..Proxies::default()
            };
            assert!(proxies.apply(reqwest::Client::builder()).is_ok(), "{value}");
        }
    }

    #[test]
    fn unusable_settings_are_refused_naming_the_variable_not_the_password() {
        for (value, why) in [
            ("http://u:pa ss@proxy.corp:3128", "a space"),
            ("http://u:pa/ss@proxy.corp:3128", "invalid port"),
            ("ftp://proxy.corp:21", "scheme ftp://"),
            ("socks5://proxy.corp:1080", "scheme socks5://"),
            ("http://proxy.corp:3128/a path", "a space"),
            ("http://proxy.corp:3128/path", "no path"),
            ("http://proxy.corp:99999", "invalid port"),
            ("http://", "empty host"),
            ("http://proxy.corp:3128?x=1", "no path, query"),
        ] {
            let proxies = Proxies {
                http: Some(Setting {
                    name: "http_proxy",
                    value: value.into(),
                }),
                ..Proxies::default()
            };
            let e = proxies.apply(reqwest::Client::builder()).unwrap_err();
            assert!(e.what().starts_with("http_proxy is "), "{value}: {e}");
            assert!(e.what().contains(why), "{value}: {e}");
            assert!(e.remedy().unwrap().contains("http_proxy"), "{e}");
            for secret in ["pa ss", "pa/ss"] {
                assert!(!e.to_string().contains(secret), "{e}");
            }
        }
    }
}
