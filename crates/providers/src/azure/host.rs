//! ACR login servers, and the Azure cloud each one belongs to.
//!
//! The Entra access token we obtain is good for every registry the identity
//! can reach, so it must only ever be posted to a real ACR login server. A
//! substring or unanchored match is how other tools leaked it
//! (`evil.azurecr.io.attacker.net` contains `.azurecr.io`), so a host is
//! parsed label by label against one complete grammar:
//!
//! ```text
//! <name>[-<hash>][.<region>.geo].azurecr.<io|cn|us|de>
//! ```
//!
//! - `<name>`: the registry name, letters and digits;
//! - `-<hash>`: the domain name label (DNL) suffix of registries created with
//!   a DNL scope (`contoso-e3fsa9c2b0dq.azurecr.io`);
//! - `.<region>.geo`: a geo-replica's regional login server
//!   (`contoso.westeurope.geo.azurecr.io`);
//! - the suffix picks the cloud.
//!
//! Nothing else matches: no port, no extra labels, no data endpoints
//! (`*.data.azurecr.io` serve blob redirects, not tokens).

use std::fmt;

/// The Azure cloud a registry lives in, from its DNS suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cloud {
    Public,
    China,
    UsGovernment,
    /// Microsoft Cloud Deutschland, closed in 2021. `.azurecr.de` hosts are
    /// still recognised (other providers list them), but there is no
    /// authority to default to: `--azure-authority-host` must say.
    Germany,
}

impl Cloud {
    pub fn name(self) -> &'static str {
        match self {
            Cloud::Public => "AzurePublic",
            Cloud::China => "AzureChina",
            Cloud::UsGovernment => "AzureUSGovernment",
            Cloud::Germany => "AzureGermany",
        }
    }

    /// The Entra ID authority of the cloud, `None` for a retired cloud.
    pub(crate) fn authority_host(self) -> Option<&'static str> {
        match self {
            Cloud::Public => Some("https://login.microsoftonline.com"),
            Cloud::China => Some("https://login.chinacloudapi.cn"),
            Cloud::UsGovernment => Some("https://login.microsoftonline.us"),
            Cloud::Germany => None,
        }
    }

    fn from_tld(tld: &str) -> Option<Self> {
        match tld {
            "io" => Some(Cloud::Public),
            "cn" => Some(Cloud::China),
            "us" => Some(Cloud::UsGovernment),
            "de" => Some(Cloud::Germany),
            _ => None,
        }
    }
}

impl fmt::Display for Cloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A validated ACR login server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginServer {
    /// The host, lowercased: what ACR calls the `service`.
    pub host: String,
    pub cloud: Cloud,
    /// The geo-replica region, for regional login servers.
    pub region: Option<String>,
}

/// The shape of hosts we accept, for messages.
pub const PATTERN: &str = "<name>[-<hash>][.<region>.geo].azurecr.io|cn|us|de";

/// Parses `registry` (`host[:port]` as in the image reference) as an ACR
/// login server. `None` for anything else, including a host with a port.
pub fn parse(registry: &str) -> Option<LoginServer> {
    if registry.len() > 253 {
        return None;
    }
    let host = registry.to_ascii_lowercase();
    let labels: Vec<&str> = host.split('.').collect();
    let (name, region, azurecr, tld) = match labels.as_slice() {
        [name, azurecr, tld] => (*name, None, *azurecr, *tld),
        [name, region, "geo", azurecr, tld] => (*name, Some(*region), *azurecr, *tld),
        _ => return None,
    };
    if azurecr != "azurecr" || !is_registry_label(name) {
        return None;
    }
    if let Some(region) = region
        && !is_alphanumeric(region, 63)
    {
        return None;
    }
    let cloud = Cloud::from_tld(tld)?;
    Some(LoginServer {
        region: region.map(str::to_string),
        host,
        cloud,
    })
}

