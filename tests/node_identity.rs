//! `--fallback node`: pods that did not opt in pull with the node's
//! identity, pods that did never do, run as the kubelet runs the binary,
//! against faithful fakes of the three metadata services
//! (tests/support/metadata.rs), moto for STS and ECR, the fake Entra and
//! ACR, a real docker-registry and containerd.

use crate::support;

use std::time::{Duration, Instant};

use base64::Engine as _;

use support::azure::{App, CLIENT_ID, FakeAcr, FakeEntra, TENANT};
use support::containerd::Containerd;
use support::http_server::{Response, TestServer};
use support::metadata::{self, Behaviour, InstanceProfile};
use support::moto::{Moto, ROLE_ANNOTATION};
use support::plugin::{Run, request, run, words};
use support::registry::Registry;
use support::token::TokenSpec;

const ECR_HOST: &str = "210987654321.dkr.ecr.eu-west-1.amazonaws.com";
const NODE_ROLE: &str = "arn:aws:iam::210987654321:role/eks-node";

fn aws(args: &[&str], env: &[(&str, &str)], token: Option<&str>, ann: &[(&str, &str)]) -> Run {
    let mut all = vec!["--provider", "aws", "--log-level", "debug"];
    all.extend_from_slice(args);
    run(
        &all,
        env,
        request(&format!("{ECR_HOST}/team/app:1.0"), token, ann).as_bytes(),
    )
}

/// Asserts that a run with `--log-format json` failed for service
/// account `sa` with an error of `kind` recording `facts`; returns its
/// words.
fn refused_for(run: &Run, sa: &str, kind: &str, facts: &[(&str, &str)]) -> String {
    let line = run.refused(kind, facts);
    assert_eq!(line["service_account"], sa, "{line}");
    words(&line)
}

fn password(run: &Run, key: &str) -> String {
    let response = run.response();
    assert_eq!(response["cacheKeyType"], "Registry", "{response}");
    response["auth"][key]["password"]
        .as_str()
        .unwrap_or_else(|| panic!("no password for {key}: {response}"))
        .to_string()
}

/// moto issues these credentials to the node role, so ECR answers with the
/// node account's password only if IMDS's credentials reached it.
fn node_profile(moto: &Moto) -> InstanceProfile {
    let (access_key_id, secret_access_key, session_token) = moto.assume_role(NODE_ROLE);
    InstanceProfile {
        role: "eks-node".into(),
        access_key_id,
        secret_access_key,
        session_token,
        expiration: "2037-01-01T00:00:00Z".into(),
    }
}

