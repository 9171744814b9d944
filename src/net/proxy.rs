//! The proxy variables, read once at start and applied to every client that
//! may use a proxy (the hand-written calls and the AWS SDK's alike).
//!
//! `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` are honoured, the
//! uppercase form winning over the lowercase one and an empty value counting
//! as unset, as reqwest reads them. A value without a scheme means
//! `http://`, as in curl.
//!
//! A node that must go through a proxy must not send traffic around it: a
//! set value that is not a usable proxy URL is refused with an error naming
//! the variable, where reqwest would skip it silently and connect directly.

use crate::error::{Error, Result, quote};

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
    /// with these settings, each checked.
    pub fn apply(&self, builder: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder> {
        let no_proxy = self
            .no_proxy
            .as_ref()
            .and_then(|s| reqwest::NoProxy::from_string(&s.value));
        let mut builder = builder.no_proxy();
        type Make = fn(&str) -> reqwest::Result<reqwest::Proxy>;
        let kinds: [(&Option<Setting>, Make); 3] = [
            (&self.https, |u| reqwest::Proxy::https(u)),
            (&self.http, |u| reqwest::Proxy::http(u)),
            (&self.all, |u| reqwest::Proxy::all(u)),
        ];
        for (setting, make) in kinds {
            let Some(setting) = setting else { continue };
            let url = proxy_url(setting)?;
            let proxy = make(url.as_str())
                .map_err(|e| unusable(setting, &e.to_string()))?
                .no_proxy(no_proxy.clone());
            builder = builder.proxy(proxy);
        }
        Ok(builder)
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
