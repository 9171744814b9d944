//! The one call to the SPIRE agent: `FetchJWTSVIDs` of its Delegated
//! Identity API, over the agent's admin socket.
//!
//! One HTTP/2 connection per pull (hyper's client connection, already in
//! the tree through reqwest), driven by tonic's unary client with prost's
//! codec. A pull makes one call, so there is nothing to pool, and no
//! channel (load balancing, reconnection) to carry.
//!
//! The agent answers with gRPC status codes; what each means for an admin
//! is said in one place, [`refusal`], from what SPIRE's
//! `pkg/agent/api/delegatedidentity/v1/service.go` returns.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::SPIRE_ADMIN_SOCKET;
use super::wire::{FETCH_JWT_SVIDS, FetchJwtSvidsRequest, FetchJwtSvidsResponse, JwtSvid};
use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Fact, Result, quote};
use wicp_base::platform::EndpointRefusal;
use wicp_net::http::block_on_or;

/// An answer holds one JWT-SVID per matching entry, each a few
/// kilobytes; more is not an answer.
const MAX_RESPONSE_BYTES: usize = 256 * 1024;

/// The longest part of the agent's own message quoted in an error.
const MAX_QUOTED: usize = 300;

/// Asks the agent at `socket` for the JWT-SVIDs of `request`, within the
/// deadline.
pub(super) fn fetch(
    socket: &Path,
    request: FetchJwtSvidsRequest,
    deadline: &Deadline,
) -> Result<Vec<JwtSvid>> {
    block_on_or(deadline, || too_slow(socket, deadline), async {
        let stream = wicp_base::platform::connect_local(socket)
            .await
            .map_err(|refusal| match refusal {
                EndpointRefusal::Io(e) => unreachable_socket(socket, &e),
                EndpointRefusal::Untrusted(why) => untrusted_socket(socket, &why),
            })?;
        let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| not_grpc(socket, &e.to_string()))?;
        // The connection is driven beside the call and dropped with the
        // runtime when the call ends.
        tokio::spawn(connection);
        let mut client = tonic::client::Grpc::with_origin(
            Connection(sender),
            // The authority grpc-go clients send over a Unix socket.
            ::http::Uri::from_static("http://localhost"),
        )
        .max_decoding_message_size(MAX_RESPONSE_BYTES);
        client
            .ready()
            .await
            .map_err(|e| not_grpc(socket, &e.to_string()))?;
        let mut call = tonic::Request::new(request);
        call.set_timeout(deadline.remaining());
        let codec =
            tonic_prost::ProstCodec::<FetchJwtSvidsRequest, FetchJwtSvidsResponse>::default();
        let path = ::http::uri::PathAndQuery::from_static(FETCH_JWT_SVIDS);
        match client.unary(call, path, codec).await {
            Ok(response) => Ok(response.into_inner().svids),
            Err(status) => Err(refusal(socket, &status)),
        }
    })
}

/// hyper's HTTP/2 sender as the service tonic's client calls.
struct Connection(http2::SendRequest<tonic::body::Body>);

type Answer = ::http::Response<hyper::body::Incoming>;

