//! The kubelet's exec protocol, `credentialprovider.kubelet.k8s.io`.
//!
//! The request is read leniently: the kubelet has added request fields over
//! time and will again, so unknown fields are ignored. The envelope is
//! checked strictly (kind and apiVersion), because a response in the wrong
//! apiVersion is discarded by the kubelet.
//!
//! The response is written strictly: since 1.33 the kubelet decodes it with
//! unknown-field and duplicate-field detection, and any extra or misspelt key
//! makes it throw the whole response away with an opaque "error decoding
//! credential provider plugin response". So the response type below has
//! exactly the kubelet's fields, in the kubelet's spelling, and nothing else.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use wicp_base::error::{Error, Result, quote};
use wicp_base::secret::Secret;

/// The kubelet never sends more than a few kilobytes (an image name, a token
/// and a handful of annotations). Anything near this size is not a kubelet.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

const GROUP: &str = "credentialprovider.kubelet.k8s.io";
const REQUEST_KIND: &str = "CredentialProviderRequest";
const RESPONSE_KIND: &str = "CredentialProviderResponse";

/// The API versions the kubelet may be configured with. Only `v1` carries the
/// service account token and annotations; the older two still work for
/// exchangers that need neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiVersion {
    V1,
    V1Beta1,
    V1Alpha1,
}

impl ApiVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V1 => "credentialprovider.kubelet.k8s.io/v1",
            ApiVersion::V1Beta1 => "credentialprovider.kubelet.k8s.io/v1beta1",
            ApiVersion::V1Alpha1 => "credentialprovider.kubelet.k8s.io/v1alpha1",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [ApiVersion::V1, ApiVersion::V1Beta1, ApiVersion::V1Alpha1]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// A request from the kubelet, after the envelope has been checked.
#[derive(Debug)]
pub struct Request {
    pub api_version: ApiVersion,
    /// The image as the kubelet sent it: normally the normalized repository
    /// without tag (`docker.io/library/nginx`).
    pub image: String,
    /// The projected service account token, when the provider entry has
    /// `tokenAttributes` and the pod has a service account.
    pub service_account_token: Option<Secret>,
    /// The annotations the provider entry asked for, verbatim.
    pub service_account_annotations: BTreeMap<String, String>,
}

/// The request as it is on the wire. Every field optional, so that a missing
/// field gets our message instead of serde's.
#[derive(Deserialize)]
struct WireRequest {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    image: Option<String>,
    #[serde(rename = "serviceAccountToken")]
    service_account_token: Option<String>,
    #[serde(rename = "serviceAccountAnnotations")]
    service_account_annotations: Option<BTreeMap<String, String>>,
}

/// A request read whole, at most one byte past [`MAX_REQUEST_BYTES`]:
/// refused when over the bound, else parsed and checked.
pub fn request_from_bytes(bytes: &[u8]) -> Result<Request> {
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(Error::request(format!(
            "the request on stdin is larger than {} bytes",
            MAX_REQUEST_BYTES
        ))
        .fix("stdin must carry one CredentialProviderRequest from the kubelet"));
    }
    parse_request(bytes)
}

/// Parses and checks one request document.
fn parse_request(bytes: &[u8]) -> Result<Request> {
    let kubelet_fix = "run this binary from the kubelet (--image-credential-provider-config), \
                       or pipe a CredentialProviderRequest JSON object into it";
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        None => {
            return Err(
                Error::request("stdin is empty: no CredentialProviderRequest").fix(kubelet_fix),
            );
        }
        Some(b'{') => {}
        Some(_) => {
            return Err(
                Error::request("the request on stdin is not a JSON object").fix(kubelet_fix)
            );
        }
    }
    // serde_json's messages can quote parts of the input, which may be a
    // token; report only the position and the kind of problem.
    let wire: WireRequest = serde_json::from_slice(bytes).map_err(|e| {
        let problem = match e.classify() {
            serde_json::error::Category::Data => "a field has the wrong type",
            serde_json::error::Category::Eof => "it ends too early",
            _ => "it is not valid JSON",
        };
        Error::request(format!(
            "cannot parse the request on stdin: {problem} (line {}, column {})",
            e.line(),
            e.column()
        ))
        .fix(kubelet_fix)
    })?;

    let kind = wire.kind.unwrap_or_default();
    if kind != REQUEST_KIND {
        return Err(Error::request(format!(
            "the request has kind {}, expected {REQUEST_KIND}",
            quote(&kind)
        ))
        .fix(kubelet_fix));
    }
    let version_text = wire.api_version.unwrap_or_default();
    let api_version = ApiVersion::parse(&version_text).ok_or_else(|| {
        Error::request(format!(
            "unsupported apiVersion {} in the request",
            quote(&version_text)
        ))
        .fix(format!(
            "set apiVersion: {GROUP}/v1 for this provider in the kubelet's CredentialProviderConfig"
        ))
    })?;
    let image = wire.image.unwrap_or_default();
    if image.trim().is_empty() {
        return Err(Error::request("the request has no image").fix(kubelet_fix));
    }
    Ok(Request {
        api_version,
        image,
        service_account_token: wire
            .service_account_token
            .filter(|t| !t.is_empty())
            .map(Secret::new),
        service_account_annotations: wire.service_account_annotations.unwrap_or_default(),
    })
}

