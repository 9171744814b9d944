//! The messages of SPIRE's Delegated Identity API the plugin exchanges,
//! written by hand for prost from the repository's `proto/` (itself
//! written from SPIRE's published field numbers, spire-api-sdk
//! `proto/spire/api/agent/delegatedidentity/v1/delegatedidentity.proto`
//! and `proto/spire/api/types/{selector,spiffeid,jwtsvid}.proto`). By
//! hand, so that building needs no `protoc`; the tests' fake agent decodes
//! them with code generated from `proto/`, so a wrong tag here fails them.

use std::fmt;

/// The gRPC path of `FetchJWTSVIDs`: `/<package>.<service>/<method>`.
pub(super) const FETCH_JWT_SVIDS: &str =
    "/spire.api.agent.delegatedidentity.v1.DelegatedIdentity/FetchJWTSVIDs";

/// `spire.api.agent.delegatedidentity.v1.FetchJWTSVIDsRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct FetchJwtSvidsRequest {
    /// Required: the agent answers InvalidArgument without one.
    #[prost(string, repeated, tag = "1")]
    pub(super) audience: Vec<String>,
    #[prost(message, repeated, tag = "2")]
    pub(super) selectors: Vec<Selector>,
    /// Never sent: at pull time the pod has no process to attest, and the
    /// agent refuses selectors and a pid together.
    #[prost(int32, tag = "3")]
    pub(super) pid: i32,
}

/// `spire.api.types.Selector`: `{type: "k8s", value: "ns:default"}`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Selector {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `spire.api.agent.delegatedidentity.v1.FetchJWTSVIDsResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct FetchJwtSvidsResponse {
    #[prost(message, repeated, tag = "1")]
    pub(super) svids: Vec<JwtSvid>,
}

/// `spire.api.types.JWTSVID`. Its `Debug` leaves the token out.
#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub(super) struct JwtSvid {
    #[prost(string, tag = "1")]
    pub(super) token: String,
    #[prost(message, optional, tag = "2")]
    pub(super) id: Option<SpiffeId>,
    #[prost(int64, tag = "3")]
    pub(super) expires_at: i64,
    #[prost(int64, tag = "4")]
    pub(super) issued_at: i64,
    #[prost(string, tag = "5")]
    pub(super) hint: String,
}

impl fmt::Debug for JwtSvid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtSvid")
            .field("id", &self.id)
            .field("expires_at", &self.expires_at)
            .field("issued_at", &self.issued_at)
            .field("hint", &self.hint)
            .finish_non_exhaustive()
    }
}

/// `spire.api.types.SPIFFEID`: `spiffe://<trust_domain><path>`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub(super) struct SpiffeId {
    #[prost(string, tag = "1")]
    pub(super) trust_domain: String,
    #[prost(string, tag = "2")]
    pub(super) path: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The bytes of a request as protoc-generated code writes them
    /// (field 1 and 2 length-delimited, in order), so a changed tag here
    /// fails without the fake agent too.
    #[test]
    fn a_request_encodes_with_spires_field_numbers() {
        let request = FetchJwtSvidsRequest {
            audience: vec!["a".into()],
            selectors: vec![Selector {
                r#type: "k8s".into(),
                value: "ns:x".into(),
            }],
            pid: 0,
        };
        let bytes = request.encode_to_vec();
        let expected: &[u8] = &[
            0x0a, 1, b'a', // audience = 1
            0x12, 11, // selectors = 2, 11 bytes
            0x0a, 3, b'k', b'8', b's', // type = 1
            0x12, 4, b'n', b's', b':', b'x', // value = 2
        ];
        assert_eq!(bytes, expected);
    }

    #[test]
    fn a_response_decodes_and_its_debug_hides_the_token() {
        let svid = JwtSvid {
            token: "header.payload.signature".into(),
            id: Some(SpiffeId {
                trust_domain: "td".into(),
                path: "/p".into(),
            }),
            expires_at: 7,
            issued_at: 6,
            hint: String::new(),
        };
        let bytes = FetchJwtSvidsResponse {
            svids: vec![svid.clone()],
        }
        .encode_to_vec();
        // svids = 1, then inside: token = 1, id = 2, expires_at = 3 (varint).
        assert_eq!(bytes.first(), Some(&0x0a));
        let back = FetchJwtSvidsResponse::decode(bytes.as_slice()).unwrap_or_default();
        assert_eq!(back.svids, vec![svid.clone()]);
        assert!(!format!("{svid:?}").contains("signature"));
    }
}
