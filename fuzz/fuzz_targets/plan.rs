//! Every offline step of each exchanger on arbitrary input: routing, the
//! registry host, the service account annotations and token claims, up to
//! the plan (never the network). Input: the image on the first line, the
//! namespace and name on the next two, then `key=value` annotations.
#![no_main]
use std::collections::BTreeMap;
use std::sync::LazyLock;

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use wi_credential_provider::options::{self, BINARY, CommandLine};
use wi_credential_provider::serve;
use wicp_base::secret::Secret;
use wicp_kubelet::request::image::ImageRef;
use wicp_kubelet::request::token::ServiceAccountToken;
use wicp_net::inputs::{Env, Inputs};
use wicp_providers::{self as providers, route};

/// The command line of a node that configures every provider, parsed once
/// by the binary's own parser.
static LINE: LazyLock<CommandLine> = LazyLock::new(|| {
    let args = [
        "--registry=harbor.example.com",
        "--registry=zot.example.com/team",
        "--jfrog-url=https://acme.jfrog.io",
        "--jfrog-provider-name=k8s",
        "--quay-organization=acme",
        "--cloudsmith-org=acme",
        "--gcp-project-id=my-project",
        "--gcp-cluster=projects/my-project/locations/us-central1/clusters/prod",
        "--vault-address=https://vault.example.com:8200",
        "--vault-secret-prefix=registry",
        "--vault-secret-path=registry/{namespace}/{name}",
        "--token-exchange-url=https://sts.example.com/oauth2/token",
        "--token-exchange-username=robot",
    ]
    .map(String::from);
    options::parse_as(BINARY, &args, &Env::default()).unwrap()
});

fn token(namespace: &str, name: &str) -> Option<ServiceAccountToken> {
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let now = 1_800_000_000;
    let claims = serde_json::json!({
        "iss": "https://oidc.example",
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "aud": ["api://AzureADTokenExchange", "my-project.svc.id.goog", "harbor.example.com", "sts.amazonaws.com"],
        "exp": now + 3600, "iat": now,
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": "u"}},
    });
    let raw = format!(
        "{}.{}.c2ln",
        b64(r#"{"alg":"RS256"}"#),
        b64(&claims.to_string())
    );
    ServiceAccountToken::decode(Secret::new(raw), now).ok()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let Some(Ok(image)) = lines.next().map(ImageRef::parse) else {
        return;
    };
    let (namespace, name) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    let annotations: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let token = token(namespace, name);
    let inputs = Inputs::default();
    // `auto`, then every provider the binary carries: a new one is fuzzed
    // without anyone adding it here.
    let choices = std::iter::once(None).chain(providers::ALL.iter().copied().map(Some));
    for choice in choices {
        let Ok(provider) = route::choose(choice, &image) else {
            continue;
        };
        // `auto` picks only providers that recognise the registry by host.
        assert!(choice.is_some() || provider.auto_serves(&image));
        let exchanger = LINE.build(provider, &inputs).unwrap();
        if route::require_served(exchanger.as_ref(), &image).is_err() {
            continue;
        }
        // The serving pipeline's own offline step: admission, plan, and
        // the check that the kubelet can match the auth key.
        if let Ok(prepared) = serve::prepare(
            exchanger.as_ref(),
            None,
            &image,
            token.as_ref(),
            &annotations,
            "credentialprovider.kubelet.k8s.io/v1",
            None,
        ) {
            // The credential is for the image's own registry (narrowed to
            // the allowing pattern's path, cached per image), and the plan
            // names what shapes it.
            let key = &prepared.plan.auth_key;
            assert!(
                key == image.registry()
                    || (key == "zot.example.com/team"
                        && prepared.plan.cache_key_type
                            == wicp_kubelet::request::protocol::CacheKeyType::Image),
                "{key} for {image}"
            );
            assert!(!prepared.plan.inputs.is_empty());
            // Every plan names who pulls: the audit log's principal.
            assert!(prepared.plan.principal().next().is_some(), "{image}");
            // Whatever the annotations said, Vault's secret stays under the
            // admin's prefix, as checked path segments.
            if let Some(path) = prepared
                .plan
                .inputs
                .iter()
                .find(|i| i.name() == "secret_path")
                .map(|i| i.value())
            {
                assert!(path.starts_with("registry/"), "{path}");
                assert!(
                    path.split('/')
                        .all(|s| !s.is_empty() && s != "." && s != ".."),
                    "{path}"
                );
                assert!(!path.contains(['?', '#', '%', '\\', ' ', '\n']), "{path}");
            }
            let _ = format!("{:?}", prepared.plan);
        }
    }
});
