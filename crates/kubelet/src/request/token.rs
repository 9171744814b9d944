//! The projected service account token the kubelet passes in the request.
//!
//! We decode its claims without checking the signature: the kubelet minted it
//! a moment ago through the TokenRequest API, and the party that must trust
//! it (STS, Entra ID, Google STS, the registry) verifies it against the
//! cluster's issuer anyway. What we need from it is who the pod is (for
//! messages, session names and cache keys), whether it is still valid, and
//! whether its audience is the one the exchanger will present it to. Those
//! checks happen before any network call, so a misconfigured node fails fast
//! with a precise message instead of an opaque upstream refusal.

use serde::Deserialize;

use wicp_base::duration::format_unix;
use wicp_base::error::{Error, Fact, Result, quote};
use wicp_base::secret::Secret;

use base64::Engine;

/// Tokens are a few hundred bytes to a few kilobytes; this bounds the work
/// done on a hostile one.
const MAX_TOKEN_BYTES: usize = 64 * 1024;

/// The fix shown whenever the token itself is unusable.
const TOKEN_FIX: &str = "the kubelet must pass a projected service account token: \
     set tokenAttributes in this provider's CredentialProviderConfig entry (apiVersion credentialprovider.kubelet.k8s.io/v1)";

/// Who the pod is, from the token's `kubernetes.io` claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccount {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl std::fmt::Display for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The pod a token is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    pub uid: String,
}

/// The claims we rely on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    pub issuer: String,
    pub subject: String,
    pub audiences: Vec<String>,
    pub expires_at: i64,
    pub issued_at: i64,
    pub service_account: ServiceAccount,
    pub pod: Option<Pod>,
    /// Under `--identity spiffe`: the SPIFFE ID of the JWT-SVID presented
    /// in the service account token's place (`subject` is the same ID);
    /// it keys the cache instead of the service account.
    pub spiffe_id: Option<String>,
}

