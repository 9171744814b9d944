//! The cache key: which credential an entry holds.
//!
//! Two requests may share a cached credential only if every input that
//! shapes the credential is the same. The key is the SHA-256 of a canonical
//! text with one `name=value` line per input, in a fixed order, starting
//! with the format version. Flux's token cache (fluxcd/pkg `auth`) keys the
//! same way, and its bug #1231 shows what a missing field costs: a token
//! minted for one audience was served for another. So the lines cover the
//! whole request as the plan understood it:
//!
//! - `format`: bumped whenever the text or the entry layout changes, so an
//!   older or newer binary sharing the directory never reads our entries;
//! - `provider` and every `audience` the token was checked against;
//! - the token's `issuer` and the service account's namespace, name and UID
//!   (a service account deleted and recreated under the same name has a new
//!   UID, so it never inherits the old one's credentials);
//! - under `--identity spiffe`, the SPIFFE ID presented instead of the
//!   service account (one `spiffe_id` line, with the SVID's issuer and
//!   audience above it): every pod of one SPIFFE identity shares the entry;
//! - for a node-identity credential (`--fallback node`) the four lines
//!   above and `annotations` are one line, `identity=node`: the credential
//!   is the same for every pod, so it is kept once per registry, and no
//!   service account's text (which always has `sa…` lines) can equal it;
//! - `annotations`: a SHA-256 over every annotation the kubelet passed,
//!   sorted, so editing any of them (a new role, another client ID) is a
//!   different entry;
//! - `auth_key`, the registry host the response is for;
//! - every [`Plan::inputs`](crate::Plan) pair, prefixed `input.`:
//!   identity, registry scope, endpoints, lifetimes, authority.
//!
//! Values are escaped (`\`, newline, carriage return, and `=` in names) so
//! no value can forge another line.

use std::collections::BTreeMap;
use std::fmt;

use sha2::{Digest, Sha256};

use wicp_kubelet::request::token::ServiceAccount;

use crate::Input;

/// The version of the key text and of the entry layout.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// Everything the key is made of.
#[derive(Clone, Debug)]
pub struct KeyInputs<'a> {
    pub provider: &'a str,
    /// The audiences the token was checked against (`--audience` or the
    /// exchanger's own); order does not matter.
    pub audiences: &'a [String],
    /// The token's issuer, when there is a token.
    pub issuer: Option<&'a str>,
    pub service_account: Option<&'a ServiceAccount>,
    /// Under `--identity spiffe`: the SPIFFE ID presented, which takes the
    /// service account's place, so that every pod of one identity shares
    /// the entry.
    pub spiffe_id: Option<&'a str>,
    /// Every annotation the kubelet passed, not only those the exchanger
    /// reads: an exchanger that later reads one more must not see entries
    /// made without it.
    pub annotations: &'a BTreeMap<String, String>,
    pub auth_key: &'a str,
    pub inputs: &'a [Input],
    /// A node-identity credential: no service account, token or
    /// annotation shapes it.
    pub node: bool,
}

/// The annotations of a node-identity key: none.
static NO_ANNOTATIONS: BTreeMap<String, String> = BTreeMap::new();

impl<'a> KeyInputs<'a> {
    /// The inputs of a planned exchange: what `respond()` keys the cache on
    /// and `explain` prints, built in one place so the two cannot drift.
    pub fn for_plan(
        plan: &'a crate::Plan<'_>,
        audiences: &'a [String],
        token: Option<&'a wicp_kubelet::request::token::ServiceAccountToken>,
        annotations: &'a BTreeMap<String, String>,
    ) -> Self {
        if plan.identity.is_node() {
            return KeyInputs {
                provider: plan.provider.name(),
                audiences: &[],
                issuer: None,
                service_account: None,
                spiffe_id: None,
                annotations: &NO_ANNOTATIONS,
                auth_key: plan.cached_as(),
                inputs: &plan.inputs,
                node: true,
            };
        }
        KeyInputs {
            provider: plan.provider.name(),
            audiences,
            issuer: token.map(|t| t.claims().issuer.as_str()),
            service_account: token
                .filter(|t| t.spiffe_id().is_none())
                .map(|t| t.service_account()),
            spiffe_id: token.and_then(|t| t.spiffe_id()),
            annotations,
            auth_key: &plan.auth_key,
            inputs: &plan.inputs,
            node: false,
        }
    }
}

