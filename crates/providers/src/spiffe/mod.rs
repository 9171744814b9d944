//! SPIFFE identities for pulls (`--identity spiffe`): a JWT-SVID from the
//! node's SPIRE agent takes the place of the service account token.
//!
//! The kubelet's token still arrives (KEP-4412), but it never leaves the
//! node: its claims, which the kubelet got from the API server for this
//! pod, say which Kubernetes workload is pulling, and become the
//! selectors of one `FetchJWTSVIDs` call to the agent's Delegated Identity
//! API ([`selectors`]). The SVID the agent mints for the one registration
//! entry they match is then presented exactly where the token would have
//! been (the password of passthrough, the `subject_token` of the token
//! exchanges, the web identity of the clouds): the provider does not know
//! the difference ([`present`]).
//!
//! Why the Delegated Identity API with selectors, and not SPIRE's newer
//! SPIFFE Broker API (experimental since v1.15.2), in which the agent
//! attests a Kubernetes object reference itself: the broker API is
//! experimental and absent from every agent before it, and the selectors
//! here come from the same source the broker would check, the token the
//! API server issued for this pod, never from anything a tenant writes.
//! docs/spiffe.md says what each costs.
//!
//! Annotations never reach the selectors, and never change the socket or
//! the audience: a tenant cannot name another workload's identity.

mod agent;
mod wire;

use std::path::{Path, PathBuf};

use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Fact, Result, quote};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};
use wicp_base::secret::Secret;
use wicp_kubelet::request::token::{ServiceAccountToken, SvidClaims};

pub use wire::Selector;

/// Whose identity a pull presents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Source {
    /// The service account token the kubelet passes (KEP-4412).
    #[default]
    ServiceAccount,
    /// A JWT-SVID from the node's SPIRE agent, for the selectors of the
    /// kubelet's token.
    Spiffe,
}

impl wicp_base::flags::Choice for Source {
    const CHOICES: &'static [(&'static str, Self)] = &[
        ("service-account", Source::ServiceAccount),
        ("spiffe", Source::Spiffe),
    ];
}

/// `--spiffe-audience`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static SPIFFE_AUDIENCE: FlagSpec = FlagSpec {
    long: "spiffe-audience",
    env: "WICP_SPIFFE_AUDIENCE",
    takes: Takes::One,
    value: "AUDIENCE",
    default: "",
    help: "With --identity spiffe: the audience the JWT-SVID is minted for. \
        Default: --audience, else the provider's own audience.",
};

/// `--spire-admin-socket`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static SPIRE_ADMIN_SOCKET: FlagSpec = FlagSpec {
    long: "spire-admin-socket",
    env: "WICP_SPIRE_ADMIN_SOCKET",
    takes: Takes::One,
    value: "PATH",
    default: "",
    help: "With --identity spiffe: the SPIRE agent's admin socket \
        (admin_socket_path; on Windows the named pipe \\\\.\\pipe\\NAME of \
        experimental.admin_named_pipe_name).",
};

/// `--identity`.
pub(crate) static IDENTITY: FlagSpec = FlagSpec {
    long: "identity",
    env: "WICP_IDENTITY",
    takes: Takes::One,
    value: "SOURCE",
    default: "",
    help: "Whose identity a pull presents: `service-account`, the kubelet's \
        token; or `spiffe`, a JWT-SVID the node's SPIRE agent mints for the \
        pod's k8s selectors (ns, sa, pod-name, pod-uid, read from that \
        token), presented in its place. The token then never leaves the \
        node. Default: service-account.",
};

#[derive(Clone, Debug, Default)]
pub struct Options {
    // Not a clap default_value: a cache hit then parses no value for it.
    /// [`IDENTITY`].
    pub identity: Option<Source>,

    /// [`SPIRE_ADMIN_SOCKET`].
    pub spire_admin_socket: Option<PathBuf>,