/// A decoded service account token: the raw token (secret) and its claims.
#[derive(Debug)]
pub struct ServiceAccountToken {
    raw: Secret,
    claims: Claims,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum WireAudience {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct WireClaims {
    iss: Option<String>,
    sub: Option<String>,
    aud: Option<WireAudience>,
    exp: Option<serde_json::Number>,
    iat: Option<serde_json::Number>,
    #[serde(rename = "kubernetes.io")]
    kubernetes: Option<WireKubernetes>,
}

#[derive(Deserialize)]
struct WireKubernetes {
    namespace: Option<String>,
    serviceaccount: Option<WireObject>,
    pod: Option<WireObject>,
}

#[derive(Deserialize)]
struct WireObject {
    name: Option<String>,
    uid: Option<String>,
}

#[derive(Deserialize)]
struct WireHeader {
    alg: Option<String>,
}

impl ServiceAccountToken {
    /// Decodes `raw` and checks that it is a signed JWT with the claims of a
    /// Kubernetes service account token that has not expired at `now`.
    pub fn decode(raw: Secret, now: i64) -> Result<Self> {
        let claims = decode_claims(raw.expose())?;
        if claims.expires_at <= now {
            return Err(Error::token(format!(
                "the service account token for {} expired at {} ({} s ago)",
                claims.service_account,
                format_unix(claims.expires_at),
                now.saturating_sub(claims.expires_at)
            ))
            .with(Fact::Claim("exp".to_string()))
            .fix("check the node's clock; the kubelet mints a fresh token for each pull"));
        }
        Ok(ServiceAccountToken { raw, claims })
    }

    pub fn claims(&self) -> &Claims {
        &self.claims
    }

    pub fn service_account(&self) -> &ServiceAccount {
        &self.claims.service_account
    }

    /// The token itself, for the one call that presents it upstream.
    pub fn secret(&self) -> &Secret {
        &self.raw
    }

    /// Checks that the token was minted for one of `expected` audiences.
    /// `provider` names the exchanger in the message.
    pub fn require_audience(&self, expected: &[String], provider: &str) -> Result<()> {
        if audience_accepted(expected, &self.claims.audiences) {
            return Ok(());
        }
        let wanted = expected
            .iter()
            .map(|e| quote(e))
            .collect::<Vec<_>>()
            .join(" or ");
        let got = self
            .claims
            .audiences
            .iter()
            .map(|a| quote(a))
            .collect::<Vec<_>>()
            .join(", ");
        if let Some(id) = &self.claims.spiffe_id {
            // Under --identity spiffe the plugin asked the agent for
            // `wanted` itself: an SVID for another audience is the agent's
            // doing, not the kubelet's token's.
            return Err(Error::upstream(format!(
                "the JWT-SVID the SPIRE agent returned for {id} has the audience [{got}], not {wanted}, \
                 which the plugin asked for and the {provider} exchanger presents it to"
            ))
            .with(Fact::Claim("aud".to_string()))
            .with(Fact::Service("the SPIRE agent"))
            .fix("check what serves --spire-admin-socket: a SPIRE agent mints a JWT-SVID for the audience it is asked for"));
        }
        Err(Error::token(format!(
            "the service account token's audience [{got}] does not include {wanted}, which the {provider} exchanger presents it to"
        ))
        .with(Fact::Claim("aud".to_string()))
        .fix(format!(
            "set tokenAttributes.serviceAccountTokenAudience: {} in this provider's CredentialProviderConfig entry, \
             or pass --audience with the audience your identity provider trusts",
            expected.first().map(String::as_str).unwrap_or_default()
        )))
    }
}

/// What the plugin reads of a JWT-SVID the SPIRE agent returned
/// (`--identity spiffe`), without verifying it: the agent minted it a
/// moment ago over its admin socket, and the party it is presented to
/// verifies it against the SPIRE issuer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SvidClaims {
    spiffe_id: String,
    issuer: Option<String>,
    audiences: Vec<String>,
    expires_at: i64,
    issued_at: i64,
}

impl SvidClaims {
    /// Reads the JWT-SVID `raw`, which the agent said is `spiffe_id`'s
    /// until `expires_at`: its `sub` must be that ID, and it must carry an
    /// audience and not have expired. The earlier of the two expiries
    /// counts.
    pub fn read(raw: &Secret, spiffe_id: &str, expires_at: i64) -> Result<SvidClaims> {
        let bad = |why: String| {
            Error::upstream(format!("the JWT-SVID the SPIRE agent returned for {spiffe_id} {why}"))
                .fix("check the SPIRE agent's and server's versions and logs: the agent returns a signed JWT per entry")
        };
        let token = raw.expose();
        let parts: Vec<&str> = token.split('.').collect();
        let (true, [header, payload, signature]) =
            (token.len() <= MAX_TOKEN_BYTES, parts.as_slice())
        else {
            return Err(bad("is not a JWT of at most 64 KiB".to_string()));
        };
        if signature.is_empty() || require_signed(header).is_err() {
            return Err(bad("is not signed".to_string()));
        }
        // The claims of a service account token, of which an SVID has
        // all but `kubernetes.io`.
        let claims: WireClaims = segment(payload, "payload")
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or_else(|| bad("has no JSON claims".to_string()))?;
        if claims.sub.as_deref() != Some(spiffe_id) {
            return Err(bad(format!(
                "names another subject ({})",
                quote(claims.sub.as_deref().unwrap_or(""))
            )));
        }
        let audiences = match claims.aud {
            Some(WireAudience::One(a)) => vec![a],
            Some(WireAudience::Many(a)) => a,
            None => Vec::new(),
        };
        if audiences.is_empty() {
            return Err(bad("has no audience".to_string()));
        }
        let exp = number(claims.exp, "exp").map_err(|_| bad("has no numeric exp".to_string()))?;
        let now = wicp_base::duration::unix_now();
        let expires_at = exp.min(expires_at);
        if expires_at <= now {
            return Err(bad(format!(
                "expired at {} ({} s ago)",
                format_unix(expires_at),
                now.saturating_sub(expires_at)
            ))
            .fix("check the node's clock against the SPIRE server's"));
        }
        Ok(SvidClaims {
            spiffe_id: spiffe_id.to_string(),
            issuer: claims.iss.filter(|i| !i.is_empty()),
            audiences,
            expires_at,
            issued_at: claims.iat.and_then(|n| n.as_i64()).unwrap_or(now),
        })
    }

