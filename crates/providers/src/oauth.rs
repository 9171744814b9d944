//! What OAuth 2.0 (RFC 6749) token endpoints have in common, for every
//! provider that talks to one: Entra ID and ACR, Google STS, RFC 8693 token
//! servers, Chainguard's STS and the vendor token services.
//!
//! - the error response (§5.2): `error`, an identifier-like code, and an
//!   optional `error_description` ([`ErrorResponse`] for the raw fields,
//!   [`error_body`] for the code and description we repeat), reported in
//!   one form, `HTTP 400 invalid_grant: "..."` ([`summary`]);
//! - `expires_in` (§5.1), which some services send as a string ([`expires_in`]);
//! - the form encoding of Appendix B ([`form_urlencode`]).
//!
//! It lives here, not in one provider, so that no provider reaches into
//! another's module for them.

use serde::Deserialize;

/// Upstream messages longer than this are cut; Google's and Entra's run to
/// about 200 characters.
pub(crate) const MAX_MESSAGE_CHARS: usize = 300;

/// The raw fields of an RFC 6749 §5.2 error response, for services whose
/// own error body extends it (ACR, Entra ID: `#[serde(flatten)]`).
#[derive(Deserialize, Default)]
pub struct ErrorResponse {
    pub error: Option<String>,
    pub error_description: Option<String>,
}

/// The parts of an upstream error body we repeat: an error code and its
/// description, never the rest of the body.
#[derive(Debug, PartialEq, Eq)]
pub struct ErrorBody {
    pub code: String,
    pub description: Option<String>,
}

impl ErrorBody {
    /// `HTTP 400 invalid_grant: "description"`.
    pub fn summary(&self, status: u16) -> String {
        summary(status, Some(&self.code), self.description.as_deref())
    }
}

/// Reads an RFC 6749 error, `{"error":"invalid_grant","error_description":"..."}`,
/// or the same in the shape Google's APIs use,
/// `{"error":{"code":403,"status":"PERMISSION_DENIED","message":"..."}}`
/// (IAM Credentials, and STS behind VPC Service Controls). `None` when the
/// body is neither or its code is not an identifier.
pub fn error_body(body: &[u8]) -> Option<ErrorBody> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let error = value.get("error")?;
    let text = |v: Option<&serde_json::Value>| {
        v.and_then(serde_json::Value::as_str)
            .map(str::to_string)
            .filter(|s| !s.is_empty())
    };
    let (code, description) = match error {
        serde_json::Value::String(code) => (code.clone(), text(value.get("error_description"))),
        serde_json::Value::Object(_) => (
            text(error.get("status")).or_else(|| error.get("code").map(|c| c.to_string()))?,
            text(error.get("message")),
        ),
        _ => return None,
    };
    is_code(&code).then_some(ErrorBody { code, description })
}

/// Whether `text` is an identifier-like error code (`invalid_grant`,
/// `PERMISSION_DENIED`, `403`): anything else is not one we repeat.
pub(crate) fn is_code(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// The one form in which an upstream's error code and message are
/// repeated: `HTTP 401`, then the code, then the message cleaned by
/// [`wicp_base::redact::clean`] and quoted (`HTTP 401 UNAUTHORIZED: "..."`).
pub fn summary(status: u16, code: Option<&str>, message: Option<&str>) -> String {
    let mut text = format!("HTTP {status}");
    if let Some(code) = code {
        text.push(' ');
        text.push_str(code);
    }
    if let Some(message) = message {
        let shown = wicp_base::redact::clean(message, MAX_MESSAGE_CHARS);
        text.push_str(&format!(": {shown:?}"));
    }
    text
}

/// The `expires_in` field (§5.1) as a number or, from services that bend
/// RFC 6749, a string of digits (Google's libraries accept both); `None`
/// when absent or neither. Zero and negative are the caller's to judge.
pub fn expires_in(field: Option<&serde_json::Value>) -> Option<i64> {
    match field? {
        serde_json::Value::Number(n) => n.as_i64(),
        serde_json::Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    }
}

/// RFC 6749 Appendix B: client ID and secret are form-urlencoded before
/// they go into HTTP Basic (§2.3.1); query parameters are written the same
/// way.
pub(crate) fn form_urlencode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_are_reduced_to_code_and_description() {
        let u = error_body(br#"{"error":"invalid_grant","error_description":"stale"}"#).unwrap();
        assert_eq!(
            (u.code.as_str(), u.description.as_deref()),
            ("invalid_grant", Some("stale"))
        );
        let u = error_body(
            br#"{"error":{"code":403,"message":"denied","status":"PERMISSION_DENIED"}}"#,
        )
        .unwrap();
        assert_eq!(
            (u.code.as_str(), u.description.as_deref()),
            ("PERMISSION_DENIED", Some("denied"))
        );
        let u = error_body(br#"{"error":{"code":500}}"#).unwrap();
        assert_eq!((u.code.as_str(), u.description), ("500", None));
        for body in [
            &b"not json"[..],
            br#"{"message":"x"}"#,
            br#"{"error":42}"#,
            br#"{"error":"has spaces and maybe a token eyJ..."}"#,
            br#"{"error":""}"#,
        ] {
            assert!(
                error_body(body).is_none(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let long = ErrorBody {
            code: "invalid_grant".into(),
            description: Some("x".repeat(1000)),
        };
        let shown = long.summary(400);
        assert!(shown.len() < 330, "{shown}");
        assert!(shown.ends_with("…\""), "{shown}");
        // A description that quotes a token never repeats it.
        let shown = ErrorBody {
            code: "invalid_grant".into(),
            description: Some("bad subject eyJhbGciOiJSUzI1NiJ9.eyJ4IjoxfQ.c2ln\nnext".into()),
        }
        .summary(400);
        assert_eq!(
            shown,
            "HTTP 400 invalid_grant: \"bad subject <token> next\""
        );
        assert_eq!(summary(503, None, None), "HTTP 503");
        assert_eq!(summary(401, None, Some("no")), "HTTP 401: \"no\"");
    }

    #[test]
    fn expires_in_is_a_number_or_digits() {
        let read = |v: serde_json::Value| expires_in(v.get("expires_in"));
        assert_eq!(read(serde_json::json!({"expires_in": 60})), Some(60));
        assert_eq!(read(serde_json::json!({"expires_in": " 60"})), Some(60));
        assert_eq!(read(serde_json::json!({"expires_in": -1})), Some(-1));
        for v in [
            serde_json::json!({}),
            serde_json::json!({"expires_in": "soon"}),
            serde_json::json!({"expires_in": 1.5}),
            serde_json::json!({"expires_in": null}),
        ] {
            assert_eq!(expires_in(v.get("expires_in")), None, "{v}");
        }
    }

    #[test]
    fn form_urlencoding() {
        assert_eq!(form_urlencode("a b:c/é"), "a+b%3Ac%2F%C3%A9");
    }
}
