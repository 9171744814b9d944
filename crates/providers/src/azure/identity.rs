//! Which Entra ID application the service account federates to: the client
//! ID and tenant, from the service account's annotations.
//!
//! Two annotation families are in use. `azure.workload.identity/*` is what
//! the Azure Workload Identity webhook (and Flux) read, so most clusters
//! already carry it; `kubernetes.azure.com/acr-*` is what AKS's own
//! `acr-credential-provider` reads. We accept both, the workload identity
//! keys first. The kubelet passes only the keys the provider entry lists in
//! `tokenAttributes`, so an admin chooses the family there.

use std::collections::BTreeMap;

use super::AZURE_TENANT_ID;
use wicp_base::error::{Error, Fact, Result, quote};

pub const WI_CLIENT_ID: &str = "azure.workload.identity/client-id";
pub(crate) const AKS_CLIENT_ID: &str = "kubernetes.azure.com/acr-client-id";
pub(crate) const WI_TENANT_ID: &str = "azure.workload.identity/tenant-id";
pub(crate) const AKS_TENANT_ID: &str = "kubernetes.azure.com/acr-tenant-id";

/// The annotation keys in the order they are tried: AKS's ACR keys first.
pub(crate) const CLIENT_ID_KEYS: [&str; 2] = [AKS_CLIENT_ID, WI_CLIENT_ID];
pub(crate) const TENANT_ID_KEYS: [&str; 2] = [AKS_TENANT_ID, WI_TENANT_ID];

/// Where a value came from, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Annotation(&'static str),
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Annotation(key) => write!(f, "annotation {key}"),
            Source::Default => {
                f.write_str("--azure-tenant-id (WICP_AZURE_TENANT_ID or AZURE_TENANT_ID)")
            }
        }
    }
}

/// The Entra application a service account federates to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The application (client) ID, a GUID, lowercased.
    pub client_id: String,
    /// The directory (tenant) ID, a GUID lowercased, or a tenant domain.
    pub tenant: String,
    pub tenant_source: Source,
}

/// Reads the identity from `annotations`, with `default_tenant` (from
/// `--azure-tenant-id`, already validated) when no tenant annotation is set.
pub fn resolve(
    annotations: &BTreeMap<String, String>,
    default_tenant: Option<&str>,
) -> Result<Identity> {
    let (client_id, client_key) = first(annotations, &CLIENT_ID_KEYS)?.ok_or_else(|| {
        Error::annotation_key(AKS_CLIENT_ID, format!(
            "the service account has no {AKS_CLIENT_ID} (or {WI_CLIENT_ID}) annotation naming the Entra ID application to federate to"
        ))
        .fix(format!(
            "annotate the service account with {AKS_CLIENT_ID}: <client ID of the managed identity or app registration> \
             (or {WI_CLIENT_ID}), and list that key in tokenAttributes of this provider entry"
        ))
    })?;
    let client_id = parse_client_id(client_id).ok_or_else(|| {
        Error::annotation_key(client_key, format!(
            "annotation {client_key} is {}, not a client ID (a GUID like 00000000-0000-0000-0000-000000000000)",
            quote(client_id)
        ))
        .fix("set it to the client ID of the managed identity or app registration (az identity show --query clientId)")
    })?;
    let (tenant, tenant_source) = match first(annotations, &TENANT_ID_KEYS)? {
        Some((value, key)) => {
            let tenant = parse_tenant(value)
                .ok_or_else(|| invalid_tenant(&Source::Annotation(key), value))?;
            (tenant, Source::Annotation(key))
        }
        None => match default_tenant {
            Some(tenant) => (tenant.to_string(), Source::Default),
            None => {
                return Err(Error::annotation_key(AKS_TENANT_ID, format!(
                    "no Entra ID tenant: the service account has no {AKS_TENANT_ID} (or {WI_TENANT_ID}) annotation and no default tenant is configured"
                ))
                .fix(format!(
                    "annotate the service account with {AKS_TENANT_ID} (or {WI_TENANT_ID}): <tenant ID> (and list it in tokenAttributes), \
                     or give the plugin --azure-tenant-id / AZURE_TENANT_ID"
                )));
            }
        },
    };
    Ok(Identity {
        client_id,
        tenant,
        tenant_source,
    })
}

/// The first of `keys` present in `annotations`, with its key. A present
/// but empty value is an error: `client-id: ""` is a mistake to report,
/// not a reason to quietly try the next key. When two keys disagree the
/// first wins, with a warning naming both.
pub fn first<'a>(
    annotations: &'a BTreeMap<String, String>,
    keys: &[&'static str],
) -> Result<Option<(&'a str, &'static str)>> {
    let mut found: Option<(&'a str, &'static str)> = None;
    for key in keys {
        let Some(value) = annotations.get(*key) else {
            continue;
        };
        let value = value.trim();
        if value.is_empty() {
            return Err(
                Error::annotation_key(key, format!("annotation {key} is empty")).fix(format!(
                    "set {key} to a value on the service account, or remove it"
                )),
            );
        }
        match found {
            None => found = Some((value, key)),
            Some((chosen, chosen_key)) if !chosen.eq_ignore_ascii_case(value) => {
                wicp_base::log::warning!(
                    "annotations {chosen_key} and {key} disagree ({} and {}); pulling with {chosen_key}, the key meant for image pulls",
                    quote(chosen),
                    quote(value)
                );
            }
            Some(_) => {}
        }
    }
    Ok(found)
}

/// A GUID in its canonical 8-4-4-4-12 form, lowercased.
pub(crate) fn parse_guid(value: &str) -> Option<String> {
    let groups: Vec<&str> = value.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    let ok = lengths == [8, 4, 4, 4, 12]
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()));
    ok.then(|| value.to_ascii_lowercase())
}