    /// [`SPIFFE_AUDIENCE`].
    pub spiffe_audience: Option<String>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[&IDENTITY, &SPIRE_ADMIN_SOCKET, &SPIFFE_AUDIENCE];

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            identity: given.choice(&IDENTITY)?,
            spire_admin_socket: given.path(&SPIRE_ADMIN_SOCKET),
            spiffe_audience: given.text(&SPIFFE_AUDIENCE)?,
        })
    }
}

/// `--identity spiffe`, checked: where the agent is.
#[derive(Clone, Copy, Debug)]
pub struct Spiffe<'a> {
    pub socket: &'a Path,
    audience: Option<&'a str>,
}

impl Options {
    /// Whose identity a pull presents (`--identity`, by default the
    /// service account's).
    pub fn source(&self) -> Source {
        self.identity.unwrap_or_default()
    }

    /// The SPIFFE settings when `--identity spiffe`, `None` for the
    /// service account; refuses a combination that cannot mean what the
    /// admin meant (a SPIFFE flag without `--identity spiffe`, no socket).
    pub fn spiffe(&self) -> Result<Option<Spiffe<'_>>> {
        match (self.source(), &self.spire_admin_socket) {
            (Source::Spiffe, Some(socket)) => Ok(Some(Spiffe {
                socket,
                audience: self.spiffe_audience.as_deref(),
            })),
            (Source::Spiffe, None) => Err(Error::flag(
                &SPIRE_ADMIN_SOCKET,
                "is not set, and --identity spiffe needs the SPIRE agent's admin socket",
            )
            .fix("pass --spire-admin-socket (or WICP_SPIRE_ADMIN_SOCKET) with the agent's admin_socket_path")),
            (Source::ServiceAccount, _)
                if self.spire_admin_socket.is_some() || self.spiffe_audience.is_some() =>
            {
                let flag = if self.spire_admin_socket.is_some() {
                    &SPIRE_ADMIN_SOCKET
                } else {
                    &SPIFFE_AUDIENCE
                };
                Err(Error::flag(
                    flag,
                    "is set, but --spire-admin-socket and --spiffe-audience are read only with --identity spiffe",
                )
                .fix("add --identity spiffe, or remove the SPIFFE flags to pull with the service account token"))
            }
            (Source::ServiceAccount, _) => Ok(None),
        }
    }
}

impl Spiffe<'_> {
    /// The audience the SVID is asked for: `--spiffe-audience`, else
    /// `--audience` (`audience_flag`), else the first of the provider's
    /// (`provider_audiences`).
    pub fn audience(
        &self,
        audience_flag: Option<&str>,
        provider_audiences: &[String],
        provider: &str,
    ) -> Result<String> {
        self.audience
            .or(audience_flag)
            .or(provider_audiences.first().map(String::as_str))
            .map(str::to_string)
            .ok_or_else(|| {
                Error::flag(
                    &SPIFFE_AUDIENCE,
                    format!("is not set, and the {provider} provider has no audience of its own for the JWT-SVID"),
                )
                .fix(
                    "pass --spiffe-audience with the audience the registry or token service trusts",
                )
            })
    }
}

/// The k8s workload selectors the kubelet's token vouches for, as SPIRE's
/// k8s workload attestor names them (`k8s:ns`, `k8s:sa`, `k8s:pod-name`,
/// `k8s:pod-uid`). Only these: the pod's labels, images and owners are not
/// in the token, so entries that also need them cannot match.
pub fn selectors(token: &ServiceAccountToken) -> Vec<Selector> {
    let claims = token.claims();
    let sa = &claims.service_account;
    let mut values = vec![format!("ns:{}", sa.namespace), format!("sa:{}", sa.name)];
    if let Some(pod) = &claims.pod {
        values.push(format!("pod-name:{}", pod.name));
        values.push(format!("pod-uid:{}", pod.uid));
    }
    values
        .into_iter()
        .map(|value| Selector {
            r#type: "k8s".to_string(),
            value,
        })
        .collect()
}

