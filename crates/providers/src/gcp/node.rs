//! The node's identity on GCE and GKE (`--fallback node`): the access
//! token of the node's Google service account, from the metadata server,
//! used as `oauth2accesstoken` as auth-provider-gcp's node path does.
//!
//! ```text
//! GET http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token
//! Metadata-Flavor: Google
//! ```
//!
//! answers `{"access_token", "expires_in": <integer seconds>, "token_type":
//! "Bearer"}` with the response header `Metadata-Flavor: Google`, which
//! Google's libraries check to know they reached the real server
//! (google-cloud-go `compute/metadata`, google-auth-library-python
//! `compute_engine/_metadata.py`); we send the request header and read the
//! body strictly instead, so another server fails on its answer. We use the address, not
//! `metadata.google.internal`, so no DNS is involved (the Go library's
//! choice); `GCE_METADATA_HOST` (`host[:port]`) replaces it, as in Google's
//! libraries.

use serde::Deserialize;

use crate::Credential;
use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Result, Setting, quote};
use wicp_base::secret::Secret;
use wicp_net::{self as net, http, metadata};

const DEFAULT_HOST: &str = "169.254.169.254";
pub(crate) const HOST_ENV: &str = "GCE_METADATA_HOST";
pub(crate) const TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";
const FLAVOR: &str = "Metadata-Flavor";

/// The metadata server at `host` (from `GCE_METADATA_HOST`) or the default.
pub fn service(host: Option<&str>) -> Result<metadata::Service> {
    let (base, source) = match host.map(str::trim).filter(|h| !h.is_empty()) {
        None => (format!("http://{DEFAULT_HOST}"), None),
        Some(host) => {
            let ok = !host.contains(['/', '@', '?', '#', '\\', ' '])
                && !host.chars().any(char::is_control);
            let base =
                http::endpoint_override(Setting::Variable(HOST_ENV), &format!("http://{host}"))
                    .ok()
                    .filter(|_| ok)
                    .ok_or_else(|| {
                        Error::config(format!("{HOST_ENV} is {}, not a host[:port]", quote(host)))
                            .fix(format!(
                                "set {HOST_ENV} to host[:port] (no scheme, no path), or unset it"
                            ))
                    })?;
            (base, Some(Setting::Variable(HOST_ENV)))
        }
    };
    Ok(metadata::Service {
        name: "the GCE metadata server",
        base,
        source,
        absent_fix: "--fallback node needs a GCE VM (a GKE node); or use --fallback none and annotate every pod's service account",
        silent_fix: "check that nothing on the node holds traffic to 169.254.169.254:80",
    })
}

#[derive(Deserialize)]
struct TokenReply {
    access_token: Option<String>,
    expires_in: Option<i64>,
}

/// The node service account's access token, as a registry login.
pub fn login(
    service: &metadata::Service,
    net: &net::Settings,
    deadline: &Deadline,
) -> Result<Credential> {
    let call = service.to_string();
    http::block_on(deadline, &call, async {
        let client = metadata::client(service, net)?;
        let url = service.url(TOKEN_PATH);
        let reply = metadata::send(
            service,
            "the node service account's token",
            || client.get(&url).header(FLAVOR, "Google"),
            metadata::transient,
            deadline,
        )
        .await?;
        read(service, &reply, wicp_base::duration::unix_now())
    })
}

fn read(service: &metadata::Service, reply: &http::Reply, now: i64) -> Result<Credential> {
    let parsed = reply.json::<TokenReply>();
    // Registered before anything else is looked at.
    let token = parsed
        .as_ref()
        .and_then(|r| r.access_token.clone())
        .filter(|t| !t.is_empty())
        .map(Secret::new);
    if reply.status == 404 {
        return Err(Error::upstream(format!(
            "{} at {} has no default service account for this instance (HTTP 404)",
            service.name, service.base
        ))
        .fix("give the node pool a service account with roles/artifactregistry.reader, or use --fallback none"));
    }
    if !reply.is_success() {
        return Err(Error::upstream(format!(
            "{} at {} refused the node service account's token: HTTP {} ({})",
            service.name,
            service.base,
            reply.status,
            metadata::said(reply)
        ))
        .fix("check the node's service account and its access scopes (devstorage.read_only or cloud-platform)"));
    }
    let (Some(token), Some(expires_in)) = (token, parsed.and_then(|r| r.expires_in)) else {
        return Err(reply
            .unusable(
                service.name,
                service,
                "no access_token and integer expires_in",
            )
            .fix(format!(
                "check that {HOST_ENV} (if set) names the GCE metadata server"
            )));
    };
    Ok(Credential {
        username: super::USERNAME.to_string(),
        password: token,
        expires_at: now.saturating_add(expires_in.clamp(0, 24 * 3600)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_the_libraries_override_or_the_address() {
        assert_eq!(service(None).unwrap().base, "http://169.254.169.254");
        let s = service(Some("127.0.0.1:8080")).unwrap();
        assert_eq!(s.base, "http://127.0.0.1:8080");
        assert_eq!(
            s.describe(),
            "http://127.0.0.1:8080 (from GCE_METADATA_HOST)"
        );
        for bad in ["http://x", "a/b", "user@host", "h?x", "h#x"] {
            assert!(service(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_token_answer_and_its_failures() {
        let s = service(None).unwrap();
        let ok = http::reply(
            200,
            r#"{"access_token":"ya29.node-token-value-0123456789","expires_in":3599,"token_type":"Bearer"}"#,
        );
        let c = read(&s, &ok, 1000).unwrap();
        assert_eq!(c.username, "oauth2accesstoken");
        assert_eq!(c.expires_at, 4599);
        for bad in [
            r#"{"access_token":"x","expires_in":"3599"}"#,
            r#"{"expires_in":3599}"#,
            "<html>",
        ] {
            let e = read(&s, &http::reply(200, bad), 0).unwrap_err().to_string();
            assert!(e.contains("with no access_token"), "{bad}: {e}");
        }
        let e = read(&s, &http::reply(404, "Not Found"), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no default service account"), "{e}");
    }
}