pub fn parse_client_id(value: &str) -> Option<String> {
    parse_guid(value).filter(|g| g != "00000000-0000-0000-0000-000000000000")
}

/// A tenant is named by its GUID or by one of its domains
/// (`contoso.onmicrosoft.com`, a verified custom domain). The value is
/// placed in the authority URL's path, so anything but these two shapes is
/// refused; `common` and `organizations` cannot issue app-only tokens.
pub(crate) fn parse_tenant(value: &str) -> Option<String> {
    if let Some(guid) = parse_guid(value) {
        return (guid != "00000000-0000-0000-0000-000000000000").then_some(guid);
    }
    let domain = value.to_ascii_lowercase();
    let labels: Vec<&str> = domain.split('.').collect();
    let ok = domain.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        && labels
            .last()
            .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_alphabetic()));
    ok.then_some(domain)
}

pub fn invalid_tenant(source: &Source, value: &str) -> Error {
    let problem = format!(
        "is {}, not an Entra ID tenant (a tenant GUID or a domain like contoso.onmicrosoft.com)",
        quote(value)
    );
    match source {
        Source::Annotation(key) => Error::annotation_key(key, format!("{source} {problem}")),
        Source::Default => Error::config(format!("{source} {problem}"))
            .with(Fact::Flag((&AZURE_TENANT_ID).into()))
            .with(Fact::Problem(problem.to_string())),
    }
    .fix("set it to the directory (tenant) ID of the managed identity or app registration (az account show --query tenantId)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations as map;

    const CLIENT: &str = "11111111-2222-3333-4444-555555555555";
    const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";

    #[test]
    fn acr_keys_first_then_workload_identity_then_default_tenant() {
        let id = resolve(
            &map(&[(WI_CLIENT_ID, CLIENT), (WI_TENANT_ID, TENANT)]),
            None,
        )
        .unwrap();
        assert_eq!(id.client_id, CLIENT);
        assert_eq!(id.tenant, TENANT);
        assert_eq!(id.tenant_source, Source::Annotation(WI_TENANT_ID));

        let id = resolve(
            &map(&[(AKS_CLIENT_ID, CLIENT), (AKS_TENANT_ID, TENANT)]),
            None,
        )
        .unwrap();
        assert_eq!(id.client_id, CLIENT);
        assert_eq!(id.tenant_source, Source::Annotation(AKS_TENANT_ID));

        // Both set and different: the ACR key is the one for pulls.
        let app = "99999999-2222-3333-4444-555555555555";
        let id = resolve(
            &map(&[(WI_CLIENT_ID, app), (AKS_CLIENT_ID, CLIENT)]),
            Some("contoso.onmicrosoft.com"),
        )
        .unwrap();
        assert_eq!(id.client_id, CLIENT);
        assert_eq!(id.tenant, "contoso.onmicrosoft.com");
        assert_eq!(id.tenant_source, Source::Default);
    }

    #[test]
    fn values_are_normalised() {
        let id = resolve(
            &map(&[
                (WI_CLIENT_ID, " 11111111-2222-3333-4444-55555555AAAA "),
                (WI_TENANT_ID, "Contoso.OnMicrosoft.com"),
            ]),
            None,
        )
        .unwrap();
        assert_eq!(id.client_id, "11111111-2222-3333-4444-55555555aaaa");
        assert_eq!(id.tenant, "contoso.onmicrosoft.com");
    }

    #[test]
    fn missing_empty_and_malformed_values_are_errors() {
        let e = resolve(&map(&[(WI_TENANT_ID, TENANT)]), None).unwrap_err();
        assert_eq!(e.kind(), wicp_base::error::Kind::Annotation);
        assert_eq!(e.about_annotation(), Some(AKS_CLIENT_ID), "{e}");

        let e = resolve(&map(&[(WI_CLIENT_ID, CLIENT)]), None).unwrap_err();
        assert!(e.to_string().contains("AZURE_TENANT_ID"), "{e}");

        // Empty is not "absent": it does not fall through to the next key.
        let e = resolve(
            &map(&[
                (AKS_CLIENT_ID, ""),
                (WI_CLIENT_ID, CLIENT),
                (WI_TENANT_ID, TENANT),
            ]),
            None,
        )
        .unwrap_err();
        assert_eq!(e.what(), format!("annotation {AKS_CLIENT_ID} is empty"));
        let e = resolve(
            &map(&[(WI_CLIENT_ID, CLIENT), (WI_TENANT_ID, "  ")]),
            Some(TENANT),
        )
        .unwrap_err();
        assert_eq!(e.what(), format!("annotation {WI_TENANT_ID} is empty"));

        for bad in [
            "not-a-guid",
            "11111111222233334444555555555555",
            "11111111-2222-3333-4444-55555555555",
            "11111111-2222-3333-4444-55555555555g",
            "00000000-0000-0000-0000-000000000000",
            "{11111111-2222-3333-4444-555555555555}",
        ] {
            let e =
                resolve(&map(&[(WI_CLIENT_ID, bad), (WI_TENANT_ID, TENANT)]), None).unwrap_err();
            assert!(e.what().contains("not a client ID"), "{bad}: {e}");
        }
        for bad in [
            "common",
            "organizations",
            "contoso",
            "contoso.onmicrosoft.com/../evil",
            "evil.com?x=",
            "a..b.com",
            "-a.com",
            "a.123",
            "00000000-0000-0000-0000-000000000000",
        ] {
            let e =
                resolve(&map(&[(WI_CLIENT_ID, CLIENT), (WI_TENANT_ID, bad)]), None).unwrap_err();
            assert!(e.what().contains("not an Entra ID tenant"), "{bad}: {e}");
        }
    }
}