/// How widely the kubelet may reuse a response in its in-memory cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CacheKeyType {
    /// Only for this image.
    Image,
    /// For every image of this registry host.
    Registry,
    // The kubelet's third kind, `Global` (every image the provider entry
    // matches), is never sent: one identity's credential must not serve
    // another registry's images.
}

impl CacheKeyType {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheKeyType::Image => "Image",
            CacheKeyType::Registry => "Registry",
        }
    }
}

/// One registry credential.
#[derive(Serialize)]
pub struct AuthConfig<'a> {
    pub username: &'a str,
    pub password: &'a str,
}

/// The response, exactly as the kubelet's strict decoder expects it.
#[derive(Serialize)]
pub struct Response<'a> {
    #[serde(rename = "apiVersion")]
    pub api_version: &'static str,
    pub kind: &'static str,
    #[serde(rename = "cacheKeyType")]
    pub cache_key_type: CacheKeyType,
    #[serde(rename = "cacheDuration")]
    pub cache_duration: String,
    pub auth: BTreeMap<&'a str, AuthConfig<'a>>,
}

impl<'a> Response<'a> {
    pub fn new(
        api_version: ApiVersion,
        cache_key_type: CacheKeyType,
        cache_duration: Duration,
        auth_key: &'a str,
        username: &'a str,
        password: &'a Secret,
    ) -> Self {
        let mut auth = BTreeMap::new();
        auth.insert(
            auth_key,
            AuthConfig {
                username,
                password: password.expose(),
            },
        );
        Response {
            api_version: api_version.as_str(),
            kind: RESPONSE_KIND,
            cache_key_type,
            cache_duration: wicp_base::duration::format_go(cache_duration),
            auth,
        }
    }

    /// The one JSON document for stdout, compact, with a trailing newline.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        let mut out = serde_json::to_vec(self)
            .map_err(|e| Error::internal(format!("cannot encode the response: {e}")))?;
        out.push(b'\n');
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: &str) -> Result<Request> {
        parse_request(json.as_bytes())
    }

    #[test]
    fn accepts_all_versions_and_ignores_unknown_fields() {
        for v in ["v1", "v1beta1", "v1alpha1"] {
            let r = request(&format!(
                r#"{{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/{v}","image":"a.io/b","future":{{"x":1}}}}"#
            ))
            .unwrap();
            assert_eq!(
                r.api_version.as_str(),
                format!("credentialprovider.kubelet.k8s.io/{v}")
            );
            assert!(r.service_account_token.is_none());
        }
    }

    #[test]
    fn refuses_bad_envelopes() {
        for (json, needle) in [
            ("", "stdin is empty"),
            ("   \n", "stdin is empty"),
            ("[1]", "not a JSON object"),
            ("{", "ends too early"),
            ("{nope}", "not valid JSON"),
            (
                r#"{"kind":"Pod","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a"}"#,
                "kind \"Pod\"",
            ),
            (
                r#"{"kind":"CredentialProviderRequest","apiVersion":"v2","image":"a"}"#,
                "unsupported apiVersion \"v2\"",
            ),
            (
                r#"{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}"#,
                "no image",
            ),
            (
                r#"{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a","serviceAccountToken":7}"#,
                "wrong type",
            ),
        ] {
            let err = request(json).unwrap_err();
            assert_eq!(
                err.kind(),
                wicp_base::error::Kind::Request,
                "{json:?}: {err}"
            );
            let err = err.to_string();
            assert!(err.contains(needle), "{json:?}: {err}");
        }
    }

    #[test]
    fn type_errors_do_not_quote_the_input() {
        let json = r#"{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a","serviceAccountAnnotations":"SECRETVALUE"}"#;
        let err = request(json).unwrap_err().to_string();
        assert!(!err.contains("SECRETVALUE"), "{err}");
    }

    #[test]
    fn oversized_input_is_refused() {
        let big = vec![b' '; MAX_REQUEST_BYTES + 1];
        let err = request_from_bytes(&big).unwrap_err().to_string();
        assert!(err.contains("larger than"), "{err}");
    }

    #[test]
    fn response_has_exactly_the_kubelet_fields() {
        let password = Secret::new("pw");
        let r = Response::new(
            ApiVersion::V1Beta1,
            CacheKeyType::Registry,
            Duration::from_secs(2832),
            "reg.io:5000",
            "user",
            &password,
        );
        let json = String::from_utf8(r.to_json().unwrap()).unwrap();
        assert_eq!(
            json,
            "{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1beta1\",\"kind\":\"CredentialProviderResponse\",\
             \"cacheKeyType\":\"Registry\",\"cacheDuration\":\"47m12s\",\
             \"auth\":{\"reg.io:5000\":{\"username\":\"user\",\"password\":\"pw\"}}}\n"
        );
    }
}
