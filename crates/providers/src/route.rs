//! Which provider serves a request, and whether its token may go there.
//!
//! Routing reads only the [`ALL`] declarations, so nothing is
//! built for a provider the request does not reach: a half-configured GCP
//! entry cannot break ECR pulls.

use super::fallback::Fallback;
use super::{ALL, Exchanger, Provider};
use wicp_base::error::{Error, Result};
use wicp_kubelet::request::image::ImageRef;
use wicp_kubelet::request::token::ServiceAccountToken;

/// The provider for `image`: the one chosen, or under `auto` (`None`) the
/// first whose registry test matches. `auto` never picks a provider
/// without one, such as passthrough: sending a token to a host is always an
/// explicit choice.
pub fn choose(choice: Option<&'static Provider>, image: &ImageRef) -> Result<&'static Provider> {
    if let Some(provider) = choice {
        return Ok(provider);
    }
    let clouds = || ALL.iter().copied().filter(|p| p.auto.is_some());
    clouds()
        .find(|p| p.auto_serves(image))
        .ok_or_else(|| {
            let served = clouds().map(|p| p.name).collect::<Vec<_>>();
            let served = if served.is_empty() {
                "no cloud provider is built in".to_string()
            } else {
                format!("auto picks among {}", served.join(", "))
            };
            Error::registry(format!(
                "registry {} is not a cloud registry this plugin recognises ({served})",
                image.registry()
            ))
            .fix("for a registry that trusts the cluster's OIDC issuer use --provider passthrough --registry <host>; otherwise remove it from matchImages")
            .refusing(image.registry())
        })
}

/// Refuses `--fallback node` for a provider without a node identity, so
/// the flag never silently means nothing.
pub fn require_node_identity(provider: &Provider, fallback: Fallback) -> Result<()> {
    if fallback == Fallback::None || provider.node_identity.is_some() {
        return Ok(());
    }
    let with: Vec<&str> = ALL
        .iter()
        .filter(|p| p.node_identity.is_some())
        .map(|p| p.name)
        .collect();
    Err(Error::config(format!(
        "--fallback node (WICP_FALLBACK) is set, but the {provider} provider has no node identity to fall back to"
    ))
    .fix(format!(
        "remove --fallback from this entry; it applies to {} only",
        with.join(", ")
    )))
}

/// Refuses `image` when `exchanger` does not serve its registry: a
/// credential, or the token itself, only goes where the admin's
/// configuration says it may.
pub fn require_served(exchanger: &dyn Exchanger, image: &ImageRef) -> Result<()> {
    if exchanger.serves(image) {
        Ok(())
    } else {
        Err(exchanger.refusal(image).refusing(image.registry()))
    }
}

/// The audiences a token must carry one of for `exchanger`: `--audience`
/// (`audience_override`) when given, else the exchanger's own; empty: any.
pub fn expected_audiences(
    exchanger: &dyn Exchanger,
    audience_override: Option<&str>,
) -> Vec<String> {
    match audience_override {
        Some(audience) => vec![audience.to_string()],
        None => exchanger.audiences(),
    }
}

/// Checks the service account token against what `exchanger` needs before
/// anything is planned: present when it is required, and minted for one of
/// the audiences it will be presented to (`audience_override` is
/// `--audience`). Returns those audiences, which also key the cache.
pub fn admit_token(
    exchanger: &dyn Exchanger,
    audience_override: Option<&str>,
    token: Option<&ServiceAccountToken>,
    api_version: &str,
) -> Result<Vec<String>> {
    let audiences = expected_audiences(exchanger, audience_override);
    match token {
        Some(token) => token.require_audience(&audiences, exchanger.provider().name())?,
        None if exchanger.requires_token() => {
            return Err(Error::token("the request carries no service account token").fix(format!(
                "give this provider entry tokenAttributes (serviceAccountTokenAudience, cacheType, requireServiceAccount) \
                 and apiVersion credentialprovider.kubelet.k8s.io/v1 in the kubelet's CredentialProviderConfig; \
                 the request used {api_version}"
            )));
        }
        None => {}
    }
    Ok(audiences)
}

/// The longest annotation value an exchanger reads. An IAM role ARN, the
/// longest identity any provider takes, is under 700 characters (a 64-
/// character name under a 512-character path); anything longer is not a
/// name.
pub const MAX_ANNOTATION_VALUE: usize = 1024;

/// Checks every annotation `exchanger` reads, before any plan or network
/// call, with one rule for every provider: a tenant writes these values,
/// so an empty or blank one (never a request for a default), a control
/// character (CR LF into a header, ESC into a terminal), a line or
/// paragraph separator or a bidirectional override (text that reads
/// differently from what it is), or a value longer than
/// [`MAX_ANNOTATION_VALUE`] is refused, naming the annotation. Leading and
/// trailing spaces stay the providers' to trim. Each provider then checks
/// the form of its own identity (an anchored pattern).
pub fn check_annotations(
    exchanger: &dyn Exchanger,
    annotations: &std::collections::BTreeMap<String, String>,
) -> Result<()> {
    for key in exchanger.annotation_keys() {
        let Some(value) = annotations.get(&key) else {
            continue;
        };
        let why = if value.trim().is_empty() {
            Some("is empty".to_string())
        } else if let Some(c) = value.chars().find(|&c| wicp_base::redact::is_hidden(c)) {
            Some(format!(
                "holds the control character U+{:04X}",
                u32::from(c)
            ))
        } else if value.len() > MAX_ANNOTATION_VALUE {
            Some(format!(
                "is {} bytes long, more than the {MAX_ANNOTATION_VALUE} any identity needs",
                value.len()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Error::annotation_key(&key, format!(
                "service account annotation {key} {why}, so it names no identity"
            ))
            .fix(format!(
                "set {key} to the identity exactly as the provider's docs show it, or remove the annotation"
            )));
        }
    }
    Ok(())
}
