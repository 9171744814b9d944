//! Vault's HTTP API as the plugin uses it: one login, one KV read.
//!
//! Login (`POST /v1/auth/<mount>/login`, JSON `{"role","jwt"}`) answers
//! `{"auth":{"client_token","lease_duration",...}}`; the same body and
//! answer for the Kubernetes and the JWT auth methods. A KV v1 read
//! (`GET /v1/<mount>/<path>`) answers `{"data":{...},"lease_duration":N}`;
//! a KV v2 read (`GET /v1/<mount>/data/<path>`) answers
//! `{"data":{"data":{...},"metadata":{...}}}`. Both reads carry the client
//! token in `X-Vault-Token`. Errors are `{"errors":["..."]}` with the HTTP
//! status saying what kind (400 bad request or unknown role, 403 permission
//! denied, 404 no secret, 429 rate limited, 5xx Vault failing or sealed).

use serde_json::Value;

use super::{VAULT_PASSWORD_FIELD, VAULT_USERNAME_FIELD};
use wicp_base::error::{Error, Result, quote};
use wicp_base::flags::FlagSpec;
use wicp_base::secret::Secret;
use wicp_net::http::Reply;

/// How many of Vault's error strings an error message repeats.
const MAX_ERRORS: usize = 3;
/// How long each repeated error string may be.
const MAX_ERROR_CHARS: usize = 200;

/// What a successful login gave.
pub struct Login {
    pub client_token: Secret,
    /// Seconds the client token lives; 0 for a token without expiry.
    pub lease_duration: i64,
}

/// What a successful read gave.
pub struct Secrets {
    /// The secret's key/value pairs, as Vault returned them.
    pub data: serde_json::Map<String, Value>,
    /// Seconds the read's lease lasts (KV v1 with a `ttl` key or the
    /// mount's default; KV v2 has none): 0 for none.
    pub lease_duration: i64,
}

/// Vault's `errors` array, each entry cleaned (control characters, anything
/// shaped like a JWT, and every secret in `secrets` removed) and cut.
pub fn errors(body: &[u8], secrets: &[&Secret]) -> Option<Vec<String>> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let list = value.get("errors")?.as_array()?;
    Some(
        list.iter()
            .filter_map(Value::as_str)
            .take(MAX_ERRORS)
            .map(|e| scrub(e, secrets))
            .collect(),
    )
}

/// `text` with every non-empty secret replaced, then cleaned for a log line.
pub(crate) fn scrub(text: &str, secrets: &[&Secret]) -> String {
    let mut text = text.to_string();
    for secret in secrets {
        if !secret.is_empty() {
            text = text.replace(secret.expose(), "<redacted>");
        }
    }
    wicp_base::redact::clean(&text, MAX_ERROR_CHARS)
}

/// `HTTP 403: ["permission denied"]`, or the body's shape when it is not a
/// Vault error.
pub fn describe(reply: &Reply, secrets: &[&Secret]) -> String {
    match errors(&reply.body, secrets) {
        Some(list) if !list.is_empty() => format!("HTTP {} {list:?}", reply.status),
        Some(_) => format!("HTTP {} with an empty errors list", reply.status),
        None => format!(
            "HTTP {} ({})",
            reply.status,
            wicp_base::redact::body_shape(&reply.body)
        ),
    }
}

/// Whether any of Vault's error strings contains `needle`.
pub(crate) fn mentions(reply: &Reply, needle: &str) -> bool {
    errors(&reply.body, &[])
        .unwrap_or_default()
        .iter()
        .any(|e| e.contains(needle))
}

/// A lease in seconds: a non-negative integer, or absent (0).
fn lease(value: Option<&Value>) -> Option<i64> {
    match value {
        None | Some(Value::Null) => Some(0),
        Some(v) => v.as_i64().filter(|&s| s >= 0),
    }
}