impl tower_service::Service<::http::Request<tonic::body::Body>> for Connection {
    type Response = Answer;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = std::result::Result<Answer, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: ::http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

fn unreachable_socket(socket: &Path, error: &std::io::Error) -> Error {
    let place = socket.display();
    let fix = match error.kind() {
        std::io::ErrorKind::NotFound => format!(
            "start the SPIRE agent with admin_socket_path = \"{place}\" (the Delegated Identity API is off without it), \
             and mount that directory into the kubelet's view of the node; or pass --spire-admin-socket with the agent's admin socket"
        ),
        std::io::ErrorKind::PermissionDenied => format!(
            "the kubelet runs the plugin as root: check the permissions of {place} and of its directory"
        ),
        _ => {
            format!("check that the SPIRE agent is running and serving its admin socket at {place}")
        }
    };
    Error::network(format!(
        "cannot connect to the SPIRE agent's admin socket {place}: {error}"
    ))
    .fix(fix)
}

/// The socket (or who serves it) is not one only root could have put
/// there: a tenant who can bind that path could answer with another
/// workload's SVID, and with it take that workload's cached credential.
fn untrusted_socket(socket: &Path, why: &str) -> Error {
    Error::config(format!(
        "refusing the SPIRE agent's admin socket {}: {why}",
        socket.display()
    ))
    .with(Fact::Flag((&SPIRE_ADMIN_SOCKET).into()))
    .with(Fact::Problem(why.to_string()))
    .fix(if wicp_base::platform::WINDOWS {
        "run the SPIRE agent as a LocalSystem service, so that it creates its admin named pipe first and owns it, \
         and point --spire-admin-socket at that pipe"
    } else {
        "keep the agent's admin socket in a directory only root can write (admin_socket_path = \"/run/spire/admin/admin.sock\" \
         with /run/spire/admin root-owned, mode 0755 or tighter), run the agent as root, and point --spire-admin-socket at it"
    })
}

fn too_slow(socket: &Path, deadline: &Deadline) -> Error {
    Error::network(format!(
        "the SPIRE agent at {} did not answer FetchJWTSVIDs within the deadline of {}",
        socket.display(),
        wicp_base::duration::format_go(deadline.budget())
    ))
    .fix("check the SPIRE agent's log and load (it answers from its cache in milliseconds), or raise --timeout (below 60s)")
}

fn not_grpc(socket: &Path, error: &str) -> Error {
    Error::network(format!(
        "the SPIRE agent's admin socket {} did not speak gRPC: {}",
        socket.display(),
        clipped(error)
    ))
    .fix("point --spire-admin-socket at the agent's admin_socket_path, not at another service's socket")
}

/// What the agent's refusal means, and the fix.
fn refusal(socket: &Path, status: &tonic::Status) -> Error {
    use tonic::Code;
    let said = clipped(status.message());
    let what = format!(
        "the SPIRE agent at {} refused FetchJWTSVIDs: {:?} {}",
        socket.display(),
        status.code(),
        quote(&said)
    );
    match status.code() {
        Code::PermissionDenied if said.contains("authorized delegate") => Error::upstream(what).fix(
            "add the plugin's SPIFFE ID to the agent's authorized_delegates (see docs/spiffe.md: it is the ID of \
             the registration entry with -selector unix:uid:0 -selector unix:path:<the plugin's path>)",
        ),
        Code::PermissionDenied => Error::upstream(what).fix(
            "no registration entry matched: register one for the pod's selectors (k8s:ns, k8s:sa; \
             an entry matches when all its selectors are among those sent, which `explain` shows), \
             and one for the plugin itself (unix:uid:0, unix:path) listed in authorized_delegates",
        ),
        // Made here, not sent: tonic's own statuses for an answer too
        // large to be one, and for one compressed in a way it does not
        // decode (the agent never compresses unasked).
        Code::OutOfRange if said.starts_with("Error, decoded message length too large") => {
            Error::upstream(format!(
                "the SPIRE agent at {} answered FetchJWTSVIDs with more than {} KiB ({said}): \
                 an answer holds one JWT-SVID of a few kilobytes per matching entry",
                socket.display(),
                MAX_RESPONSE_BYTES / 1024
            ))
            .fix("check that --spire-admin-socket is a SPIRE agent's admin socket, and that only a few registration entries match a pod's selectors")
        }
        Code::Unimplemented if said.starts_with("Content is compressed") => Error::upstream(format!(
            "the SPIRE agent at {} answered FetchJWTSVIDs compressed ({said}); the plugin asks for no compression",
            socket.display()
        ))
        .fix("check what serves --spire-admin-socket: a SPIRE agent answers uncompressed unless asked"),
        Code::Unimplemented => Error::upstream(what).fix(
            "this socket does not serve the Delegated Identity API: point --spire-admin-socket at the agent's \
             admin_socket_path, not at its Workload API socket",
        ),
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted => {
            Error::network(what).fix("the agent could not reach its SPIRE server or is overloaded: check the agent's log")
        }
        // tonic's own status for an answer that is no FetchJWTSVIDsResponse.
        Code::Internal if said.starts_with("failed to decode") => Error::upstream(format!(
            "the SPIRE agent at {} answered FetchJWTSVIDs with something that is not a FetchJWTSVIDsResponse ({said})",
            socket.display()
        ))
        .fix("check that --spire-admin-socket is a SPIRE agent's admin socket, and the agent's version"),
        Code::Cancelled | Code::Unknown | Code::Internal if is_transport(status) => {
            not_grpc(socket, &said)
        }
        _ => Error::upstream(what).fix("check the SPIRE agent's log for this call"),
    }
}

/// Whether a status was made on our side from a failed transport or an
/// undecodable answer, rather than sent by the agent.
fn is_transport(status: &tonic::Status) -> bool {
    status.metadata().is_empty() && std::error::Error::source(status).is_some()
}

/// The agent's text, bounded, on one line, with anything token-shaped
/// masked.
fn clipped(text: &str) -> String {
    wicp_base::redact::clean(text, MAX_QUOTED)
}
