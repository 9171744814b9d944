#!/usr/bin/env python3
"""Prints a CredentialProviderRequest like the kubelet's, for `make demo`.

The token has the real claim layout of a projected service account token
and a fresh expiry. It is not signed by any cluster (the plugin does not
verify signatures; the registry does), so it is only good for a demo.
"""
import base64, json, sys, time, uuid

def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

audience = sys.argv[1] if len(sys.argv) > 1 else "harbor.example.com"
image = sys.argv[2] if len(sys.argv) > 2 else "harbor.example.com/team/app"
now = int(time.time())
claims = {
    "aud": [audience], "exp": now + 3600, "iat": now, "nbf": now,
    "iss": "https://oidc.demo.example", "jti": str(uuid.uuid4()),
    "sub": "system:serviceaccount:demo:puller",
    "kubernetes.io": {
        "namespace": "demo",
        "serviceaccount": {"name": "puller", "uid": str(uuid.uuid4())},
        "pod": {"name": "app-0", "uid": str(uuid.uuid4())},
        "node": {"name": "node-1", "uid": str(uuid.uuid4())},
    },
}
token = ".".join([b64(json.dumps({"alg": "RS256", "kid": "demo"}).encode()),
                  b64(json.dumps(claims).encode()), b64(b"demo-signature")])
print(json.dumps({
    "kind": "CredentialProviderRequest",
    "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
    "image": image,
    "serviceAccountToken": token,
    "serviceAccountAnnotations": {},
}, separators=(",", ":")))