/// A cache key: 64 lowercase hex digits, also the entry's file name stem.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    pub fn derive(inputs: &KeyInputs<'_>) -> Self {
        Key(wicp_base::hex::encode(&Sha256::digest(
            canonical(inputs).as_bytes(),
        )))
    }

    /// A key read back from a file name; `None` unless it is 64 lowercase
    /// hex digits, so no other file in the directory is ever taken for one.
    pub fn parse(text: &str) -> Option<Self> {
        let ok = text.len() == 64
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Key(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.0)
    }
}

/// The text the key hashes. Public so `--log-level debug` and tests can
/// show exactly what went into a key; it holds no secret.
pub fn canonical(inputs: &KeyInputs<'_>) -> String {
    let mut text = String::new();
    let mut line = |name: &str, value: &str| {
        text.push_str(&escape(name, true));
        text.push('=');
        text.push_str(&escape(value, false));
        text.push('\n');
    };
    line("format", &FORMAT_VERSION.to_string());
    line("provider", inputs.provider);
    if inputs.node {
        line("identity", "node");
        line("auth_key", inputs.auth_key);
        for input in inputs.inputs {
            line(&format!("input.{}", input.name()), input.value());
        }
        return text;
    }
    let mut audiences: Vec<&str> = inputs.audiences.iter().map(String::as_str).collect();
    audiences.sort_unstable();
    audiences.dedup();
    for audience in audiences {
        line("audience", audience);
    }
    line("issuer", inputs.issuer.unwrap_or(""));
    match (inputs.spiffe_id, inputs.service_account) {
        (Some(id), _) => line("spiffe_id", id),
        (None, Some(sa)) => {
            line("sa.namespace", &sa.namespace);
            line("sa.name", &sa.name);
            line("sa.uid", &sa.uid);
        }
        (None, None) => line("sa", "none"),
    }
    line("annotations", &annotations_digest(inputs.annotations));
    line("auth_key", inputs.auth_key);
    for input in inputs.inputs {
        line(&format!("input.{}", input.name()), input.value());
    }
    text
}

/// `sha256:<hex>` over `key=value` lines of every annotation, sorted by key.
fn annotations_digest(annotations: &BTreeMap<String, String>) -> String {
    let mut hasher = Sha256::new();
    for (key, value) in annotations {
        hasher.update(escape(key, true).as_bytes());
        hasher.update(b"=");
        hasher.update(escape(value, false).as_bytes());
        hasher.update(b"\n");
    }
    format!("sha256:{}", wicp_base::hex::encode(&hasher.finalize()))
}

