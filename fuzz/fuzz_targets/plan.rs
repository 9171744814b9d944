//! Every offline step of each exchanger on arbitrary input: routing, the
//! registry host, the service account annotations and token claims, up to
//! the plan (never the network). Input: the image on the first line, the
//! namespace and name on the next two, then `key=value` annotations.
#![no_main]
use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use wi_credential_provider::exchange::{self, Context, Exchanger, aws, azure, gcp, passthrough};
use wi_credential_provider::image::ImageRef;
use wi_credential_provider::secret::Secret;
use wi_credential_provider::token::ServiceAccountToken;

fn exchangers() -> Vec<Box<dyn Exchanger>> {
    let passthrough = passthrough::Options {
        registries: vec!["harbor.example.com".into()],
        passthrough_username: passthrough::DEFAULT_USERNAME.into(),
    };
    let gcp = gcp::Options {
        gcp_workload_identity_provider: None,
        gcp_project_id: Some("my-project".into()),
        gcp_cluster: Some("projects/my-project/locations/us-central1/clusters/prod".into()),
        gcp_token_lifetime: Duration::from_secs(3600),
        gcp_sts_endpoint: gcp::DEFAULT_STS_ENDPOINT.into(),
        gcp_iamcredentials_endpoint: gcp::DEFAULT_IAMCREDENTIALS_ENDPOINT.into(),
    };
    let aws = aws::Options {
        aws_credential_source: aws::CredentialSource::WebIdentity,
        aws_role_arn_annotations: aws::identity::DEFAULT_ROLE_ANNOTATIONS
            .map(str::to_string)
            .to_vec(),
        aws_session_duration: Duration::from_secs(3600),
    };
    vec![
        Box::new(passthrough::Passthrough::new(&passthrough).unwrap()),
        Box::new(aws::Aws::new(&aws)),
        Box::new(azure::Azure::new(&azure::Options::default())),
        Box::new(gcp::Gcp::new(&gcp).unwrap()),
    ]
}

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
    let cx = Context {
        image: &image,
        annotations: &annotations,
        token: token.as_ref(),
    };
    let all = exchangers();
    for choice in [
        None,
        Some(exchange::Provider::Azure),
        Some(exchange::Provider::Gcp),
    ] {
        let Ok(exchanger) = exchange::route(choice, &image, &all) else {
            continue;
        };
        assert!(exchanger.serves(&image));
        if let Ok(plan) = exchanger.plan(&cx) {
            // The credential is for the image's own registry, and the plan
            // names what shapes it.
            assert_eq!(plan.auth_key, image.registry());
            assert!(!plan.inputs.is_empty());
            let _ = format!("{plan:?}");
        }
    }
});