/// The selectors as one line, for messages and `explain`.
pub fn describe(selectors: &[Selector]) -> String {
    selectors
        .iter()
        .map(|s| format!("{}:{}", s.r#type, s.value))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The agent's stable name, the `service` fact of its errors.
const AGENT: &str = "the SPIRE agent";

/// Fetches the JWT-SVID for `kubelet`'s workload and `audience` from the
/// agent, and returns it as the token the provider presents, still named
/// for the service account in messages. Exactly one SVID must come back.
pub fn present(
    spiffe: &Spiffe<'_>,
    audience: &str,
    kubelet: &ServiceAccountToken,
    deadline: &Deadline,
) -> Result<ServiceAccountToken> {
    let selectors = selectors(kubelet);
    let request = wire::FetchJwtSvidsRequest {
        audience: vec![audience.to_string()],
        selectors: selectors.clone(),
        pid: 0,
    };
    // The agent's failures, and what is wrong with its answer, name it as
    // their `service`, here for all of them.
    let from_agent = |e: Error| e.with(Fact::Service(AGENT));
    let mut svids = agent::fetch(spiffe.socket, request, deadline).map_err(from_agent)?;
    let svid = match (svids.pop(), svids.is_empty()) {
        (Some(svid), true) => svid,
        (None, _) => {
            return Err(from_agent(no_entry(&selectors)));
        }
        (Some(last), false) => {
            svids.push(last);
            return Err(from_agent(several(&svids, &selectors)));
        }
    };
    let spiffe_id = spiffe_id(&svid).map_err(from_agent)?;
    let raw = Secret::new(svid.token);
    let claims = SvidClaims::read(&raw, &spiffe_id, svid.expires_at)?;
    if claims.issuer().is_none() {
        wicp_base::log::warning!(
            "the JWT-SVID for {spiffe_id} has no iss claim: a SPIRE server sets one only with jwt_issuer, \
             and OIDC federation (AWS, GCP, Entra, Zot, Quay) needs it, equal to the OIDC discovery provider's URL"
        );
    }
    wicp_base::log::debug!(
        "SPIRE minted {spiffe_id} for {} ({}), audience {}",
        kubelet.service_account(),
        describe(&selectors),
        quote(audience)
    );
    Ok(ServiceAccountToken::presenting_svid(raw, claims, kubelet))
}

fn no_entry(selectors: &[Selector]) -> Error {
    Error::upstream(format!(
        "the SPIRE agent returned no JWT-SVID for the selectors {}",
        describe(selectors)
    ))
    .fix("register an entry whose selectors are all among those (k8s:ns and k8s:sa are the usual pair)")
}

/// How many SPIFFE IDs an error about several SVIDs names: the rest are
/// counted, so that the one line stays readable however many entries
/// matched.
const SHOWN_IDS: usize = 5;

fn several(svids: &[wire::JwtSvid], selectors: &[Selector]) -> Error {
    let mut ids: Vec<String> = svids
        .iter()
        .take(SHOWN_IDS)
        .map(|s| spiffe_id(s).unwrap_or_else(|_| "(no valid SPIFFE ID)".to_string()))
        .collect();
    if svids.len() > SHOWN_IDS {
        ids.push(format!("and {} more", svids.len() - SHOWN_IDS));
    }
    Error::upstream(format!(
        "the SPIRE agent returned {} JWT-SVIDs for the selectors {} ({}); which identity pulls would be a guess",
        svids.len(),
        describe(selectors),
        ids.join(", ")
    ))
    .fix("make exactly one registration entry match these selectors (an entry matches when all its selectors are among them)")
}

/// The SVID's SPIFFE ID as a URI, checked the way the SPIFFE ID spec
/// (SPIFFE-ID.md §2) restricts it, so that no odd ID reaches a message
/// or a cache key.
fn spiffe_id(svid: &wire::JwtSvid) -> Result<String> {
    let bad = |why: &str| {
        Error::upstream(format!(
            "the SPIRE agent returned a JWT-SVID whose SPIFFE ID {why}"
        ))
        .fix("check the SPIRE agent and server versions; the registration entry's SPIFFE ID must be valid")
    };
    let id = svid.id.as_ref().ok_or_else(|| bad("is missing"))?;
    let domain_ok = !id.trust_domain.is_empty()
        && id.trust_domain.len() <= 255
        && id
            .trust_domain
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b));
    let path_ok = id.path.len() <= 2048
        && (id.path.is_empty()
            || (id.path.starts_with('/')
                && id.path.split('/').skip(1).all(|segment| {
                    !segment.is_empty()
                        && segment != "."
                        && segment != ".."
                        && segment
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
                })));
    if !domain_ok || !path_ok {
        return Err(bad("is not a valid SPIFFE ID"));
    }
    Ok(format!("spiffe://{}{}", id.trust_domain, id.path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(identity: Source, socket: Option<&str>, audience: Option<&str>) -> Options {
        Options {
            identity: Some(identity),
            spire_admin_socket: socket.map(PathBuf::from),
            spiffe_audience: audience.map(str::to_string),
        }
    }

    #[test]
    fn spiffe_flags_mean_something_only_together() {
        assert!(matches!(
            options(Source::ServiceAccount, None, None).spiffe(),
            Ok(None)
        ));
        let missing = options(Source::Spiffe, None, None).spiffe().unwrap_err();
        assert_eq!(missing.flagged(), Some((&SPIRE_ADMIN_SOCKET).into()));
        let stray = options(Source::ServiceAccount, Some("/run/a.sock"), None)
            .spiffe()
            .unwrap_err();
        assert_eq!(stray.flagged(), Some((&SPIRE_ADMIN_SOCKET).into()));
        let stray = options(Source::ServiceAccount, None, Some("zot"))
            .spiffe()
            .unwrap_err();
        assert_eq!(stray.flagged(), Some((&SPIFFE_AUDIENCE).into()));
        assert!(stray.to_string().contains("--identity spiffe"), "{stray}");
        let set = options(Source::Spiffe, Some("/run/a.sock"), Some("zot"));
        let spiffe = set
            .spiffe()
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("spiffe"));
        assert_eq!(spiffe.socket, Path::new("/run/a.sock"));
        assert_eq!(
            spiffe.audience(Some("flag"), &[], "passthrough").ok(),
            Some("zot".into())
        );
    }

    #[test]
    fn the_audience_falls_back_to_audience_then_the_providers() {
        let set = options(Source::Spiffe, Some("/s"), None);
        let spiffe = set
            .spiffe()
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("spiffe"));
        let own = vec!["sts.amazonaws.com".to_string()];
        assert_eq!(
            spiffe.audience(Some("flag"), &own, "aws").ok(),
            Some("flag".into())
        );
        assert_eq!(
            spiffe.audience(None, &own, "aws").ok(),
            Some("sts.amazonaws.com".into())
        );
        let none = spiffe.audience(None, &[], "passthrough").unwrap_err();
        assert!(none.to_string().contains("--spiffe-audience"), "{none}");
    }

    fn svid_with(trust_domain: &str, path: &str) -> wire::JwtSvid {
        wire::JwtSvid {
            token: String::new(),
            id: Some(wire::SpiffeId {
                trust_domain: trust_domain.into(),
                path: path.into(),
            }),
            expires_at: 0,
            issued_at: 0,
            hint: String::new(),
        }
    }

    #[test]
    fn only_valid_spiffe_ids_are_taken() {
        assert_eq!(
            spiffe_id(&svid_with("example.org", "/ns/team/sa/puller")).ok(),
            Some("spiffe://example.org/ns/team/sa/puller".into())
        );
        for (td, path) in [
            ("", "/a"),
            ("Example.org", "/a"),
            ("example.org", "a"),
            ("example.org", "/a//b"),
            ("example.org", "/a/../b"),
            ("example.org", "/a\nb"),
            ("example.org", "/a b"),
            ("exa mple", "/a"),
        ] {
            assert!(spiffe_id(&svid_with(td, path)).is_err(), "{td:?} {path:?}");
        }
        assert!(spiffe_id(&wire::JwtSvid::default()).is_err());
    }
}