/// `text` with `\\`, newline, carriage return (and `=` in a name) escaped;
/// most values hold none of them and are used as they are.
fn escape(text: &str, name: bool) -> std::borrow::Cow<'_, str> {
    let special = |b: u8| matches!(b, b'\\' | b'\n' | b'\r') || (name && b == b'=');
    if !text.bytes().any(special) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '=' if name => out.push_str("\\="),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(uid: &str) -> ServiceAccount {
        ServiceAccount {
            namespace: "team-a".into(),
            name: "puller".into(),
            uid: uid.into(),
        }
    }

    struct Fixture {
        audiences: Vec<String>,
        issuer: String,
        sa: ServiceAccount,
        annotations: BTreeMap<String, String>,
        auth_key: String,
        inputs: Vec<Input>,
    }

    impl Fixture {
        fn new() -> Self {
            Fixture {
                audiences: vec!["sts.amazonaws.com".into()],
                issuer: "https://oidc.cluster.test".into(),
                sa: sa("0f6c3a8e-5d5b-4a0e-9d7c-2b1f3c4d5e6f"),
                annotations: BTreeMap::from([(
                    "eks.amazonaws.com/role-arn".to_string(),
                    "arn:aws:iam::123456789012:role/puller".to_string(),
                )]),
                auth_key: "123456789012.dkr.ecr.eu-west-1.amazonaws.com".into(),
                inputs: vec![
                    Input::identity("role_arn", "arn:aws:iam::123456789012:role/puller"),
                    Input::setting("registry", "eu-west-1"),
                    Input::setting("sts_endpoint", "https://sts.eu-west-1.amazonaws.com"),
                ],
            }
        }

        fn inputs(&self) -> KeyInputs<'_> {
            KeyInputs {
                provider: "aws",
                audiences: &self.audiences,
                issuer: Some(&self.issuer),
                service_account: Some(&self.sa),
                spiffe_id: None,
                annotations: &self.annotations,
                auth_key: &self.auth_key,
                inputs: &self.inputs,
                node: false,
            }
        }

        fn key(&self) -> Key {
            Key::derive(&self.inputs())
        }
    }

    /// Pinned with `printf '...' | sha256sum`, independently of this code.
    /// The text is part of the on-disk format: changing it must come with
    /// a new FORMAT_VERSION, and this test says so.
    #[test]
    fn golden_canonical_text_and_key() {
        let f = Fixture::new();
        assert_eq!(
            canonical(&f.inputs()),
            "format=1\n\
             provider=aws\n\
             audience=sts.amazonaws.com\n\
             issuer=https://oidc.cluster.test\n\
             sa.namespace=team-a\n\
             sa.name=puller\n\
             sa.uid=0f6c3a8e-5d5b-4a0e-9d7c-2b1f3c4d5e6f\n\
             annotations=sha256:db909408f4613b3263d1bd12f5417e24229c83391d958079d8825b800fe17760\n\
             auth_key=123456789012.dkr.ecr.eu-west-1.amazonaws.com\n\
             input.role_arn=arn:aws:iam::123456789012:role/puller\n\
             input.registry=eu-west-1\n\
             input.sts_endpoint=https://sts.eu-west-1.amazonaws.com\n"
        );
        assert_eq!(
            f.key().as_str(),
            "c7f028d522e46b48247dc47d9e53e5477064460e69e61691c541b97a297bc36b"
        );
    }

    #[test]
    fn golden_key_without_a_service_account() {
        let annotations = BTreeMap::new();
        let inputs = KeyInputs {
            provider: "gcp",
            audiences: &[],
            issuer: None,
            service_account: None,
            spiffe_id: None,
            annotations: &annotations,
            auth_key: "europe-docker.pkg.dev",
            inputs: &[Input::setting("registry", "gcp")],
            node: false,
        };
        assert_eq!(
            canonical(&inputs),
            "format=1\nprovider=gcp\nissuer=\nsa=none\n\
             annotations=sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n\
             auth_key=europe-docker.pkg.dev\ninput.registry=gcp\n"
        );
        assert_eq!(
            Key::derive(&inputs).as_str(),
            "6b10014e2b1e1c5f15af26121132519879a76c35157edb88f860683ede84e0e2"
        );
    }

    /// A node credential is one key per registry whoever asks, and never
    /// the key of a service account's credential for the same registry.
    #[test]
    fn a_node_key_names_no_service_account_and_equals_none() {
        let f = Fixture::new();
        let node = KeyInputs {
            node: true,
            ..f.inputs()
        };
        assert_eq!(
            canonical(&node),
            "format=1\nprovider=aws\nidentity=node\n\
             auth_key=123456789012.dkr.ecr.eu-west-1.amazonaws.com\n\
             input.role_arn=arn:aws:iam::123456789012:role/puller\n\
             input.registry=eu-west-1\n\
             input.sts_endpoint=https://sts.eu-west-1.amazonaws.com\n"
        );
        // Another service account asking gets the same node key...
        let other = sa("another-uid");
        let from_other = KeyInputs {
            service_account: Some(&other),
            spiffe_id: None,
            ..node.clone()
        };
        assert_eq!(Key::derive(&node), Key::derive(&from_other));
        // ...which is not the service account's own key, nor the key of a
        // request without one.
        assert_ne!(Key::derive(&node), f.key());
        let anonymous = KeyInputs {
            service_account: None,
            issuer: None,
            ..f.inputs()
        };
        assert_ne!(Key::derive(&node), Key::derive(&anonymous));
    }

    /// Under `--identity spiffe` the SPIFFE ID takes the service
    /// account's place: two service accounts of one identity share the
    /// key, two identities never do, and no service account's key is a
    /// SPIFFE key.
    #[test]
    fn a_spiffe_id_keys_instead_of_the_service_account() {
        let f = Fixture::new();
        let other = ServiceAccount {
            name: "other".into(),
            ..f.sa.clone()
        };
        let as_id = |sa, id| KeyInputs {
            service_account: None,
            spiffe_id: Some(id),
            ..KeyInputs {
                service_account: Some(sa),
                ..f.inputs()
            }
        };
        let id = "spiffe://example.org/puller";
        assert_eq!(
            Key::derive(&as_id(&f.sa, id)),
            Key::derive(&as_id(&other, id))
        );
        assert_ne!(
            Key::derive(&as_id(&f.sa, id)),
            Key::derive(&as_id(&f.sa, "spiffe://example.org/other"))
        );
        assert_ne!(Key::derive(&as_id(&f.sa, id)), f.key());
        assert!(canonical(&as_id(&f.sa, id)).contains("\nspiffe_id=spiffe://example.org/puller\n"));
    }

    #[test]
    fn every_input_changes_the_key() {
        let base = Fixture::new();
        let mut keys = vec![("base", base.key())];
        let mut variant = |what: &'static str, change: &dyn Fn(&mut Fixture)| {
            let mut f = Fixture::new();
            change(&mut f);
            keys.push((what, f.key()));
        };
        variant("audience", &|f| f.audiences = vec!["other".into()]);
        variant("second audience", &|f| f.audiences.push("other".into()));
        variant("issuer", &|f| f.issuer = "https://other.test".into());
        variant("namespace", &|f| f.sa.namespace = "team-b".into());
        variant("name", &|f| f.sa.name = "builder".into());
        variant("recreated service account", &|f| {
            f.sa.uid = "11111111-2222-3333-4444-555555555555".into();
        });
        variant("annotation edited", &|f| {
            f.annotations.insert(
                "eks.amazonaws.com/role-arn".into(),
                "arn:aws:iam::123456789012:role/other".into(),
            );
        });
        variant("annotation added", &|f| {
            f.annotations.insert(
                "eks.amazonaws.com/sts-regional-endpoints".into(),
                "true".into(),
            );
        });
        variant("annotations removed", &|f| f.annotations.clear());
        variant("auth key", &|f| {
            f.auth_key = "123456789012.dkr.ecr.eu-west-2.amazonaws.com".into();
        });
        variant("input value", &|f| {
            f.inputs[2] = Input::setting("sts_endpoint", "https://sts.vpce.example.amazonaws.com");
        });
        variant("input added", &|f| {
            f.inputs.push(Input::setting("duration", "900s"))
        });
        variant("input removed", &|f| {
            f.inputs.pop();
        });
        variant("input renamed", &|f| {
            f.inputs[1] = Input::setting("region", "eu-west-1");
        });
        let mut seen = std::collections::HashMap::new();
        for (what, key) in &keys {
            if let Some(other) = seen.insert(key.clone(), *what) {
                panic!("{what} and {other} share key {key}");
            }
        }
        assert_eq!(seen.len(), 15);
    }

    #[test]
    fn audience_order_does_not_matter() {
        let mut a = Fixture::new();
        a.audiences = vec!["x".into(), "y".into()];
        let mut b = Fixture::new();
        b.audiences = vec!["y".into(), "x".into(), "x".into()];
        assert_eq!(a.key(), b.key());
    }

    #[test]
    fn a_value_cannot_forge_another_line() {
        // Without escaping, moving text between a value and the next line
        // would give the same canonical text.
        let mut a = Fixture::new();
        a.sa.name = "puller\nsa.uid=forged".into();
        a.sa.uid = "x".into();
        let mut b = Fixture::new();
        b.sa.name = "puller".into();
        b.sa.uid = "forged\nsa.uid=x".into();
        assert_ne!(a.key(), b.key());
        assert_eq!(canonical(&a.inputs()).lines().count(), 12);

        let mut c = Fixture::new();
        c.annotations = BTreeMap::from([("a".into(), "b\nc=d".into())]);
        let mut d = Fixture::new();
        d.annotations = BTreeMap::from([("a".into(), "b".into()), ("c".into(), "d".into())]);
        assert_ne!(c.key(), d.key());

        let mut e = Fixture::new();
        e.annotations = BTreeMap::from([("a=b".into(), "c".into())]);
        let mut g = Fixture::new();
        g.annotations = BTreeMap::from([("a".into(), "b=c".into())]);
        assert_ne!(e.key(), g.key());
    }

    #[test]
    fn parse_accepts_only_keys() {
        let key = Fixture::new().key();
        assert_eq!(Key::parse(key.as_str()), Some(key));
        for bad in [
            "",
            "abc",
            &"A".repeat(64),
            &"g".repeat(64),
            &"a".repeat(63),
            &"a".repeat(65),
            "../../../../etc/passwd",
        ] {
            assert_eq!(Key::parse(bad), None, "{bad}");
        }
    }
}