    /// What `explain` plans with, without asking the agent: an SVID of
    /// `audience` for an ID only the agent knows.
    pub fn stand_in(audience: &str, now: i64) -> SvidClaims {
        SvidClaims {
            spiffe_id: "spiffe://<the ID the SPIRE agent returns>".to_string(),
            issuer: None,
            audiences: vec![audience.to_string()],
            expires_at: now.saturating_add(300),
            issued_at: now,
        }
    }

    /// The `iss` claim, present only when the SPIRE server sets
    /// `jwt_issuer`: without it no OIDC federation (AWS, GCP, Entra, Zot,
    /// Quay) can trust the SVID.
    pub fn issuer(&self) -> Option<&str> {
        self.issuer.as_deref()
    }
}

impl ServiceAccountToken {
    /// The JWT-SVID `raw` standing in for `kubelet`'s token: presented
    /// wherever the token would be, with the SVID's own audiences, issuer
    /// and expiry, and still named for the service account in messages.
    pub fn presenting_svid(
        raw: Secret,
        svid: SvidClaims,
        kubelet: &ServiceAccountToken,
    ) -> ServiceAccountToken {
        let claims = Claims {
            issuer: svid.issuer.unwrap_or_default(),
            subject: svid.spiffe_id.clone(),
            audiences: svid.audiences,
            expires_at: svid.expires_at,
            issued_at: svid.issued_at,
            service_account: kubelet.claims.service_account.clone(),
            pod: kubelet.claims.pod.clone(),
            spiffe_id: Some(svid.spiffe_id),
        };
        ServiceAccountToken { raw, claims }
    }

