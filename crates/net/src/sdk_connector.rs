//! The AWS SDK's HTTP connector: the SDK's requests go out on the
//! invocation's [`http::Client`], the client every other upstream call
//! uses, so they get the same trust store and verifier (loaded once), the
//! same proxy settings, timeouts and body bound.
//!
//! Why not the SDK's own hyper client: aws-smithy-http-client 1.5 takes
//! extra roots only as PEM in a `TrustStore` that it parses again and
//! merges with its own load of the native store (`TlsContext`,
//! `TrustStore::with_pem_certificate`, `with_native_roots`); a caller's
//! `rustls::ClientConfig` or `CryptoProvider` is only accepted behind the
//! `aws_sdk_unstable` cfg (`CryptoMode::Custom`). It would be a second trust
//! store load and a second verifier. The SDK documents `HttpConnector` as
//! the extension point for a caller's own HTTP stack.
//!
//! The SDK signs a complete request (method, URI, headers, an in-memory
//! body), which is copied verbatim; the reply is read whole, up to
//! [`http::MAX_BODY_BYTES`], and handed back as an in-memory body. A larger
//! reply ends the attempt with [`BodyTooLarge`] after reading one byte more
//! than the bound, however much the server sends.

use aws_smithy_runtime_api::client::http::{
    HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector, http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::http::StatusCode;

use crate::observe::Endpoint;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::ErrorKind;

use super::http;
use wicp_base::deadline::Deadline;

/// A reply longer than the bound every upstream call has.
#[derive(Debug)]
pub struct BodyTooLarge {
    pub limit: usize,
}

impl std::fmt::Display for BodyTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the reply body is larger than {} KiB, more than any AWS API reply this plugin reads",
            self.limit / 1024
        )
    }
}

impl std::error::Error for BodyTooLarge {}

/// The SDK's HTTP client for one invocation, on `client`.
pub fn http_client(
    client: http::Client,
    deadline: Deadline,
    endpoint: Endpoint,
) -> SharedHttpClient {
    let connector = SharedHttpConnector::new(Connector {
        client,
        deadline,
        endpoint,
    });
    http_client_fn(move |_settings, _components| connector.clone())
}

#[derive(Debug)]
struct Connector {
    client: http::Client,
    deadline: Deadline,
    /// What the calls are, for the upstream metrics.
    endpoint: Endpoint,
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = self.client.clone();
        let deadline = self.deadline;
        let endpoint = self.endpoint;
        HttpConnectorFuture::new(async move {
            let reply = send(&client, &deadline, request).await;
            crate::observe::upstream(endpoint, reply.as_ref().ok().map(|r| r.status().as_u16()));
            reply
        })
    }
}

async fn send(
    client: &http::Client,
    deadline: &Deadline,
    request: HttpRequest,
) -> Result<HttpResponse, ConnectorError> {
    let method = reqwest::Method::from_bytes(request.method().as_bytes())
        .map_err(|e| ConnectorError::user(e.into()))?;
    let body = request
        .body()
        .bytes()
        .ok_or_else(|| ConnectorError::user("the AWS SDK sent a streaming request body".into()))?
        .to_vec();
    let mut outgoing = client
        .request(method, request.uri())
        .timeout(http::attempt_timeout(deadline));
    for (name, value) in request.headers() {
        // reqwest sets the length from the body it sends.
        if !name.eq_ignore_ascii_case("content-length") {
            outgoing = outgoing.header(name, value);
        }
    }
    let mut response = outgoing.body(body).send().await.map_err(connector_error)?;
    let status = StatusCode::try_from(response.status().as_u16())
        .map_err(|e| ConnectorError::other(e.into(), None))?;
    let headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(connector_error)? {
        if body.len().saturating_add(chunk.len()) > http::MAX_BODY_BYTES {
            return Err(ConnectorError::other(
                Box::new(BodyTooLarge {
                    limit: http::MAX_BODY_BYTES,
                }),
                Some(ErrorKind::ClientError),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    let mut reply = HttpResponse::new(status, SdkBody::from(body));
    for (name, value) in headers {
        // A header the SDK's type refuses is one no AWS reply carries.
        let _ = reply.headers_mut().try_insert(name, value);
    }
    Ok(reply)
}

/// A transport failure, in the SDK's terms: timeouts and I/O (connect,
/// cut body) as such, so that the classification of [`http`] reads them.
fn connector_error(e: reqwest::Error) -> ConnectorError {
    if e.is_timeout() {
        ConnectorError::timeout(e.into())
    } else if http::is_retryable_error(&e) {
        ConnectorError::io(e.into())
    } else {
        ConnectorError::other(e.into(), None)
    }
}