/// `<name>` or `<name>-<hash>`: letters and digits, one optional hyphen
/// separating two non-empty parts, at most a DNS label long.
fn is_registry_label(label: &str) -> bool {
    if label.len() > 63 {
        return false;
    }
    match label.split_once('-') {
        None => is_alphanumeric(label, 50),
        Some((name, hash)) => is_alphanumeric(name, 50) && is_alphanumeric(hash, 63),
    }
}

fn is_alphanumeric(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_login_server_form_and_cloud() {
        let table = [
            ("contoso.azurecr.io", Cloud::Public, None),
            ("contoso.azurecr.cn", Cloud::China, None),
            ("contoso.azurecr.us", Cloud::UsGovernment, None),
            ("contoso.azurecr.de", Cloud::Germany, None),
            ("Contoso.AzureCR.io", Cloud::Public, None),
            ("a1b2c3.azurecr.io", Cloud::Public, None),
            ("contoso-e3fsa9c2b0dq.azurecr.io", Cloud::Public, None),
            ("contoso-e3fsa9c2b0dq.azurecr.cn", Cloud::China, None),
            (
                "contoso.westeurope.geo.azurecr.io",
                Cloud::Public,
                Some("westeurope"),
            ),
            (
                "contoso.chinanorth3.geo.azurecr.cn",
                Cloud::China,
                Some("chinanorth3"),
            ),
            (
                "contoso.usgovvirginia.geo.azurecr.us",
                Cloud::UsGovernment,
                Some("usgovvirginia"),
            ),
            (
                "contoso-e3fsa9c2b0dq.eastus2.geo.azurecr.io",
                Cloud::Public,
                Some("eastus2"),
            ),
        ];
        for (registry, cloud, region) in table {
            let server = parse(registry).unwrap_or_else(|| panic!("{registry} must be ACR"));
            assert_eq!(server.cloud, cloud, "{registry}");
            assert_eq!(server.host, registry.to_ascii_lowercase());
            assert_eq!(server.region.as_deref(), region, "{registry}");
        }
    }

    #[test]
    fn lookalikes_and_non_login_servers_are_refused() {
        for registry in [
            "evil.azurecr.io.attacker.net",
            "azurecr.io.evil",
            "contoso.azurecr.io.azurecr.cn",
            "contoso-azurecr-io.azurecr.cn.evil.com",
            "azurecr.io",
            ".azurecr.io",
            "contoso.azurecr.com",
            "contoso.azurecr.io:443",
            "contoso.azurecr.io:5000",
            "contoso.azurecr.io.",
            "contoso.notazurecr.io",
            "contoso.evil.azurecr.io",
            "contoso.eastus.data.azurecr.io",
            "contoso.eastus.geo.azurecr.io.evil.net",
            "contoso.geo.azurecr.io",
            "contoso..geo.azurecr.io",
            "contoso-.azurecr.io",
            "-contoso.azurecr.io",
            "contoso-a-b.azurecr.io",
            "con_toso.azurecr.io",
            "contoso%2e.azurecr.io",
            "myacr.azurecr.io@evil.com",
            "evil.com/contoso.azurecr.io",
            "docker.io",
            "gcr.io",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com",
            "127.0.0.1:5000",
            "[::1]:5000",
            "",
        ] {
            assert_eq!(parse(registry), None, "{registry} must be refused");
        }
        let long = format!("{}.azurecr.io", "a".repeat(51));
        assert_eq!(parse(&long), None);
    }

    #[test]
    fn clouds_know_their_authority() {
        assert_eq!(
            Cloud::Public.authority_host(),
            Some("https://login.microsoftonline.com")
        );
        assert_eq!(
            Cloud::China.authority_host(),
            Some("https://login.chinacloudapi.cn")
        );
        assert_eq!(
            Cloud::UsGovernment.authority_host(),
            Some("https://login.microsoftonline.us")
        );
        assert_eq!(Cloud::Germany.authority_host(), None);
    }
}