/// Reads a 2xx login answer. `what` names the call for messages.
pub fn read_login(reply: &Reply, what: &str) -> Result<Login> {
    let malformed = |why: &str| {
        reply.unusable("Vault", what, why).fix("check that --vault-address points at Vault's API (https://HOST:8200), not a UI, proxy or load balancer page")
    };
    let value: Value = reply
        .json()
        .ok_or_else(|| malformed("a body that is not a Vault token response (not JSON)"))?;
    let auth = value
        .get("auth")
        .filter(|a| a.is_object())
        .ok_or_else(|| malformed("no auth object"))?;
    let token = auth
        .get("client_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| malformed("no auth.client_token"))?;
    let lease_duration = lease(auth.get("lease_duration"))
        .ok_or_else(|| malformed("a malformed auth.lease_duration"))?;
    Ok(Login {
        client_token: Secret::new(token),
        lease_duration,
    })
}

/// Reads a 2xx KV answer (`version` 1 or 2) for `path` (shown in messages).
pub fn read_secret(reply: &Reply, version: u8, what: &str) -> Result<Secrets> {
    let malformed = |why: &str| reply.unusable("Vault", what, why);
    let value: Value = reply.json().ok_or_else(|| {
        malformed("a body that is not JSON").fix(
            "check that --vault-address points at Vault's API, not a proxy or load balancer page",
        )
    })?;
    let lease_duration = lease(value.get("lease_duration")).ok_or_else(|| {
        malformed("a malformed lease_duration").fix("check --vault-address and --vault-kv-version")
    })?;
    let outer = value.get("data");
    let data = match version {
        1 => outer,
        _ => outer.and_then(|d| d.get("data")),
    };
    match data {
        Some(Value::Object(map)) => Ok(Secrets {
            data: map.clone(),
            lease_duration,
        }),
        // KV v2 answers a soft-deleted or destroyed latest version with
        // data null (and a 404; some proxies turn that into 200).
        Some(Value::Null) if version == 2 => Err(deleted(reply, what, outer)),
        _ => Err(malformed(if version == 2 {
            "no data.data object"
        } else {
            "no data object"
        })
        .fix(if version == 2 {
            "if the mount is KV version 1, pass --vault-kv-version 1"
        } else {
            "if the mount is KV version 2, pass --vault-kv-version 2 (the default)"
        })),
    }
}

/// The error for a KV v2 secret whose latest version was deleted or
/// destroyed, as `reply` said.
pub fn deleted(reply: &Reply, what: &str, data: Option<&Value>) -> Error {
    let metadata = data.and_then(|d| d.get("metadata"));
    let when = metadata
        .and_then(|m| m.get("deletion_time"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(|t| format!(" (deleted at {})", wicp_base::redact::clean(t, 40)));
    let destroyed = metadata
        .and_then(|m| m.get("destroyed"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Error::upstream(format!(
        "{what}: the latest version of the secret is {}{}",
        if destroyed { "destroyed" } else { "deleted" },
        when.unwrap_or_default()
    ))
    .fix("write the registry credentials again (vault kv put), or undelete the version (vault kv undelete)")
    .answered("Vault", reply.status, &reply.body)
}

/// The registry username and password from the secret's fields.
pub fn credentials(
    secrets: &Secrets,
    username_field: &str,
    password_field: &str,
    what: &str,
) -> Result<(String, Secret)> {
    let field = |name: &str, flag: &'static FlagSpec| -> Result<String> {
        match secrets.data.get(name) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Value::String(_)) => Err(Error::upstream(format!(
                "{what}: field {} of the secret is empty",
                quote(name)
            ))
            .fix("write the registry credentials into the secret")),
            Some(_) => Err(Error::upstream(format!(
                "{what}: field {} of the secret is not a string",
                quote(name)
            ))
            .fix("store the value as a JSON string")),
            None => {
                let mut keys: Vec<String> = secrets
                    .data
                    .keys()
                    .take(10)
                    .map(|k| wicp_base::redact::clean(k, 40))
                    .collect();
                keys.sort();
                Err(Error::upstream(format!(
                    "{what}: the secret has no field {} (its fields: {})",
                    quote(name),
                    if keys.is_empty() {
                        "none".to_string()
                    } else {
                        keys.join(", ")
                    }
                ))
                .fix(format!(
                    "add the field to the secret, or name the field that holds it with {flag}"
                )))
            }
        }
    };
    let username = field(username_field, &VAULT_USERNAME_FIELD)?;
    let password = field(password_field, &VAULT_PASSWORD_FIELD)?;
    Ok((username, Secret::new(password)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wicp_net::http::reply;

    #[test]
    fn login_answers() {
        let l = read_login(
            &reply(
                200,
                r#"{"auth":{"client_token":"hvs.abc","accessor":"x","policies":["default"],"lease_duration":3600,"renewable":true}}"#,
            ),
            "login",
        )
        .unwrap();
        assert_eq!(l.client_token.expose(), "hvs.abc");
        assert_eq!(l.lease_duration, 3600);
        for bad in [
            "not json",
            "{}",
            r#"{"auth":null}"#,
            r#"{"auth":{"client_token":""}}"#,
            r#"{"auth":{"client_token":"t","lease_duration":-1}}"#,
            r#"{"auth":{"client_token":"t","lease_duration":"1h"}}"#,
        ] {
            let e = read_login(&reply(200, bad), "login").err().unwrap();
            assert_eq!(e.kind(), wicp_base::error::Kind::Upstream, "{bad}");
        }
        let root = read_login(&reply(200, r#"{"auth":{"client_token":"t"}}"#), "l").unwrap();
        assert_eq!(root.lease_duration, 0);
    }

    #[test]
    fn kv_answers() {
        let v1 = read_secret(
            &reply(
                200,
                r#"{"auth":null,"data":{"username":"u","password":"p","ttl":"1h"},"lease_duration":3600,"lease_id":"","renewable":false}"#,
            ),
            1,
            "read",
        )
        .unwrap();
        assert_eq!(v1.lease_duration, 3600);
        let (u, p) = credentials(&v1, "username", "password", "read").unwrap();
        assert_eq!((u.as_str(), p.expose()), ("u", "p"));

        let v2 = read_secret(
            &reply(
                200,
                r#"{"data":{"data":{"user":"u","pass":"p"},"metadata":{"version":2,"deletion_time":"","destroyed":false}},"lease_duration":0}"#,
            ),
            2,
            "read",
        )
        .unwrap();
        assert_eq!(v2.lease_duration, 0);
        assert!(
            credentials(&v2, "username", "password", "read")
                .unwrap_err()
                .to_string()
                .contains("pass, user")
        );
        assert!(credentials(&v2, "user", "pass", "read").is_ok());

        // A v2 answer read as v1 has no string fields; a v1 answer read as v2 has no data.data.
        let e = read_secret(&reply(200, r#"{"data":{"username":"u"}}"#), 2, "read")
            .err()
            .unwrap();
        assert!(e.to_string().contains("--vault-kv-version 1"), "{e}");
        let deleted = read_secret(
            &reply(
                200,
                r#"{"data":{"data":null,"metadata":{"deletion_time":"2026-01-01T00:00:00Z","destroyed":false}}}"#,
            ),
            2,
            "read",
        )
        .err()
        .unwrap();
        assert!(
            deleted.to_string().contains("deleted at 2026-01-01"),
            "{deleted}"
        );
    }

    #[test]
    fn errors_are_cleaned_and_scrubbed() {
        let token = Secret::new("hvs.SECRETTOKEN");
        let r = reply(
            403,
            r#"{"errors":["permission denied","token hvs.SECRETTOKEN is bad\nline","eyJhbGciOiJSUzI1NiJ9.eyJ4IjoxfQ.c2ln","4th"]}"#,
        );
        let shown = describe(&r, &[&token]);
        assert!(!shown.contains("SECRETTOKEN"), "{shown}");
        assert!(!shown.contains("eyJ"), "{shown}");
        assert!(!shown.contains("4th"), "{shown}");
        assert!(
            shown.starts_with("HTTP 403 [\"permission denied\""),
            "{shown}"
        );
        assert!(mentions(&r, "permission denied"));
        assert_eq!(
            describe(&reply(502, "<html>bad gateway</html>"), &[]),
            "HTTP 502 (24 bytes, HTML or XML)"
        );
        assert_eq!(
            describe(&reply(404, r#"{"errors":[]}"#), &[]),
            "HTTP 404 with an empty errors list"
        );
    }
}