    /// The SPIFFE ID presented in the token's place, under `--identity spiffe`.
    pub fn spiffe_id(&self) -> Option<&str> {
        self.claims.spiffe_id.as_deref()
    }
}

/// The audience rule, in one place: a token minted for `audiences` is
/// accepted when the exchanger expects no audience in particular, or one
/// of `expected` is among them. Serving ([`ServiceAccountToken::require_audience`])
/// and `check-config` (for the entry's `serviceAccountTokenAudience`) both
/// read it.
pub fn audience_accepted(expected: &[String], audiences: &[String]) -> bool {
    expected.is_empty() || expected.iter().any(|e| audiences.contains(e))
}

fn segment(segment: &str, what: &str) -> Result<Vec<u8>> {
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    engine.decode(segment).map_err(|_| {
        Error::token(format!(
            "the service account token's {what} is not valid base64url"
        ))
        .fix(TOKEN_FIX)
    })
}

/// The `exp` claim of a token an upstream issued, if it is a JWT, read
/// without verifying it: the token exchanges use it only to know how long
/// the credential they were handed will work (`cacheDuration`), never to
/// trust it. `None` for anything that is not a JWS compact token with a
/// numeric `exp`.
pub fn unverified_expiry(token: &str) -> Option<i64> {
    match unverified_claim(token, "exp")? {
        serde_json::Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        _ => None,
    }
}

/// One claim of a token an upstream issued, read without verifying it (see
/// [`unverified_expiry`]): the Entra tenant (`tid`) of a managed identity's
/// token, for ACR's exchange form.
pub fn unverified_claim(token: &str, name: &str) -> Option<serde_json::Value> {
    if token.len() > MAX_TOKEN_BYTES {
        return None;
    }
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else {
        return None;
    };
    let mut claims: serde_json::Value =
        serde_json::from_slice(&segment(payload, "payload").ok()?).ok()?;
    claims.get_mut(name).map(serde_json::Value::take)
}

fn number(n: Option<serde_json::Number>, claim: &str) -> Result<i64> {
    let n = n.ok_or_else(|| missing(claim))?;
    n.as_i64()
        .or_else(|| n.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
        .ok_or_else(|| {
            Error::token(format!(
                "the service account token's {claim} claim is not a number"
            ))
            .with(Fact::Claim(claim.to_string()))
            .fix(TOKEN_FIX)
        })
}

fn missing(claim: &str) -> Error {
    Error::token(format!(
        "the service account token has no {claim} claim, so it is not a Kubernetes service account token"
    ))
    .with(Fact::Claim(claim.to_string()))
    .fix(TOKEN_FIX)
}

fn required(value: Option<String>, claim: &str) -> Result<String> {
    value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| missing(claim))
}

/// Refuses a token whose JOSE header names no signing algorithm. JOSE
/// algorithm names are case-sensitive, but a verifier somewhere down the
/// line may not be: every spelling of "none" is refused.
fn require_signed(header: &str) -> Result<()> {
    let header: WireHeader = serde_json::from_slice(&segment(header, "header")?).map_err(|_| {
        Error::token("the service account token's header is not a JSON object").fix(TOKEN_FIX)
    })?;
    let alg = header.alg.as_deref().map_or("", str::trim);
    if alg.is_empty() || alg.eq_ignore_ascii_case("none") {
        return Err(Error::token(
            "the service account token is not signed (alg is none or missing)",
        )
        .fix(TOKEN_FIX));
    }
    Ok(())
}

/// The `kubernetes.io` claims: the service account, which `subject` must
/// name, and the pod when the token is bound to one.
fn kubernetes_claims(
    kubernetes: WireKubernetes,
    subject: &str,
) -> Result<(ServiceAccount, Option<Pod>)> {
    let sa = kubernetes
        .serviceaccount
        .ok_or_else(|| missing("kubernetes.io.serviceaccount"))?;
    let service_account = ServiceAccount {
        namespace: required(kubernetes.namespace, "kubernetes.io.namespace")?,
        name: required(sa.name, "kubernetes.io.serviceaccount.name")?,
        uid: required(sa.uid, "kubernetes.io.serviceaccount.uid")?,
    };
    let expected_subject = format!(
        "system:serviceaccount:{}:{}",
        service_account.namespace, service_account.name
    );
    if subject != expected_subject {
        return Err(Error::token(format!(
            "the service account token's sub {} does not match its kubernetes.io claim ({expected_subject})",
            quote(subject)
        ))
        .with(Fact::Claim("sub".to_string()))
        .fix(TOKEN_FIX));
    }
    let pod = match kubernetes.pod {
        Some(WireObject {
            name: Some(name),
            uid: Some(uid),
        }) => Some(Pod { name, uid }),
        _ => None,
    };
    Ok((service_account, pod))
}

/// Decodes the claims of a JWS compact token without verifying it.
pub fn decode_claims(token: &str) -> Result<Claims> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Error::token(format!(
            "the service account token is longer than {MAX_TOKEN_BYTES} bytes"
        ))
        .fix(TOKEN_FIX));
    }
    let parts: Vec<&str> = token.split('.').collect();
    let [header, payload, signature] = parts.as_slice() else {
        return Err(Error::token(format!(
            "the service account token is not a JWT: it has {} dot-separated segments instead of 3",
            parts.len()
        ))
        .fix(TOKEN_FIX));
    };
    if signature.is_empty() {
        return Err(Error::token("the service account token is not signed").fix(TOKEN_FIX));
    }
    require_signed(header)?;
    let claims: WireClaims =
        serde_json::from_slice(&segment(payload, "payload")?).map_err(|_| {
            Error::token(
                "the service account token's claims are not a JSON object of the expected shape",
            )
            .fix(TOKEN_FIX)
        })?;

    let subject = required(claims.sub, "sub")?;
    let kubernetes = claims.kubernetes.ok_or_else(|| missing("kubernetes.io"))?;
    let (service_account, pod) = kubernetes_claims(kubernetes, &subject)?;
    let audiences = match claims.aud {
        Some(WireAudience::One(a)) => vec![a],
        Some(WireAudience::Many(a)) => a,
        None => Vec::new(),
    };
    if audiences.is_empty() {
        return Err(missing("aud"));
    }
    Ok(Claims {
        issuer: required(claims.iss, "iss")?,
        subject,
        audiences,
        expires_at: number(claims.exp, "exp")?,
        issued_at: number(claims.iat, "iat")?,
        service_account,
        pod,
        spiffe_id: None,
    })
}

/// A compact JWS of `header` and `claims` whose signature is not one, for
/// the tests of code that reads tokens (ours, and those upstreams issue).
#[cfg(any(test, feature = "test-support"))]
pub fn jwt(header: &str, claims: &str) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}.c2lnbmF0dXJl",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    )
}

