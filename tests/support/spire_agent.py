"""A SPIRE agent's Delegated Identity API, as the tests' stand-in for the
agent's admin socket (tests/support/spire.rs starts it).

It speaks real gRPC (grpcio, an implementation independent of the
plugin's tonic client) on a Unix socket, with messages generated at start
from the repository's proto/ (SPIRE's published field numbers), and does
what pkg/agent/api/delegatedidentity/v1/service.go does in FetchJWTSVIDs:

- an empty audience is InvalidArgument "audience must be specified";
- selectors and pid together are InvalidArgument (the server refuses both);
- the caller must be an authorized delegate, else PermissionDenied
  "caller not configured as an authorized delegate" (mode "not-delegate":
  the fake cannot attest its caller, so the test says which it is);
- every registration entry whose selectors are all among the request's
  matches (SPIRE's subset rule), and one JWT-SVID is minted per entry;
  none is PermissionDenied "no identity issued".

JWT-SVIDs carry sub (the SPIFFE ID), aud (the requested audiences), exp,
iat, and iss only when the "server" sets a jwt_issuer, as SPIRE's
credential builder does; they are RS256-signed with the key the test
gives, so a registry or token service can verify them.

Usage: spire_agent.py PROTO_DIR SOCKET STATE_DIR. STATE_DIR/config.json
is read on every call (entries, mode, issuer, ttl, key), so a test can
re-register an identity between pulls; every request is appended to
STATE_DIR/requests.jsonl (audience, selectors, pid, metadata keys). Prints
"ready" once the socket accepts.
"""

import base64
import json
import os
import sys
import tempfile
import time
from concurrent import futures

import grpc
from grpc_tools import protoc
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

PROTO_DIR, SOCKET, STATE = sys.argv[1], sys.argv[2], sys.argv[3]
SERVICE = "spire.api.agent.delegatedidentity.v1.DelegatedIdentity"

generated = tempfile.mkdtemp(prefix="spire-proto-", dir=STATE)
for proto in (
    "spire/api/types/types.proto",
    "spire/api/agent/delegatedidentity/v1/delegatedidentity.proto",
):
    if protoc.main(["protoc", f"-I{PROTO_DIR}", f"--python_out={generated}", proto]) != 0:
        sys.exit(f"protoc failed on {proto}")
sys.path.insert(0, generated)
from spire.api.agent.delegatedidentity.v1 import delegatedidentity_pb2 as di  # noqa: E402
from spire.api.types import types_pb2 as types  # noqa: E402


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# The signing keys, loaded once each: an answer of many SVIDs signs many.
KEYS = {}


def mint(config, spiffe_id, audience):
    now = int(time.time())
    claims = {"sub": spiffe_id, "aud": list(audience), "iat": now,
              "exp": now + int(config.get("ttl", 300))}
    if config.get("issuer"):
        claims["iss"] = config["issuer"]
    header = {"alg": "RS256", "kid": "spire-test", "typ": "JWT"}
    signing_input = (b64url(json.dumps(header).encode()) + "." +
                     b64url(json.dumps(claims).encode())).encode()
    key = KEYS.get(config["key"])
    if key is None:
        with open(config["key"], "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
        KEYS[config["key"]] = key
    signature = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    return signing_input.decode() + "." + b64url(signature), claims


def fetch(request_bytes, context):
    with open(os.path.join(STATE, "config.json")) as f:
        config = json.load(f)
    request = di.FetchJWTSVIDsRequest.FromString(request_bytes)
    seen = {
        "audience": list(request.audience),
        "selectors": [{"type": s.type, "value": s.value} for s in request.selectors],
        "pid": request.pid,
        "metadata": sorted(k for k, _ in context.invocation_metadata()),
        "metadata_values": [v for _, v in context.invocation_metadata() if isinstance(v, str)],
    }
    with open(os.path.join(STATE, "requests.jsonl"), "a") as f:
        f.write(json.dumps(seen) + "\n")
    mode = config.get("mode", "serve")
    if mode == "hang":
        time.sleep(600)
    if len(request.audience) == 0:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "audience must be specified")
    if mode == "not-delegate":
        context.abort(grpc.StatusCode.PERMISSION_DENIED,
                      "caller not configured as an authorized delegate")
    if mode == "unavailable":
        context.abort(grpc.StatusCode.UNAVAILABLE,
                      "could not fetch JWT-SVID: rpc error: code = Unavailable desc = connection refused")
    if len(request.selectors) > 0 and request.pid != 0:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      "selectors and pid are mutually exclusive")
    if mode == "garbage":
        return b"\xff\xff\xff\xff not a protobuf message"
    if mode == "huge":
        # 64 MiB: far more than any answer of one SVID per entry.
        return b"\x0a" + b"\x80\x80\x80\x20" + b"x" * (64 << 20)
    if mode == "gzip":
        context.set_compression(grpc.Compression.Gzip)
    audience = request.audience
    if mode == "other-audience":
        audience = ["someone-else.example.com"]
    offered = {(s.type, s.value) for s in request.selectors}
    response = di.FetchJWTSVIDsResponse()
    for entry in config.get("entries", []):
        wanted = set()
        for selector in entry["selectors"]:
            kind, value = selector.split(":", 1)
            wanted.add((kind, value))
        if not wanted <= offered:
            continue
        token, claims = mint(config, entry["spiffe_id"], audience)
        rest = entry["spiffe_id"][len("spiffe://"):]
        trust_domain, _, path = rest.partition("/")
        response.svids.append(types.JWTSVID(
            token=token,
            id=types.SPIFFEID(trust_domain=trust_domain, path="/" + path),
            expires_at=claims["exp"], issued_at=claims["iat"],
            hint=entry.get("hint", "")))
    if len(response.svids) == 0:
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "no identity issued")
    return response.SerializeToString()


handler = grpc.method_handlers_generic_handler(SERVICE, {
    # Raw bytes both ways, so that a garbage answer can be sent as is.
    "FetchJWTSVIDs": grpc.unary_unary_rpc_method_handler(
        fetch, request_deserializer=None, response_serializer=None),
})
server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
server.add_generic_rpc_handlers((handler,))
if server.add_insecure_port("unix:" + SOCKET) == 0:
    sys.exit(f"cannot listen on {SOCKET}")
server.start()
print("ready", flush=True)
server.wait_for_termination()