#[test]
fn aws_service_accounts_that_did_not_opt_in_and_static_pods_pull_as_the_node() {
    let moto = Moto::start();
    let profile = node_profile(&moto);
    let imds = metadata::imds(Some(profile.clone()));
    let env = [
        ("AWS_ENDPOINT_URL", moto.url()),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let token = TokenSpec::new("team", "web", "sts.amazonaws.com").mint();

    // An un-annotated service account, then a static pod (no token at all).
    for token in [Some(token.as_str()), None] {
        let run = aws(&["--fallback", "node"], &env, token, &[]);
        assert_eq!(password(&run, ECR_HOST), "210987654321-auth-token");
        assert!(run.stderr.contains("the node's identity"), "{}", run.stderr);
        for secret in [&profile.secret_access_key, &profile.session_token] {
            assert!(!run.stderr.contains(secret.as_str()), "{}", run.stderr);
        }
    }
    // Each run: one PUT for the session token, two GETs, each GET with it.
    let requests = imds.requests();
    assert_eq!(requests.len(), 6, "{requests:#?}");
    let put = &requests[0];
    assert_eq!(put.method, "PUT");
    assert_eq!(
        put.header("x-aws-ec2-metadata-token-ttl-seconds"),
        Some("60")
    );
    assert!(
        requests
            .iter()
            .filter(|r| r.method == "GET")
            .all(|r| r.header("x-aws-ec2-metadata-token").is_some())
    );

    // The same node credentials open a real registry, through containerd.
    let registry = Registry::start_with_htpasswd("AWS", "210987654321-auth-token");
    let digest = registry.push_test_image("team/app", "1.0");
    let run = aws(&["--fallback", "node"], &env, None, &[]);
    let response = run.response();
    let user = response["auth"][ECR_HOST]["username"].as_str().unwrap();
    let pass = response["auth"][ECR_HOST]["password"].as_str().unwrap();
    let containerd = Containerd::start();
    let pulled = containerd
        .pull(&format!("{}/team/app:1.0", registry.host()), user, pass)
        .unwrap_or_else(|e| panic!("containerd refused the node credentials:\n{e}"));
    assert_eq!(pulled, digest);
}

#[test]
fn aws_an_opted_in_service_account_that_is_denied_never_falls_back() {
    let moto = Moto::start();
    let imds = metadata::imds(Some(node_profile(&moto)));
    // STS refuses every AssumeRoleWithWebIdentity.
    let sts = TestServer::start(|_| {
        Response::text(
            403,
            "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>\
             <Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error>\
             <RequestId>r-1</RequestId></ErrorResponse>",
        )
        .with_header("Content-Type", "text/xml")
    });
    let env = [
        ("AWS_ENDPOINT_URL_STS", sts.url()),
        ("AWS_ENDPOINT_URL_ECR", moto.url()),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let token = TokenSpec::new("team", "api", "sts.amazonaws.com").mint();
    let json = ["--fallback", "node", "--log-format", "json"];
    let run = aws(
        &json,
        &env,
        Some(&token),
        &[(ROLE_ANNOTATION, "arn:aws:iam::210987654321:role/api-pull")],
    );
    let refused = [("service", "AWS STS"), ("status", "403")];
    let line = refused_for(&run, "team/api", "upstream", &refused);
    assert!(line.contains("AccessDenied"), "{line}");
    assert_eq!(imds.requests().len(), 0, "the node identity was consulted");

    // An annotation that is there but malformed is an opt-in too.
    let run = aws(
        &json,
        &env,
        Some(&token),
        &[(ROLE_ANNOTATION, "arn:aws:iam::210987654321:user/not-a-role")],
    );
    run.refused_for_annotation(ROLE_ANNOTATION);
    assert_eq!(imds.requests().len(), 0);
}

#[test]
fn aws_without_fallback_node_is_refused_as_before() {
    let moto = Moto::start();
    let imds = metadata::imds(Some(node_profile(&moto)));
    let env = [
        ("AWS_ENDPOINT_URL", moto.url()),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let token = TokenSpec::new("team", "web", "sts.amazonaws.com").mint();
    let json = ["--log-format", "json"];
    let unannotated = aws(&json, &env, Some(&token), &[]);
    refused_for(&unannotated, "team/web", "annotation", &[]);
    aws(
        &["--fallback", "none", "--log-format", "json"],
        &env,
        None,
        &[],
    )
    .refused("token", &[]);
    assert_eq!(imds.requests().len(), 0);
    // And a provider with no node identity refuses the flag.
    let line = run(
        &[
            "--provider",
            "passthrough",
            "--registry",
            "r.example",
            "--fallback",
            "node",
            "--log-format",
            "json",
        ],
        &[],
        request("r.example/a", Some(&token), &[]).as_bytes(),
    )
    .refused("config", &[]);
    assert!(words(&line).contains("has no node identity"), "{line}");
}

/// A fake ECR (JSON 1.1, as tests/aws.rs uses it) whose password names the
/// access key that signed the call, with a real expiry (moto's is 2015,
/// which is never cached).
fn ecr_naming_the_caller() -> TestServer {
    TestServer::start(|req| {
        let auth = req.header("authorization").unwrap_or("");
        let key = auth
            .split("Credential=")
            .nth(1)
            .and_then(|c| c.split('/').next())
            .unwrap_or("unsigned")
            .to_string();
        let login = base64::engine::general_purpose::STANDARD.encode(format!("AWS:pw-for-{key}"));
        Response::json(
            200,
            serde_json::json!({"authorizationData": [{
                "authorizationToken": login,
                "expiresAt": support::token::now() + 12 * 3600,
                "proxyEndpoint": format!("https://{ECR_HOST}"),
            }]}),
        )
        .with_header("Content-Type", "application/x-amz-json-1.1")
    })
}

#[test]
fn the_cache_keeps_one_node_credential_and_never_mixes_it_with_a_service_accounts() {
    let moto = Moto::start();
    let profile = node_profile(&moto);
    let node_password = format!("pw-for-{}", profile.access_key_id);
    let imds = metadata::imds(Some(profile));
    let ecr = ecr_naming_the_caller();
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap();
    let env = [
        ("AWS_ENDPOINT_URL_STS", moto.url()),
        ("AWS_ENDPOINT_URL_ECR", ecr.url()),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = ["--fallback", "node", "--cache-dir", cache_dir];
    let web = TokenSpec::new("team", "web", "sts.amazonaws.com").mint();
    let batch = TokenSpec::new("other", "batch", "sts.amazonaws.com").mint();
    let api = TokenSpec::new("team", "api", "sts.amazonaws.com").mint();
    let api_role = [(ROLE_ANNOTATION, "arn:aws:iam::123456789013:role/api-pull")];

    // The node credential is fetched once and then served to every pod
    // that did not opt in, whoever it is.
    let first = aws(&args, &env, Some(&web), &[]);
    assert_eq!(password(&first, ECR_HOST), node_password);
    assert!(
        first.stderr.contains("exchanged and cached"),
        "{}",
        first.stderr
    );
    let imds_calls = imds.requests().len();
    for token in [Some(batch.as_str()), None] {
        let again = aws(&args, &env, token, &[]);
        assert_eq!(password(&again, ECR_HOST), node_password);
        assert!(
            again.stderr.contains("from the on-disk cache"),
            "{}",
            again.stderr
        );
    }
    assert_eq!(imds.requests().len(), imds_calls);

    // A service account that opted in never gets it...
    let own = aws(&args, &env, Some(&api), &api_role);
    let own_password = password(&own, ECR_HOST);
    assert_ne!(own_password, node_password);
    assert!(own_password.starts_with("pw-for-"), "{own_password}");
    assert!(
        !own.stderr.contains("from the on-disk cache"),
        "{}",
        own.stderr
    );
    // ...and its own credential, now cached, is never handed to another.
    let own_again = aws(&args, &env, Some(&api), &api_role);
    assert_eq!(password(&own_again, ECR_HOST), own_password);
    assert!(own_again.stderr.contains("from the on-disk cache"));
    let node_again = aws(&args, &env, Some(&web), &[]);
    assert_eq!(password(&node_again, ECR_HOST), node_password);
    assert_eq!(imds.requests().len(), imds_calls);
}

#[test]
fn a_missing_silent_garbage_or_huge_metadata_service_fails_clearly_and_quickly() {
    let port = metadata::closed_port();
    let absent = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let imds_service = ("service", "the EC2 instance metadata service (IMDSv2)");
    let node_json = ["--fallback", "node", "--log-format", "json"];
    let run = aws(
        &node_json,
        &[("AWS_EC2_METADATA_SERVICE_ENDPOINT", &absent)],
        None,
        &[],
    );
    let line = words(&run.refused("network", &[imds_service]));
    support::assert_says(
        &line,
        &["this node has no metadata service", "needs an EC2 instance"],
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    let imds = metadata::imds(None);
    let env = [("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let run = aws(&node_json, &env, None, &[]);
    let line = run.refused("upstream", &[imds_service, ("status", "404")]);
    assert!(words(&line).contains("no IAM role is attached"), "{line}");

    imds.behave(Behaviour::Silent);
    let started = Instant::now();
    let run = aws(&node_json, &env, None, &[]);
    let line = words(&run.refused("network", &[imds_service]));
    support::assert_says(&line, &["no answer came", "hop limit"]);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );

    // A huge body is cut at 64 KiB and is no session token; an HTML page
    // passes for one but is then no role name.
    for (behaviour, said) in [
        (Behaviour::Huge, "not a session token"),
        (Behaviour::Garbage, "not an IAM role name"),
    ] {
        imds.behave(behaviour);
        let run = aws(&node_json, &env, None, &[]);
        let line = run.refused("upstream", &[imds_service, ("status", "200")]);
        assert!(words(&line).contains(said), "{behaviour:?}: {line}");
    }
}

#[test]
fn a_proxy_in_the_environment_never_sees_a_metadata_request() {
    let moto = Moto::start();
    let imds = metadata::imds(Some(node_profile(&moto)));
    let proxy = TestServer::start(|_| Response::text(502, "proxy says no"));
    // moto is reached as localhost (exempt by NO_PROXY), IMDS as 127.0.0.1
    // (not exempt): only the metadata policy keeps IMDS off the proxy.
    let moto_url = moto.url().replace("127.0.0.1", "localhost");
    let env = [
        ("AWS_ENDPOINT_URL", moto_url),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url()),
        ("HTTP_PROXY", proxy.url()),
        ("http_proxy", proxy.url()),
        ("HTTPS_PROXY", proxy.url()),
        ("ALL_PROXY", proxy.url()),
        ("NO_PROXY", "localhost".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let run = aws(&["--fallback", "node"], &env, None, &[]);
    assert_eq!(password(&run, ECR_HOST), "210987654321-auth-token");
    assert_eq!(proxy.request_count(), 0, "{:#?}", proxy.requests());
    assert_eq!(imds.requests().len(), 3);
}

// ---------------------------------------------------------------------------
// Azure

const ACR: &str = "contoso.azurecr.io";
const KUBELET_IDENTITY: &str = "9a8b7c6d-1111-2222-3333-444455556666";

fn azure(
    extra: &[&str],
    entra: &FakeEntra,
    acr: &FakeAcr,
    token: Option<&str>,
    ann: &[(&str, &str)],
) -> Run {
    let (authority, endpoint) = (entra.url(), acr.url());
    let mut args = vec![
        "--provider",
        "azure",
        "--log-level",
        "debug",
        "--azure-authority-host",
        &authority,
        "--acr-endpoint",
        &endpoint,
    ];
    args.extend_from_slice(extra);
    run(
        &args,
        &[],
        request(&format!("{ACR}/team/app"), token, ann).as_bytes(),
    )
}

#[test]
fn azure_the_kubelet_identity_from_the_cloud_config_for_pods_without_a_client_id() {
    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let acr = FakeAcr::start(ACR, &entra);
    let imds = metadata::azure_imds(KUBELET_IDENTITY, entra.managed_identity_minter());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("azure.json");
    // As AKS writes it: the kubelet identity's client ID, "msi" placeholders.
    std::fs::write(
        &config,
        format!(
            r#"{{"cloud":"AzurePublicCloud","tenantId":"{TENANT}","aadClientId":"msi","aadClientSecret":"msi",
                "useManagedIdentityExtension":true,"userAssignedIdentityID":"{KUBELET_IDENTITY}"}}"#
        ),
    )
    .unwrap();
    let imds_url = imds.url();
    let config = config.to_str().unwrap();
    let node = [
        "--fallback",
        "node",
        "--azure-cloud-config",
        config,
        "--azure-imds-endpoint",
        &imds_url,
    ];
    let token = TokenSpec::new("team", "web", "api://AzureADTokenExchange").mint();
    for token in [Some(token.as_str()), None] {
        let run = azure(&node, &entra, &acr, token, &[]);
        let response = run.response();
        assert_eq!(
            response["auth"][ACR]["username"],
            "00000000-0000-0000-0000-000000000000"
        );
        let refresh = response["auth"][ACR]["password"].as_str().unwrap();
        assert!(acr.minted().iter().any(|m| m == refresh));
        assert!(!run.stderr.contains(refresh), "{}", run.stderr);
    }
    assert_eq!(imds.requests().len(), 2);

    // An opted-in service account whose federation Entra refuses fails,
    // and IMDS is not asked.
    let stranger = TokenSpec::new("team", "api", "api://AzureADTokenExchange").mint();
    let node_json = [&node[..], &["--log-format", "json"]].concat();
    let run = azure(
        &node_json,
        &entra,
        &acr,
        Some(&stranger),
        &[
            ("azure.workload.identity/client-id", CLIENT_ID),
            ("azure.workload.identity/tenant-id", TENANT),
        ],
    );
    let line = refused_for(&run, "team/api", "upstream", &[("service", "Entra ID")]);
    assert!(line.contains("AADSTS700213"), "{line}");
    assert_eq!(imds.requests().len(), 2);

    // Without a managed identity in the config, and no flag: said so.
    std::fs::write(config, r#"{"useManagedIdentityExtension":false}"#).unwrap();
    let line = azure(&node_json, &entra, &acr, None, &[]).failure_json();
    assert!(words(&line).contains("--azure-node-client-id"), "{line}");
}

/// Round-4 item 3: under `--fallback node`, an image of another cloud's
/// registry (`.azurecr.cn`, `.azurecr.de`) gets no node credential: the
/// node's cloud (here the public one) is not the registry's, and IMDS is
/// never asked.
#[test]
fn azure_the_node_identity_never_goes_to_another_clouds_registry() {
    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let imds = metadata::azure_imds(KUBELET_IDENTITY, entra.managed_identity_minter());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("azure.json");
    std::fs::write(
        &config,
        format!(
            r#"{{"cloud":"AzurePublicCloud","tenantId":"{TENANT}","useManagedIdentityExtension":true,"userAssignedIdentityID":"{KUBELET_IDENTITY}"}}"#
        ),
    )
    .unwrap();
    let imds_url = imds.url();
    for registry in ["contoso.azurecr.cn", "contoso.azurecr.de"] {
        let acr = FakeAcr::start(registry, &entra);
        let endpoint = acr.url();
        let run = run(
            &[
                "--provider",
                "azure",
                "--fallback",
                "node",
                "--azure-cloud-config",
                config.to_str().unwrap(),
                "--azure-imds-endpoint",
                &imds_url,
                "--acr-endpoint",
                &endpoint,
                "--log-format",
                "json",
            ],
            &[],
            request(&format!("{registry}/team/app"), None, &[]).as_bytes(),
        );
        let line = run.refused_registry(registry);
        assert!(
            words(&line).contains("the node is in the AzurePublic cloud"),
            "{line}"
        );
        assert_eq!(acr.server.request_count(), 0, "{registry}");
    }
    assert_eq!(imds.requests().len(), 0, "IMDS was asked");
}

/// Round-4 item 13: a service principal's login is its client ID and
/// secret; with `--cache-dir`, a rotated `aadClientSecret` is served at the
/// next pull, and the secret is never written into the cache.
#[test]
fn azure_a_rotated_service_principal_secret_is_served_at_once() {
    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let acr = FakeAcr::start(ACR, &entra);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("azure.json");
    let cache = dir.path().join("cache");
    let write = |secret: &str| {
        std::fs::write(
            &config,
            format!(
                r#"{{"useManagedIdentityExtension":false,"aadClientId":"sp-app","aadClientSecret":"{secret}"}}"#
            ),
        )
        .unwrap();
    };
    let args = [
        "--fallback",
        "node",
        "--azure-node-service-principal",
        "--azure-cloud-config",
        config.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    for secret in ["first-sp-secret-0123456789", "rotated-sp-secret-9876543210"] {
        write(secret);
        let run = azure(&args, &entra, &acr, None, &[]);
        let response = run.response();
        assert_eq!(response["auth"][ACR]["username"], "sp-app");
        assert_eq!(response["auth"][ACR]["password"], secret, "{}", run.stderr);
        assert!(!run.stderr.contains(secret), "{}", run.stderr);
    }
    for entry in std::fs::read_dir(&cache).into_iter().flatten() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        assert!(!text.contains("sp-secret"), "the secret was cached: {text}");
    }
}

// ---------------------------------------------------------------------------
// GCP

const GAR: &str = "europe-docker.pkg.dev";
const NODE_TOKEN: &str = "ya29.node-service-account-token-0123456789";
const POOL_PROVIDER: &str =
    "projects/123456789012/locations/global/workloadIdentityPools/k8s-pool/providers/k8s";

fn gcp(extra: &[&str], env: &[(&str, &str)], token: Option<&str>, ann: &[(&str, &str)]) -> Run {
    let mut args = vec!["--provider", "gcp", "--log-level", "debug"];
    args.extend_from_slice(extra);
    run(
        &args,
        env,
        request(&format!("{GAR}/p/r/app:1"), token, ann).as_bytes(),
    )
}

#[test]
fn gcp_only_opted_in_service_accounts_use_their_own_identity() {
    let gce = metadata::gce(NODE_TOKEN);
    let sts = TestServer::start(|_| {
        Response::json(
            400,
            serde_json::json!({"error": "invalid_grant", "error_description": "The audience in ID Token does not match the expected audience."}),
        )
    });
    let host = gce.host();
    let env = [("GCE_METADATA_HOST", host.as_str())];
    let sts_url = sts.url();
    let audience = format!("//iam.googleapis.com/{POOL_PROVIDER}");
    let observed = tempfile::tempdir().unwrap();
    let metrics_dir = observed.path().display().to_string();
    let audit_log = observed.path().join("audit.log").display().to_string();
    let flags = [
        "--fallback",
        "node",
        "--gcp-workload-identity-provider",
        POOL_PROVIDER,
        "--gcp-sts-endpoint",
        &sts_url,
        "--metrics-dir",
        &metrics_dir,
        "--audit-log",
        &audit_log,
    ];
    let token = TokenSpec::new("team", "web", &audience).mint();
    // Not opted in (no annotation, or the opt-in not exactly "true"), and a
    // static pod: the node's service account.
    for (token, ann) in [
        (Some(token.as_str()), vec![]),
        (
            Some(token.as_str()),
            vec![("iam.gke.io/enable-wi-image-pull", "yes")],
        ),
        (None, vec![]),
    ] {
        let run = gcp(&flags, &env, token, &ann);
        let response = run.response();
        assert_eq!(response["auth"][GAR]["username"], "oauth2accesstoken");
        assert_eq!(response["auth"][GAR]["password"], NODE_TOKEN);
        assert!(!run.stderr.contains(NODE_TOKEN), "{}", run.stderr);
    }
    assert_eq!(sts.request_count(), 0);
    // Opted in with GKE's annotation, or ours: its own identity only, and
    // STS's refusal is the answer.
    for ann in [
        ("iam.gke.io/enable-wi-image-pull", "true"),
        (
            "iam.gke.io/gcp-service-account",
            "puller@p.iam.gserviceaccount.com",
        ),
    ] {
        let json = [&flags[..], &["--log-format", "json"]].concat();
        let run = gcp(&json, &env, Some(&token), &[ann]);
        let refused = [("service", "Google STS"), ("status", "400")];
        let line = refused_for(&run, "team/web", "upstream", &refused);
        assert!(line.contains("invalid_grant"), "{line}");
    }
    assert_eq!(sts.request_count(), 2);
    assert_eq!(gce.requests().len(), 3);
    // The metrics tell node-identity pulls from the pods' own, and count
    // the metadata server's answers and STS's refusals.
    let prom =
        std::fs::read_to_string(observed.path().join("wi_credential_provider.prom")).unwrap();
    for line in [
        format!("wicp_invocations_total{{provider=\"gcp\",registry=\"{GAR}\",outcome=\"miss\",identity=\"node\"}} 3"),
        format!("wicp_invocations_total{{provider=\"gcp\",registry=\"{GAR}\",outcome=\"error\",kind=\"upstream\"}} 2"),
        "wicp_upstream_requests_total{provider=\"gcp\",endpoint=\"metadata\",status=\"2xx\"} 3".to_string(),
        "wicp_upstream_requests_total{provider=\"gcp\",endpoint=\"token_exchange\",status=\"4xx\"} 2".to_string(),
    ] {
        assert!(prom.lines().any(|l| l == line), "no {line} in\n{prom}");
    }
    // The audit log names whose identity each pull used.
    let audit: Vec<serde_json::Value> = std::fs::read_to_string(&audit_log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(audit.len(), 5);
    for record in &audit[..3] {
        assert_eq!(record["identity"], "node", "{record}");
        assert!(
            record["principal"]["instance metadata"]
                .as_str()
                .unwrap()
                .contains(&host),
            "{record}"
        );
    }
    assert_eq!(
        audit[2].get("service_account"),
        None,
        "a static pod has none"
    );
    assert_eq!(audit[3]["identity"], "service_account");
    assert_eq!(audit[3]["principal"]["sts_audience"], audience.as_str());
    assert_eq!(
        audit[4]["principal"]["service_account"],
        "puller@p.iam.gserviceaccount.com"
    );
    // With no GCP pool configured at all, --fallback node alone replaces
    // auth-provider-gcp's node path.
    let run = gcp(&["--fallback", "node"], &env, None, &[]);
    assert_eq!(run.response()["auth"][GAR]["password"], NODE_TOKEN);
}

/// Round-4 item 9: the node's access token opens every Google registry
/// alike, so with `--cache-dir` one entry (and one metadata call) serves
/// gcr.io, us-docker.pkg.dev and europe-docker.pkg.dev, each answer keyed
/// by the registry the kubelet asked about.
#[test]
fn gcp_one_node_credential_for_every_google_registry() {
    let gce = metadata::gce(NODE_TOKEN);
    let host = gce.host();
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().join("c").display().to_string();
    let flags = [
        "--provider",
        "gcp",
        "--fallback",
        "node",
        "--gcp-workload-identity-provider",
        POOL_PROVIDER,
        "--cache-dir",
        &cache_dir,
    ];
    for registry in ["gcr.io", "us-docker.pkg.dev", "europe-docker.pkg.dev"] {
        let image = format!("{registry}/p/r/app:1");
        let out = run(
            &flags,
            &[("GCE_METADATA_HOST", host.as_str())],
            request(&image, None, &[]).as_bytes(),
        );
        let response = out.response_for(&image);
        assert_eq!(
            response["auth"][registry]["password"], NODE_TOKEN,
            "{}",
            out.stderr
        );
        assert_eq!(response["auth"].as_object().unwrap().len(), 1);
    }
    let token_calls = gce
        .requests()
        .iter()
        .filter(|r| r.path.contains("/token"))
        .count();
    assert_eq!(token_calls, 1, "one metadata token call for all three");
    let entries = std::fs::read_dir(&cache_dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    assert_eq!(entries, 1);
}

/// Round-4 item 16: a `--timeout` that runs out while IMDS is being asked,
/// after it answered the session-token call, is the deadline's doing: the
/// error says so and names the call that answered, instead of calling the
/// service silent and pointing at the hop limit.
#[test]
fn a_deadline_spent_between_imds_calls_is_not_called_a_silent_service() {
    let imds = TestServer::start(|req| {
        if req.method == "PUT" {
            Response::text(200, "AQAEAsession-token-for-the-test")
        } else {
            Response::hang()
        }
    });
    let url = imds.url();
    let started = Instant::now();
    let run = aws(
        &[
            "--fallback",
            "node",
            "--timeout",
            "1s",
            "--log-format",
            "json",
        ],
        &[("AWS_EC2_METADATA_SERVICE_ENDPOINT", &url)],
        None,
        &[],
    );
    let service = ("service", "the EC2 instance metadata service (IMDSv2)");
    let line = words(&run.refused("network", &[service]));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    support::assert_says(&line, &["ran out", "these answered before it: the IMDSv2"]);
    assert!(!line.contains("hop limit"), "{line}");
    assert!(line.contains("--timeout"), "{line}");
    assert_eq!(
        imds.requests().len(),
        2,
        "the token call, then the role call"
    );
}