/// A token of team/api for `audience`, for the tests of exchangers.
#[cfg(any(test, feature = "test-support"))]
#[allow(clippy::panic)]
pub fn token_for(audience: &str) -> ServiceAccountToken {
    let claims = format!(
        r#"{{"aud":["{audience}"],"exp":4102444800,"iat":1000,"iss":"https://issuer.example","sub":"system:serviceaccount:team:api",
        "kubernetes.io":{{"namespace":"team","serviceaccount":{{"name":"api","uid":"u-1"}}}}}}"#
    );
    let raw = Secret::new(jwt(r#"{"alg":"RS256"}"#, &claims));
    ServiceAccountToken::decode(raw, 2000).unwrap_or_else(|e| panic!("test token: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JWT-SVID is taken only for the SPIFFE ID the agent named, with
    /// an audience, signed and unexpired; the earlier expiry counts.
    #[test]
    fn an_svid_is_read_only_as_what_the_agent_said() {
        let id = "spiffe://example.org/ns/team/sa/puller";
        let now = wicp_base::duration::unix_now();
        let header = r#"{"alg":"ES256","kid":"k"}"#;
        let svid = |claims: String| Secret::new(jwt(header, &claims));
        let good = format!(
            r#"{{"sub":"{id}","aud":["zot"],"exp":{},"iat":{now},"iss":"https://oidc"}}"#,
            now + 300
        );
        let claims =
            SvidClaims::read(&svid(good.clone()), id, now + 100).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(claims.expires_at, now + 100);
        assert_eq!(claims.issuer(), Some("https://oidc"));
        assert_eq!(claims.audiences, vec!["zot".to_string()]);
        let no_iss = format!(r#"{{"sub":"{id}","aud":"zot","exp":{}}}"#, now + 300);
        assert_eq!(
            SvidClaims::read(&svid(no_iss), id, now + 300)
                .ok()
                .and_then(|c| c.issuer),
            None
        );
        for (claims, why) in [
            (
                format!(
                    r#"{{"sub":"spiffe://example.org/other","aud":"zot","exp":{}}}"#,
                    now + 300
                ),
                "another subject",
            ),
            (
                format!(r#"{{"sub":"{id}","exp":{}}}"#, now + 300),
                "no audience",
            ),
            (
                format!(r#"{{"sub":"{id}","aud":"zot","exp":{}}}"#, now - 1),
                "expired",
            ),
            (format!(r#"{{"sub":"{id}","aud":"zot"}}"#), "no numeric exp"),
        ] {
            let e = SvidClaims::read(&svid(claims), id, now + 300).unwrap_err();
            assert!(e.to_string().contains(why), "{why}: {e}");
        }
        let unsigned = Secret::new(jwt(r#"{"alg":"none"}"#, &good));
        assert!(
            SvidClaims::read(&unsigned, id, now + 300)
                .unwrap_err()
                .to_string()
                .contains("not signed")
        );
        assert!(SvidClaims::read(&Secret::new("opaque"), id, now + 300).is_err());
    }

    #[test]
    fn the_audience_rule() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(audience_accepted(&[], &list(&["anything"])));
        assert!(audience_accepted(&[], &[]));
        assert!(audience_accepted(&list(&["a", "b"]), &list(&["x", "b"])));
        assert!(!audience_accepted(&list(&["a"]), &list(&["b"])));
        assert!(!audience_accepted(&list(&["a"]), &[]));
    }
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    const HEADER: &str = r#"{"alg":"RS256","kid":"k"}"#;

    fn claims(exp: i64, aud: &str) -> String {
        format!(
            r#"{{"aud":{aud},"exp":{exp},"iat":1000,"nbf":1000,"iss":"https://issuer.example","sub":"system:serviceaccount:team:api",
            "kubernetes.io":{{"namespace":"team","serviceaccount":{{"name":"api","uid":"u-1"}},"pod":{{"name":"api-0","uid":"p-1"}}}}}}"#
        )
    }

    #[test]
    fn decodes_a_service_account_token() {
        let t = ServiceAccountToken::decode(
            Secret::new(jwt(HEADER, &claims(5000, r#"["sts.amazonaws.com"]"#))),
            2000,
        )
        .unwrap();
        let c = t.claims();
        assert_eq!(c.service_account.to_string(), "team/api");
        assert_eq!(c.service_account.uid, "u-1");
        assert_eq!(c.pod.as_ref().unwrap().uid, "p-1");
        assert_eq!(c.audiences, ["sts.amazonaws.com"]);
        assert!(
            t.require_audience(&["sts.amazonaws.com".into()], "aws")
                .is_ok()
        );
        let err = t
            .require_audience(&["api://AzureADTokenExchange".into()], "azure")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("serviceAccountTokenAudience: api://AzureADTokenExchange"),
            "{err}"
        );
        assert!(err.contains("\"sts.amazonaws.com\""), "{err}");
    }

    #[test]
    fn single_string_audience_is_accepted() {
        let t =
            ServiceAccountToken::decode(Secret::new(jwt(HEADER, &claims(5000, r#""harbor""#))), 0)
                .unwrap();
        assert_eq!(t.claims().audiences, ["harbor"]);
    }

    #[test]
    fn refuses_broken_tokens() {
        let good = claims(5000, r#"["a"]"#);
        let cases = [
            ("a.b".to_string(), "2 dot-separated segments"),
            ("".to_string(), "1 dot-separated"),
            (format!("{}.", jwt(HEADER, &good)), "4 dot-separated"),
            ("!!!.e30.sig".to_string(), "header is not valid base64url"),
            (jwt("[]", &good), "header is not a JSON object"),
            (jwt(r#"{"alg":"none"}"#, &good), "not signed"),
            (jwt(r#"{"alg":"NONE"}"#, &good), "not signed"),
            (jwt(r#"{"alg":"None"}"#, &good), "not signed"),
            (jwt(r#"{"alg":" nOnE "}"#, &good), "not signed"),
            (jwt(HEADER, "not json"), "claims are not a JSON object"),
            (jwt(HEADER, r#"{"sub":"x"}"#), "no kubernetes.io claim"),
            (
                jwt(HEADER, &good.replace("\"exp\":5000,", "")),
                "no exp claim",
            ),
            (
                jwt(
                    HEADER,
                    &good.replace(
                        "system:serviceaccount:team:api",
                        "system:serviceaccount:other:api",
                    ),
                ),
                "does not match",
            ),
            (jwt(HEADER, &claims(1500, r#"["a"]"#)), "expired at"),
            (jwt(HEADER, &claims(5000, "[]")), "no aud claim"),
        ];
        for (token, needle) in cases {
            let err = ServiceAccountToken::decode(Secret::new(token.clone()), 2000).unwrap_err();
            assert_eq!(err.kind(), wicp_base::error::Kind::Token, "{token}: {err}");
            let err = err.to_string();
            assert!(err.contains(needle), "{token}: {err}");
        }
        let unsigned = format!("{}.", jwt(HEADER, &good).rsplit_once('.').unwrap().0);
        let err = ServiceAccountToken::decode(Secret::new(unsigned), 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not signed"), "{err}");
    }

    #[test]
    fn unverified_expiry_is_the_exp_claim_of_a_jwt() {
        // Moved from the ACR exchange, which read its refresh token's
        // lifetime with its own copy of this parser.
        let b64 = |s: &str| URL_SAFE_NO_PAD.encode(s);
        let token = format!(
            "{}.{}.c2ln",
            b64(r#"{"alg":"RS256"}"#),
            b64(r#"{"exp":1700010800,"iat":1700000000}"#)
        );
        assert_eq!(unverified_expiry(&token), Some(1_700_010_800));
        for bad in [
            "opaque".to_string(),
            format!("{}.{}", b64("{}"), b64(r#"{"exp":1}"#)),
            format!("{}.{}.s", b64("{}"), b64(r#"{"iat":1}"#)),
            format!("{}.{}.s", b64("{}"), b64(r#"{"exp":"soon"}"#)),
            format!("{}.!!!.s", b64("{}")),
            format!("{}.{}.s.x", b64("{}"), b64(r#"{"exp":1}"#)),
        ] {
            assert_eq!(unverified_expiry(&bad), None, "{bad}");
        }
    }
}
