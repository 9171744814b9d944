//! Service account tokens as the kubelet would pass them: RS256 JWTs signed
//! with a real RSA key (tests/fixtures/sa-signer.key), with the claim layout
//! of a projected, pod-bound token (pkg/serviceaccount/claims.go).

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{Value, json};

/// The `sub` of [`TokenSpec::new("team", "puller", …)`](TokenSpec::new):
/// the service account most tests pull as.
pub const SUBJECT: &str = "system:serviceaccount:team:puller";
pub const SIGNER_KEY: &str = include_str!("../fixtures/sa-signer.key");
pub const SIGNER_PUB: &str = include_str!("../fixtures/sa-signer.pub");
pub const WRONG_KEY: &str = include_str!("../fixtures/wrong-signer.key");
pub const ISSUER: &str = "https://oidc.cluster.test";

pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// 32 random bytes: a signing key per fake, so that a token one test's
/// fake minted is worthless to another's.
pub fn random_key() -> Vec<u8> {
    use std::io::Read;
    let mut key = vec![0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .expect("read /dev/urandom");
    key
}

/// A JWT's `aud` claim as a list, whether it was written as one string or
/// as an array.
pub fn audiences(claims: &Value) -> Vec<String> {
    match &claims["aud"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`, the way STS, the ECS agent and
/// registry token servers write a time (days-to-civil from Howard
/// Hinnant's algorithms, to avoid a date crate for one field).
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// What a token says about its pod.
#[derive(Clone, Debug)]
pub struct TokenSpec {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub pod_name: String,
    pub pod_uid: String,
    pub audiences: Vec<String>,
    pub issuer: String,
    /// Seconds from now; negative for an expired token.
    pub expires_in: i64,
}

impl TokenSpec {
    pub fn new(namespace: &str, name: &str, audience: &str) -> Self {
        TokenSpec {
            namespace: namespace.into(),
            name: name.into(),
            uid: format!("{namespace}-{name}-uid-0000-000000000000"),
            pod_name: format!("{name}-7d9f8-abcde"),
            pod_uid: format!("pod-{namespace}-{name}-0000-000000000000"),
            audiences: vec![audience.into()],
            issuer: ISSUER.into(),
            expires_in: 3600,
        }
    }

    pub fn claims(&self) -> Value {
        let iat = now();
        json!({
            "aud": self.audiences,
            "exp": iat + self.expires_in,
            "iat": iat,
            "nbf": iat,
            "iss": self.issuer,
            "jti": format!("jti-{}-{}", self.pod_uid, iat),
            "sub": format!("system:serviceaccount:{}:{}", self.namespace, self.name),
            "kubernetes.io": {
                "namespace": self.namespace,
                "node": {"name": "node-1", "uid": "node-uid-1"},
                "pod": {"name": self.pod_name, "uid": self.pod_uid},
                "serviceaccount": {"name": self.name, "uid": self.uid},
            },
        })
    }

    /// Signed with the cluster's (test) signing key.
    pub fn mint(&self) -> String {
        sign(&self.claims(), SIGNER_KEY)
    }

    /// Signed with another key: the registry or cloud must refuse it.
    pub fn mint_with_wrong_key(&self) -> String {
        sign(&self.claims(), WRONG_KEY)
    }
}

/// Signs arbitrary claims with `key_pem` (RS256, kid "test-key").
pub fn sign(claims: &Value, key_pem: &str) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("test-key".into());
    jsonwebtoken::encode(
        &header,
        claims,
        &EncodingKey::from_rsa_pem(key_pem.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// Verifies a token as a registry or cloud trusting the test cluster's
/// issuer would: signature, expiry, issuer and audience.
pub fn verify(token: &str, audience: &str) -> Result<Value, String> {
    verify_from(token, audience, ISSUER, SIGNER_PUB)
}

/// Verifies an RS256 token as a party trusting `issuer`, whose key is
/// `public_pem`, would: signature, expiry, issuer and audience. Returns
/// its claims.
pub fn verify_from(
    token: &str,
    audience: &str,
    issuer: &str,
    public_pem: &str,
) -> Result<Value, String> {
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_audience(&[audience]);
    validation.set_issuer(&[issuer]);
    let key = DecodingKey::from_rsa_pem(public_pem.as_bytes()).map_err(|e| e.to_string())?;
    jsonwebtoken::decode::<Value>(token, &key, &validation)
        .map(|data| data.claims)
        .map_err(|e| e.to_string())
}
