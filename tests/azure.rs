//! The azure exchanger, exec'd as the kubelet runs it, against local fakes
//! of Entra ID and ACR (tests/support/azure.rs) and, end to end, a real
//! registry pulled from with skopeo.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::azure::{
    self, ACR_HOST as REGISTRY, ACR_ISSUER, App, CLIENT_ID, FakeAcr, FakeEntra,
    FakeIdentityBinding, NULL_GUID, TENANT, WI_CLIENT, WI_TENANT, acr_error,
};
use support::http_server::{Response, TestServer};
use support::plugin::{self, json_logs, pull as exec, request, run, words};
use support::token::TokenSpec;

const AKS_CLIENT: &str = "kubernetes.azure.com/acr-client-id";
const AKS_TENANT: &str = "kubernetes.azure.com/acr-tenant-id";

/// Fake Entra trusting team/puller, and a fake ACR for `login_server`.
fn fakes(login_server: &str) -> (FakeEntra, FakeAcr) {
    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let acr = FakeAcr::start(login_server, &entra);
    (entra, acr)
}

fn sa_token() -> String {
    TokenSpec::new("team", "puller", azure::AUDIENCE).mint()
}

/// The flags that point the plugin at the fakes, debug logging on so the
/// secret checks cover every log line.
fn flags(entra: &FakeEntra, acr: &FakeAcr) -> Vec<String> {
    azure::flags(entra, acr, &["--provider", "azure", "--log-level", "debug"])
}

const IDENTITY: &[(&str, &str)] = &[(WI_CLIENT, CLIENT_ID), (WI_TENANT, TENANT)];

fn all_secrets(token: &str, entra: &FakeEntra, acr: &FakeAcr) -> Vec<String> {
    let mut secrets = vec![token.to_string()];
    secrets.extend(entra.issued());
    secrets.extend(acr.minted());
    secrets
}

fn parse_go_duration(text: &str) -> Duration {
    let mut total = 0u64;
    let mut number = String::new();
    for c in text.chars() {
        match c {
            '0'..='9' => number.push(c),
            'h' | 'm' | 's' => {
                let n: u64 = number.parse().unwrap();
                number.clear();
                total += n * match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
            }
            _ => panic!("unexpected duration {text}"),
        }
    }
    Duration::from_secs(total)
}

#[test]
fn exchanges_the_service_account_token_for_an_acr_refresh_token() {
    let (entra, acr) = fakes(REGISTRY);
    let token = sa_token();
    let out = exec(
        &flags(&entra, &acr),
        &[],
        &format!("{REGISTRY}/team/app"),
        &token,
        IDENTITY,
    );
    let response = out.response();
    assert_eq!(response["cacheKeyType"], "Registry");
    assert_eq!(
        response["cacheDuration"], "1h0m0s",
        "3 h refresh token, capped by the default 1h"
    );
    let auth = response["auth"].as_object().unwrap();
    assert_eq!(auth.len(), 1);
    let minted = acr.minted();
    assert_eq!(minted.len(), 1);
    assert_eq!(
        response["auth"][REGISTRY],
        json!({"username": NULL_GUID, "password": minted[0]})
    );

    // Entra got the service account token as the assertion, for this app.
    let entra_requests = entra.server.requests();
    assert_eq!(entra_requests.len(), 1);
    let form = entra_requests[0].form();
    assert_eq!(
        entra_requests[0].path,
        format!("/{TENANT}/oauth2/v2.0/token")
    );
    assert_eq!(form["client_assertion"], token);
    assert_eq!(form["client_id"], CLIENT_ID);
    // ACR got exactly the access token Entra issued, for this registry and tenant.
    let acr_requests = acr.server.requests();
    assert_eq!(acr_requests.len(), 1);
    let form = acr_requests[0].form();
    assert_eq!(form["access_token"], entra.issued()[0]);
    assert_eq!(form["service"], REGISTRY);
    assert_eq!(form["tenant"], TENANT);
    // The refresh token is the one the registry side will accept.
    let claims = acr.refresh_verifier()(&minted[0]).unwrap();
    assert_eq!(claims["aud"], REGISTRY);
    assert_eq!(claims["iss"], ACR_ISSUER);

    out.assert_no_secrets(&all_secrets(&token, &entra, &acr));
    assert!(
        out.stderr
            .contains("azure credentials for team/puller on contoso.azurecr.io"),
        "{}",
        out.stderr
    );
}

#[test]
fn cache_duration_comes_from_the_refresh_tokens_exp() {
    let (entra, acr) = fakes(REGISTRY);
    let mut args = flags(&entra, &acr);
    args.extend(["--max-cache-duration".to_string(), "5h".to_string()]);
    let out = exec(
        &args,
        &[],
        &format!("{REGISTRY}/team/app"),
        &sa_token(),
        IDENTITY,
    );
    let got = parse_go_duration(out.response()["cacheDuration"].as_str().unwrap());
    // 80 % of the three hours the fake ACR grants, give or take the run time.
    let expected = Duration::from_secs(azure::REFRESH_LIFETIME_SECS as u64 * 80 / 100);
    assert!(
        got <= expected && got + Duration::from_secs(10) >= expected,
        "{got:?}"
    );
}

#[test]
fn aks_annotation_keys_and_the_default_tenant() {
    let (entra, acr) = fakes(REGISTRY);
    let image = format!("{REGISTRY}/team/app");
    let args = flags(&entra, &acr);

    // The AKS plugin's keys.
    let out = exec(
        &args,
        &[],
        &image,
        &sa_token(),
        &[(AKS_CLIENT, CLIENT_ID), (AKS_TENANT, TENANT)],
    );
    out.response();

    // No tenant annotation: the flag, its WICP_ variable, then AZURE_TENANT_ID.
    let client_only = &[(AKS_CLIENT, CLIENT_ID)];
    let mut with_flag = args.clone();
    with_flag.extend(["--azure-tenant-id".to_string(), TENANT.to_string()]);
    exec(&with_flag, &[], &image, &sa_token(), client_only).response();
    exec(
        &args,
        &[("WICP_AZURE_TENANT_ID", TENANT)],
        &image,
        &sa_token(),
        client_only,
    )
    .response();
    exec(
        &args,
        &[("AZURE_TENANT_ID", TENANT)],
        &image,
        &sa_token(),
        client_only,
    )
    .response();
    // WICP_ wins over the standard name; a wrong tenant is Entra's AADSTS90002.
    let line = exec(
        &json_logs(&args),
        &[
            ("WICP_AZURE_TENANT_ID", "fabrikam.onmicrosoft.com"),
            ("AZURE_TENANT_ID", TENANT),
        ],
        &image,
        &sa_token(),
        client_only,
    )
    .refused("upstream", &[("service", "Entra ID"), ("status", "400")]);
    support::assert_says(
        &words(&line),
        &["AADSTS90002", "tenant fabrikam.onmicrosoft.com"],
    );
    // An annotation wins over every default.
    let out = exec(
        &args,
        &[("AZURE_TENANT_ID", "fabrikam.onmicrosoft.com")],
        &image,
        &sa_token(),
        &[(WI_CLIENT, CLIENT_ID), (AKS_TENANT, TENANT)],
    );
    out.response();
    assert_eq!(acr.minted().len(), 5);
}

#[test]
fn the_authority_comes_from_the_standard_variable_unless_a_flag_says() {
    let (entra, acr) = fakes(REGISTRY);
    let image = format!("{REGISTRY}/team/app");
    let args = ["--provider", "azure", "--acr-endpoint", &acr.url()]
        .map(str::to_string)
        .to_vec();
    exec(
        &args,
        &[("AZURE_AUTHORITY_HOST", &entra.url())],
        &image,
        &sa_token(),
        IDENTITY,
    )
    .response();
    // WICP_AZURE_AUTHORITY_HOST wins over AZURE_AUTHORITY_HOST (port 9 is discard: nothing listens).
    exec(
        &args,
        &[
            ("WICP_AZURE_AUTHORITY_HOST", &entra.url()),
            ("AZURE_AUTHORITY_HOST", "http://127.0.0.1:9"),
        ],
        &image,
        &sa_token(),
        IDENTITY,
    )
    .response();
    assert_eq!(entra.server.request_count(), 2);
}

#[test]
fn missing_empty_and_malformed_identity_fails_before_the_network() {
    let (entra, acr) = fakes(REGISTRY);
    let image = format!("{REGISTRY}/team/app");
    let args = flags(&entra, &acr);
    let mut json = args.clone();
    json.extend(["--log-format", "json"].map(String::from));
    // The annotation at fault: the one set wrongly, or the first that
    // would name the identity.
    for (annotations, key) in [
        (vec![(WI_TENANT, TENANT)], AKS_CLIENT),
        (vec![(WI_CLIENT, CLIENT_ID)], AKS_TENANT),
        (
            vec![
                (AKS_CLIENT, ""),
                (WI_CLIENT, CLIENT_ID),
                (WI_TENANT, TENANT),
            ],
            AKS_CLIENT,
        ),
        (vec![(WI_CLIENT, CLIENT_ID), (WI_TENANT, " ")], WI_TENANT),
        (vec![(WI_CLIENT, "my-app"), (WI_TENANT, TENANT)], WI_CLIENT),
        (
            vec![(WI_CLIENT, CLIENT_ID), (WI_TENANT, "common")],
            WI_TENANT,
        ),
        (
            vec![(WI_CLIENT, CLIENT_ID), (WI_TENANT, "x/../../evil")],
            WI_TENANT,
        ),
    ] {
        let out = exec(&json, &[], &image, &sa_token(), &annotations);
        let line = out.refused_for_annotation(key);
        assert_eq!(line["service_account"], "team/puller", "{line}");
        assert_eq!(line["registry"], "contoso.azurecr.io", "{line}");
    }
    // A bad default tenant fails azure, naming the setting.
    let line = exec(
        &json,
        &[("WICP_AZURE_TENANT_ID", "common")],
        &image,
        &sa_token(),
        &[(WI_CLIENT, CLIENT_ID)],
    )
    .failure_json();
    assert_eq!(line["facts"]["flag"], "--azure-tenant-id", "{line}");
    // The token must be for Entra's audience.
    let wrong = TokenSpec::new("team", "puller", "sts.amazonaws.com").mint();
    let line = exec(&json, &[], &image, &wrong, IDENTITY).refused("token", &[("claim", "aud")]);
    assert!(
        words(&line).contains("api://AzureADTokenExchange"),
        "{line}"
    );
    assert_eq!(entra.server.request_count(), 0);
    assert_eq!(acr.server.request_count(), 0);
}

#[test]
fn entra_refusals_carry_the_aadsts_code_and_the_remedy() {
    let image = format!("{REGISTRY}/team/app");
    let mut disabled = App::trusting("team", "puller");
    disabled.enabled = false;
    let other_audience = TokenSpec::new("team", "puller", "api://SomethingElse").mint();
    // (the app Entra knows, the token, extra flags, annotations, the HTTP
    // status recorded as a fact when the case pins it, expected texts)
    type Case<'a> = (
        App,
        String,
        Vec<&'a str>,
        Vec<(&'a str, &'a str)>,
        Option<&'a str>,
        Vec<&'a str>,
    );
    let cases: Vec<Case> = vec![
        // Subject mismatch: the federated credential names another service account.
        (
            App::trusting("team", "someone-else"),
            sa_token(),
            vec![],
            IDENTITY.to_vec(),
            Some("400"),
            vec![
                "invalid_client",
                "AADSTS700213",
                "'system:serviceaccount:team:puller'",
                "--subject system:serviceaccount:team:puller",
                "--issuer https://oidc.cluster.test",
                "--audiences api://AzureADTokenExchange",
                "correlation ID ",
            ],
        ),
        // Audience mismatch: --audience lets the token through to Entra, which refuses it.
        (
            App::trusting("team", "puller"),
            other_audience,
            vec!["--audience", "api://SomethingElse"],
            IDENTITY.to_vec(),
            None,
            vec!["AADSTS700212", "matching this token's audience"],
        ),
        // Wrong tenant.
        (
            App::trusting("team", "puller"),
            sa_token(),
            vec![],
            vec![
                (WI_CLIENT, CLIENT_ID),
                (WI_TENANT, "fabrikam.onmicrosoft.com"),
            ],
            None,
            vec!["AADSTS90002", "is not known to"],
        ),
        // Unknown client.
        (
            App::trusting("team", "puller"),
            sa_token(),
            vec![],
            vec![
                (WI_CLIENT, "0f0f0f0f-0000-4000-8000-000000000000"),
                (WI_TENANT, TENANT),
            ],
            None,
            vec![
                "unauthorized_client",
                "AADSTS700016",
                "not its object or principal ID",
            ],
        ),
        // Disabled application.
        (
            disabled,
            sa_token(),
            vec![],
            IDENTITY.to_vec(),
            None,
            vec!["AADSTS7000112", "is disabled"],
        ),
        // A token the cluster did not sign: 401 from Entra.
        (
            App::trusting("team", "puller"),
            TokenSpec::new("team", "puller", azure::AUDIENCE).mint_with_wrong_key(),
            vec![],
            IDENTITY.to_vec(),
            Some("401"),
            vec!["AADSTS700027", "JWKS"],
        ),
    ];
    for (app, token, extra, annotations, status, expect) in cases {
        let entra = FakeEntra::start(app);
        let acr = FakeAcr::start(REGISTRY, &entra);
        let mut args = flags(&entra, &acr);
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(["--log-format".to_string(), "json".to_string()]);
        let out = exec(&args, &[], &image, &token, &annotations);
        let json = out.failure_json();
        assert_eq!(json["kind"], "upstream", "{json}");
        assert_eq!(json["facts"]["service"], "Entra ID", "{json}");
        let recorded = json["facts"]["status"].as_str().unwrap_or_default();
        assert!(recorded.starts_with('4'), "{json}");
        if let Some(status) = status {
            assert_eq!(recorded, status, "{json}");
        }
        let line = plugin::words(&json);
        for e in &expect {
            assert!(line.contains(e), "missing {e:?} in: {line}");
        }
        assert!(!line.contains("Trace ID"), "{line}");
        // A refusal is final: no retry, and nothing reaches ACR.
        assert_eq!(entra.server.request_count(), 1, "{line}");
        assert_eq!(acr.server.request_count(), 0);
        out.assert_no_secrets(std::slice::from_ref(&token));
    }
}

#[test]
fn entra_throttling_and_outages_are_retried_then_reported() {
    let image = format!("{REGISTRY}/team/app");
    // One 429 with Retry-After, then the real answer: the plugin waits and succeeds.
    let (entra, acr) = fakes(REGISTRY);
    entra.script([azure::entra_error(
        429,
        "temporarily_unavailable",
        50196,
        "The server temporarily blocked requests.",
    )
    .with_header("Retry-After", "1")]);
    let start = Instant::now();
    exec(&flags(&entra, &acr), &[], &image, &sa_token(), IDENTITY).response();
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "Retry-After was not honoured"
    );
    assert_eq!(entra.server.request_count(), 2);

    // A 500 and then success.
    let (entra, acr) = fakes(REGISTRY);
    entra.script([Response::text(500, "oops")]);
    exec(&flags(&entra, &acr), &[], &image, &sa_token(), IDENTITY).response();
    assert_eq!(entra.server.request_count(), 2);

    // Throttled on every attempt: the last answer is reported.
    let (entra, acr) = fakes(REGISTRY);
    entra.script((0..4).map(|_| Response::json(429, json!({})).with_header("Retry-After", "0")));
    let args = json_logs(&flags(&entra, &acr));
    let line = exec(&args, &[], &image, &sa_token(), IDENTITY)
        .refused("upstream", &[("service", "Entra ID"), ("status", "429")]);
    assert!(words(&line).contains("throttling"), "{line}");
    assert_eq!(entra.server.request_count(), 4);
    assert_eq!(acr.server.request_count(), 0);

    // Down on every attempt.
    let (entra, acr) = fakes(REGISTRY);
    entra.script((0..4).map(|_| Response::text(500, "<html>internal error</html>")));
    let args = json_logs(&flags(&entra, &acr));
    let out = exec(&args, &[], &image, &sa_token(), IDENTITY);
    let line = out.refused("upstream", &[("service", "Entra ID"), ("status", "500")]);
    assert!(words(&line).contains("failed on its side"), "{line}");
    assert!(
        !out.stderr.contains("internal error"),
        "bodies are not echoed: {line}"
    );
}

#[test]
fn entra_garbage_is_refused_without_echoing_it() {
    let image = format!("{REGISTRY}/team/app");
    let leaked = "eyJhbGciOiJIUzI1NiJ9.eyJzZWNyZXQiOnRydWV9.c2VjcmV0LXNpZ25hdHVyZQ";
    for (body, expect) in [
        (format!("{{\"access_token\":\"{leaked}\""), "not JSON"),
        (
            format!("{{\"token_type\":\"Bearer\",\"tokn\":\"{leaked}\"}}"),
            "JSON without the expected fields",
        ),
        (format!("<html>{leaked}</html>"), "HTML or XML"),
        (
            "{\"access_token\":\"\"}".to_string(),
            "JSON without the expected fields",
        ),
    ] {
        let (entra, acr) = fakes(REGISTRY);
        entra.script([
            Response::text(200, body.clone()).with_header("Content-Type", "application/json")
        ]);
        let args = json_logs(&flags(&entra, &acr));
        let out = exec(&args, &[], &image, &sa_token(), IDENTITY);
        let line = out.refused("upstream", &[("service", "Entra ID"), ("status", "200")]);
        let shape = line["facts"]["body_shape"].as_str().unwrap();
        assert!(shape.contains(expect), "{body}: {line}");
        assert!(
            !out.stderr.contains("c2VjcmV0LXNpZ25hdHVyZQ"),
            "{}",
            out.stderr
        );
        assert_eq!(acr.server.request_count(), 0);
    }
}

#[test]
fn acr_refusals_and_garbage_are_reported() {
    let image = format!("{REGISTRY}/team/app");
    // The script, the status ACR's refusal is recorded with (a fact, not
    // words), and the words the message and its fix must carry.
    let cases: Vec<(Vec<Response>, Option<&str>, Vec<&str>)> = vec![
        (
            vec![acr_error(
                401,
                "UNAUTHORIZED",
                "authentication required, visit https://aka.ms/acr/authorization for more information.",
            )],
            Some("401"),
            vec!["UNAUTHORIZED: authentication required", "AcrPull"],
        ),
        (
            vec![acr_error(
                403,
                "DENIED",
                "client with IP '10.0.0.1' is not allowed access.",
            )],
            Some("403"),
            vec!["DENIED", "network rules"],
        ),
        (
            vec![Response::text(404, "404 page not found")],
            Some("404"),
            vec!["no /oauth2/exchange"],
        ),
        (
            (0..4).map(|_| Response::text(503, "busy")).collect(),
            Some("503"),
            vec!["failed on its side"],
        ),
        (
            (0..4)
                .map(|_| {
                    acr_error(429, "TOOMANYREQUESTS", "too many requests")
                        .with_header("Retry-After", "0")
                })
                .collect(),
            Some("429"),
            vec!["throttling"],
        ),
        (
            vec![
                Response::text(200, "{\"refresh_token\":")
                    .with_header("Content-Type", "application/json"),
            ],
            Some("200"),
            vec!["with no refresh token", "not JSON"],
        ),
        (
            vec![Response::json(200, json!({"access_token": "x"}))],
            Some("200"),
            vec!["with no refresh token"],
        ),
        (
            vec![Response::json(
                200,
                json!({"refresh_token": "opaque-refresh-token-value"}),
            )],
            None,
            vec!["not a JWT with an exp claim"],
        ),
    ];
    for (script, status, expect) in cases {
        let (entra, acr) = fakes(REGISTRY);
        acr.script(script);
        let token = sa_token();
        let mut args = flags(&entra, &acr);
        args.extend(["--log-format".to_string(), "json".to_string()]);
        let out = exec(&args, &[], &image, &token, IDENTITY);
        let line = out.failure_json();
        assert_eq!(line["kind"], "upstream", "{line}");
        match status {
            Some(status) => {
                let service = line["facts"]["service"].as_str().unwrap_or_default();
                assert!(service.starts_with("ACR"), "{line}");
                assert_eq!(line["facts"]["status"], status, "{line}");
                assert!(line["facts"]["body_shape"].is_string(), "{line}");
            }
            None => assert!(line.get("facts").is_none(), "{line}"),
        }
        let words = plugin::words(&line);
        for e in &expect {
            assert!(words.contains(e), "missing {e:?} in: {line}");
        }
        assert!(
            words.contains(&format!("refresh token for {REGISTRY}")) || words.contains("ACR at"),
            "{line}"
        );
        let mut secrets = all_secrets(&token, &entra, &acr);
        secrets.push("opaque-refresh-token-value".into());
        out.assert_no_secrets(&secrets);
    }

    // One 429 with Retry-After, then ACR's answer.
    let (entra, acr) = fakes(REGISTRY);
    acr.script([acr_error(429, "TOOMANYREQUESTS", "slow down").with_header("Retry-After", "1")]);
    let start = Instant::now();
    exec(&flags(&entra, &acr), &[], &image, &sa_token(), IDENTITY).response();
    assert!(start.elapsed() >= Duration::from_secs(1));
    assert_eq!(acr.server.request_count(), 2);
    // The Entra token is requested once: only the failed call is repeated.
    assert_eq!(entra.server.request_count(), 1);
}

/// Every ACR host form in every cloud is served, with the host itself as the
/// auth key and the service the refresh token is for.
#[test]
fn every_acr_host_form_and_cloud_is_served() {
    for host in [
        "contoso.azurecr.io",
        "contoso.azurecr.cn",
        "contoso.azurecr.us",
        "contoso.azurecr.de",
        "contoso-e3fsa9c2b0dq.azurecr.io",
        "contoso.westeurope.geo.azurecr.io",
        "contoso.chinanorth3.geo.azurecr.cn",
        "contoso-e3fsa9c2b0dq.usgovvirginia.geo.azurecr.us",
    ] {
        let (entra, acr) = fakes(host);
        let out = exec(
            &flags(&entra, &acr),
            &[],
            &format!("{host}/team/app:v1"),
            &sa_token(),
            IDENTITY,
        );
        let response = out.response();
        assert_eq!(response["auth"][host]["username"], NULL_GUID, "{host}");
        assert_eq!(acr.server.requests()[0].form()["service"], host);
        // And with auto routing.
        let mut args = flags(&entra, &acr);
        support::plugin::set_flag(&mut args, "--provider", "auto");
        exec(
            &args,
            &[],
            &format!("{host}/team/app"),
            &sa_token(),
            IDENTITY,
        )
        .response();
    }
}

#[test]
fn lookalike_hosts_never_get_a_token() {
    let (entra, acr) = fakes(REGISTRY);
    for host in [
        "evil.azurecr.io.attacker.net",
        "azurecr.io.evil",
        "contoso.azurecr.io.azurecr.cn",
        "contoso.azurecr.com",
        "contoso.evil.azurecr.io",
        "contoso.eastus.data.azurecr.io",
        "contoso.geo.azurecr.io",
        "contoso-a-b.azurecr.io",
        "contoso.azurecr.io:5000",
        "127.0.0.1:5000",
    ] {
        let image = format!("{host}/team/app");
        let mut args = flags(&entra, &acr);
        args.extend(["--log-format", "json"].map(String::from));
        exec(&args, &[], &image, &sa_token(), IDENTITY).refused_registry(host);
        support::plugin::set_flag(&mut args, "--provider", "auto");
        exec(&args, &[], &image, &sa_token(), IDENTITY).refused_registry(host);
    }
    assert_eq!(entra.server.request_count(), 0);
    assert_eq!(acr.server.request_count(), 0);
}

/// Without overrides, the registry's cloud decides where the service
/// account token goes, and the Entra token goes to the login server itself.
/// An HTTPS proxy on loopback records the CONNECT target and refuses it, so
/// nothing leaves the machine and no secret is in what it sees.
#[test]
fn the_cloud_picks_the_authority_and_the_login_server_gets_the_exchange() {
    let proxy = TestServer::start(|_req| Response::text(403, "no tunnels here"));
    let env = [("HTTPS_PROXY", proxy.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for (host, authority) in [
        ("contoso.azurecr.io", "login.microsoftonline.com:443"),
        (
            "contoso.westeurope.geo.azurecr.io",
            "login.microsoftonline.com:443",
        ),
        ("contoso.azurecr.cn", "login.chinacloudapi.cn:443"),
        ("contoso.azurecr.us", "login.microsoftonline.us:443"),
    ] {
        let before = proxy.request_count();
        let args = ["--provider", "azure", "--timeout", "10s"];
        let line = exec(
            &json_logs(&args),
            &env,
            &format!("{host}/team/app"),
            &sa_token(),
            IDENTITY,
        )
        .refused("network", &[("service", "Entra ID")]);
        assert!(
            words(&line).contains("the Entra ID token request to https://"),
            "{line}"
        );
        let requests = proxy.requests();
        assert!(requests.len() > before, "{line}");
        for req in &requests[before..] {
            assert_eq!(req.method, "CONNECT");
            assert_eq!(req.path, authority, "{host}");
            assert!(req.body.is_empty());
        }
    }
    // The retired German cloud has no default authority.
    let before = proxy.request_count();
    let line = exec(
        &json_logs(&["--provider", "azure"]),
        &env,
        "contoso.azurecr.de/team/app",
        &sa_token(),
        IDENTITY,
    )
    .refused_registry("contoso.azurecr.de");
    support::assert_says(&words(&line), &["AzureGermany", "--azure-authority-host"]);
    assert_eq!(proxy.request_count(), before);

    // With Entra reachable, the exchange goes to https://<registry>.
    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let before = proxy.request_count();
    let args = [
        "--provider",
        "azure",
        "--timeout",
        "10s",
        "--azure-authority-host",
        &entra.url(),
    ]
    .map(str::to_string);
    let line = exec(
        &json_logs(&args),
        &env,
        "contoso.azurecr.cn/team/app",
        &sa_token(),
        IDENTITY,
    )
    .refused("network", &[("service", "ACR")]);
    assert!(
        words(&line).contains("the ACR token exchange at https://contoso.azurecr.cn"),
        "{line}"
    );
    let requests = proxy.requests();
    assert!(requests.len() > before);
    for req in &requests[before..] {
        assert_eq!(req.path, "contoso.azurecr.cn:443");
    }
    assert_eq!(entra.server.request_count(), 1);
}

#[test]
fn bad_settings_fail_azure_but_not_other_providers() {
    let token = sa_token();
    for (env, expect) in [
        (
            ("WICP_ACR_ENDPOINT", "contoso.azurecr.io"),
            "--acr-endpoint",
        ),
        (
            ("WICP_AZURE_AUTHORITY_HOST", "ftp://login.example"),
            "--azure-authority-host",
        ),
        (("AZURE_TENANT_ID", "not a tenant"), "--azure-tenant-id"),
    ] {
        run(
            &["--provider", "azure", "--log-format", "json"],
            &[env],
            request(
                &format!("{REGISTRY}/a"),
                Some(&token),
                &[(WI_CLIENT, CLIENT_ID)],
            )
            .as_bytes(),
        )
        .refused("config", &[("flag", expect)]);
        // Passthrough on the same node still works.
        let pass = TokenSpec::new("team", "puller", "harbor.test").mint();
        run(
            support::plugin::PASSTHROUGH,
            &[env],
            request("harbor.test/a", Some(&pass), &[]).as_bytes(),
        )
        .response();
    }
}

/// A real OCI client end to end. The image names an ACR host; the fake ACR
/// (reached through --acr-endpoint) mints the refresh token for that host;
/// the real registry's token service accepts exactly what ACR's token
/// endpoint would, the null-GUID username with a refresh token ACR signed
/// for this login server and not yet expired; and skopeo pulls from the
/// local registry with the credentials the plugin returned. The local
/// registry listens on 127.0.0.1:PORT, not on the ACR host, so skopeo is
/// pointed at it with the plugin's credentials for the ACR host: that
/// re-targeting is the only liberty taken. Then containerd pulls the same
/// way, through the GET fallback ACR's answer to its POST sends it to.
#[test]
fn skopeo_and_containerd_pull_with_the_acr_refresh_token() {
    use support::containerd::Containerd;
    use support::registry::{Registry, TokenPost};

    let (entra, acr) = fakes(REGISTRY);
    let verify = acr.refresh_verifier();
    let registry =
        Registry::start_with_token_service(TokenPost::Refuse(400), move |username, password| {
            username == NULL_GUID && verify(password).is_ok()
        });
    let digest = registry.push_test_image("team/app", "v1");

    let token = sa_token();
    let out = exec(
        &flags(&entra, &acr),
        &[],
        &format!("{REGISTRY}/team/app"),
        &token,
        IDENTITY,
    );
    let response = out.response();
    let (username, password) = support::plugin::auth_entry(&response, REGISTRY);
    registry
        .pull("team/app", "v1", username, password)
        .expect("skopeo pulls with the plugin's ACR credentials");
    let accepted = registry.token_requests_accepted();
    assert!(accepted >= 1);

    // What must not pull: the refresh token with another username, a
    // refresh token minted by another login server, the Entra access token,
    // and the service account token itself.
    let (other_entra, other_acr) = fakes("fabrikam.azurecr.io");
    let out = exec(
        &flags(&other_entra, &other_acr),
        &[],
        "fabrikam.azurecr.io/team/app",
        &sa_token(),
        IDENTITY,
    );
    let foreign: Value = out.response()["auth"]["fabrikam.azurecr.io"]["password"].clone();
    for (user, pass) in [
        ("someone", password.to_string()),
        (NULL_GUID, foreign.as_str().unwrap().to_string()),
        (NULL_GUID, entra.issued()[0].clone()),
        (NULL_GUID, token.clone()),
    ] {
        let err = registry
            .pull("team/app", "v1", user, &pass)
            .expect_err("must not pull");
        assert!(err.contains("unauthorized"), "{err}");
    }
    assert_eq!(registry.token_requests_accepted(), accepted);

    // containerd, the runtime on the node, with the same credentials. Its OAuth2 POST with the
    // null-GUID username is refused 400, as ACR does (TokenPost::Refuse), and it logs in with
    // the GET instead. A refresh token minted for another registry first, while containerd's
    // store is empty.
    let containerd = Containerd::start();
    let image = format!("{}/team/app:v1", registry.host());
    let before = registry.token_calls().len();
    let err = containerd
        .pull(&image, NULL_GUID, foreign.as_str().unwrap())
        .expect_err("another registry's refresh token must not pull");
    assert!(err.contains("401 Unauthorized"), "{err}");
    assert_eq!(registry.token_requests_accepted(), accepted);
    let refused = registry.token_calls().len();
    let pulled = containerd
        .pull(&image, username, password)
        .unwrap_or_else(|e| panic!("containerd refused the plugin's ACR credentials:\n{e}"));
    assert_eq!(pulled, digest);
    let calls = registry.token_calls();
    let post = ("POST".to_string(), 400);
    assert_eq!(
        calls[before..refused],
        [post.clone(), ("GET".to_string(), 401)],
        "{calls:?}"
    );
    let logins = &calls[refused..];
    assert!(
        !logins.is_empty()
            && logins
                .chunks(2)
                .all(|pair| pair == [post.clone(), ("GET".to_string(), 200)]),
        "each login: POST refused 400, then GET granted: {calls:?}"
    );
}

/// The identity-binding flags for `binding`, trusting only the test
/// cluster CA.
fn binding_flags(entra: &FakeEntra, acr: &FakeAcr, binding: &FakeIdentityBinding) -> Vec<String> {
    let mut args = flags(entra, acr);
    args.extend(
        [
            "--azure-identity-binding-sni",
            azure::BINDING_SNI,
            "--azure-identity-binding-address",
            &binding.address(),
            "--azure-identity-binding-ca",
            support::net::CLUSTER_CA_PEM,
        ]
        .map(str::to_string),
    );
    args
}

/// AKS identity bindings (cloud-provider-azure #9907): the service
/// account token goes to the pinned binding endpoint only (dialled at the
/// given address with the binding's SNI name, trusting only the cluster
/// CA, past an HTTPS proxy that must see nothing), never to Entra ID; the
/// endpoint's access token goes through the ACR exchange; nothing secret
/// reaches stderr.
#[test]
fn identity_binding_sends_the_token_to_the_pinned_endpoint_then_acr() {
    let (entra, acr) = fakes(REGISTRY);
    let binding = FakeIdentityBinding::start(&entra, &[("team", "puller", CLIENT_ID)]);
    let proxy = TestServer::start(|_req| Response::text(403, "no tunnels here"));
    let proxy_url = proxy.url();
    let env = [("HTTPS_PROXY", proxy_url.as_str())];
    let token = TokenSpec::new("team", "puller", azure::BINDING_AUDIENCE).mint();
    let out = exec(
        &binding_flags(&entra, &acr, &binding),
        &env,
        &format!("{REGISTRY}/team/app"),
        &token,
        &[(AKS_CLIENT, CLIENT_ID)],
    );
    let response = out.response();
    let minted = acr.minted();
    assert_eq!(minted.len(), 1);
    assert_eq!(
        response["auth"][REGISTRY],
        json!({"username": NULL_GUID, "password": minted[0]})
    );
    let requests = binding.server.requests();
    assert_eq!(requests.len(), 1);
    let form = requests[0].form();
    assert_eq!(form["client_assertion"], token);
    assert_eq!(form["client_id"], CLIENT_ID);
    assert_eq!(
        binding.front.server_names(),
        vec![Some(azure::BINDING_SNI.to_string())]
    );
    let acr_form = acr.server.requests()[0].form();
    assert_eq!(acr_form["access_token"], binding.issued()[0]);
    assert_eq!(acr_form["service"], REGISTRY);
    assert_eq!(
        entra.server.request_count(),
        0,
        "the token went to Entra ID"
    );
    assert_eq!(proxy.request_count(), 0, "the token went through the proxy");
    let mut secrets = vec![token];
    secrets.extend(binding.issued());
    secrets.extend(minted);
    out.assert_no_secrets(&secrets);
}

/// Round-5 item 3: a service account carrying both client-ID keys,
/// different (its app's workload identity and its pull identity), pulls
/// with the ACR key, the one meant for pulls, in an identity binding and
/// through Entra ID alike, with a warning naming both keys; the workload
/// identity key is used only when it is the only one.
#[test]
fn the_acr_client_id_wins_over_the_workload_identity_one() {
    const APP: &str = "99999999-8888-7777-6666-555555555555";
    let both = [
        (AKS_CLIENT, CLIENT_ID),
        (WI_CLIENT, APP),
        (WI_TENANT, TENANT),
    ];
    let (entra, acr) = fakes(REGISTRY);
    let binding = FakeIdentityBinding::start(&entra, &[("team", "puller", CLIENT_ID)]);
    let token = TokenSpec::new("team", "puller", azure::BINDING_AUDIENCE).mint();
    let image = format!("{REGISTRY}/team/app");
    let out = exec(
        &binding_flags(&entra, &acr, &binding),
        &[],
        &image,
        &token,
        &both,
    );
    out.response();
    assert_eq!(binding.server.requests()[0].form()["client_id"], CLIENT_ID);
    support::assert_says(
        &out.stderr,
        &[
            AKS_CLIENT,
            WI_CLIENT,
            "disagree",
            "pulling with kubernetes.azure.com/acr-client-id",
        ],
    );

    let out = exec(&flags(&entra, &acr), &[], &image, &sa_token(), &both);
    out.response();
    assert_eq!(entra.server.requests()[0].form()["client_id"], CLIENT_ID);
    exec(&flags(&entra, &acr), &[], &image, &sa_token(), IDENTITY).response();
    assert_eq!(entra.server.requests()[1].form()["client_id"], CLIENT_ID);
}

/// Round-5 item 9: the identity binding's only trust anchor must be a
/// file no other user can change; one another user may write is refused
/// before the token goes anywhere.
#[test]
fn an_identity_binding_ca_another_user_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let (entra, acr) = fakes(REGISTRY);
    let binding = FakeIdentityBinding::start(&entra, &[("team", "puller", CLIENT_ID)]);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::copy(support::net::CLUSTER_CA_PEM, &ca).unwrap();
    std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut args = binding_flags(&entra, &acr, &binding);
    plugin::set_flag(
        &mut args,
        "--azure-identity-binding-ca",
        ca.to_str().unwrap(),
    );
    let token = TokenSpec::new("team", "puller", azure::BINDING_AUDIENCE).mint();
    let out = exec(
        &json_logs(&args),
        &[],
        &format!("{REGISTRY}/team/app"),
        &token,
        &[(AKS_CLIENT, CLIENT_ID)],
    );
    let line = out.refused("config", &[("flag", "--azure-identity-binding-ca")]);
    assert!(words(&line).contains("other users may write it"), "{line}");
    assert_eq!(binding.server.request_count(), 0);
    assert_eq!(binding.front.server_names().len(), 0, "no connection");
}

/// What the binding path refuses, each with one clear line and nothing
/// sent where it should not go: a service account the cluster did not
/// bind (the endpoint's 403, with the RBAC to add), a server whose
/// certificate the cluster CA did not sign (the ordinary test CA's, for
/// 127.0.0.1), a token for Entra ID's audience, no client ID, settings
/// that cannot work, and a request without a token.
#[test]
fn identity_binding_refusals() {
    let (entra, acr) = fakes(REGISTRY);
    let binding = FakeIdentityBinding::start(&entra, &[("team", "puller", CLIENT_ID)]);
    let image = format!("{REGISTRY}/team/app");
    let args = binding_flags(&entra, &acr, &binding);

    let other = TokenSpec::new("team", "intruder", azure::BINDING_AUDIENCE).mint();
    let binding_refused = [("service", "the AKS identity binding"), ("status", "403")];
    let line = exec(
        &json_logs(&args),
        &[],
        &image,
        &other,
        &[(AKS_CLIENT, CLIENT_ID)],
    )
    .refused("upstream", &binding_refused);
    support::assert_says(
        &words(&line),
        &[
            "the AKS identity binding at ib.cluster.test refused",
            "HTTP 403, unauthorized_client",
            "use-managed-identity",
            "team/intruder",
        ],
    );

    // A server with a certificate the cluster CA did not sign.
    let backend = TestServer::start(|_req| Response::json(200, json!({"access_token": "x"})));
    let stranger = support::net::TlsFront::start(backend.addr());
    let mut pinned_elsewhere = flags(&entra, &acr);
    pinned_elsewhere.extend(
        [
            "--azure-identity-binding-sni",
            "localhost",
            "--azure-identity-binding-address",
            &stranger.addr().to_string(),
            "--azure-identity-binding-ca",
            support::net::CLUSTER_CA_PEM,
        ]
        .map(str::to_string),
    );
    let token = TokenSpec::new("team", "puller", azure::BINDING_AUDIENCE).mint();
    let line = exec(
        &json_logs(&pinned_elsewhere),
        &[],
        &image,
        &token,
        &[(AKS_CLIENT, CLIENT_ID)],
    )
    .refused("network", &[("service", "the AKS identity binding")]);
    assert!(words(&line).contains("certificate"), "{line}");
    assert_eq!(
        backend.request_count(),
        0,
        "a request passed an untrusted certificate"
    );

    // Entra ID's audience is not the binding's.
    let entra_token = sa_token();
    let json = json_logs(&args);
    let line = exec(&json, &[], &image, &entra_token, &[(AKS_CLIENT, CLIENT_ID)])
        .refused("token", &[("claim", "aud")]);
    assert!(words(&line).contains(azure::BINDING_AUDIENCE), "{line}");

    let line = exec(&json, &[], &image, &token, &[]).refused_for_annotation(AKS_CLIENT);
    assert!(
        words(&line).contains("--azure-identity-binding-client-id"),
        "{line}"
    );

    for bad in [
        vec!["--azure-identity-binding-sni", "https://ib.cluster.test"],
        vec!["--azure-identity-binding-sni", "ib.cluster.test"],
        vec!["--azure-identity-binding-address", "10.0.0.1"],
    ] {
        let a = json_logs(&[flags(&entra, &acr), plugin::flags(&bad, &[])].concat());
        exec(&a, &[], &image, &token, &[(AKS_CLIENT, CLIENT_ID)])
            .refused("config", &[("flag", bad[0])]);
    }

    let out = run(
        &json,
        &[],
        request(&image, None, &[(AKS_CLIENT, CLIENT_ID)]).as_bytes(),
    );
    out.refused("token", &[]);

    assert_eq!(binding.issued().len(), 0);
    assert_eq!(entra.server.request_count(), 0);
    assert_eq!(acr.server.request_count(), 0);
}

/// An ACR cache rule as a registry mirror: the kubelet asks about
/// `mcr.microsoft.com/...`; with `--registry-mirror
/// mcr.microsoft.com=contoso.azurecr.io` the Entra and ACR exchanges are
/// for contoso.azurecr.io and the refresh token is keyed
/// `mcr.microsoft.com`, the key the kubelet looks up.
#[test]
fn an_acr_cache_rule_serves_mcr_keyed_by_mcr() {
    let (entra, acr) = fakes(REGISTRY);
    let token = sa_token();
    let mut args = flags(&entra, &acr);
    args.extend([
        "--registry-mirror".to_string(),
        format!("mcr.microsoft.com={REGISTRY}"),
    ]);
    let out = exec(
        &args,
        &[],
        "mcr.microsoft.com/dotnet/runtime",
        &token,
        IDENTITY,
    );
    let response = out.response();
    let minted = acr.minted();
    assert_eq!(minted.len(), 1);
    assert_eq!(
        response["auth"],
        json!({"mcr.microsoft.com": {"username": NULL_GUID, "password": minted[0]}})
    );
    let form = acr.server.requests()[0].form();
    assert_eq!(form["service"], REGISTRY);
    out.assert_no_secrets(&all_secrets(&token, &entra, &acr));
}

/// Annotations name an identity, never where the token goes: a service
/// account annotated with the stock plugin's flag names (and a client ID
/// that is a URL) cannot point the identity-binding exchange at another
/// host. A listener at the address the annotations name sees nothing; the
/// configured endpoint gets the one well-formed request, and a client ID
/// that is not a GUID is refused before any request.
#[test]
fn identity_binding_annotations_cannot_move_the_endpoint() {
    let (entra, acr) = fakes(REGISTRY);
    let binding = FakeIdentityBinding::start(&entra, &[("team", "puller", CLIENT_ID)]);
    let attacker = TestServer::start(|_req| Response::json(200, json!({"access_token": "stolen"})));
    let attacker_address = attacker.addr().to_string();
    let image = format!("{REGISTRY}/team/app");
    let token = TokenSpec::new("team", "puller", azure::BINDING_AUDIENCE).mint();
    let args = binding_flags(&entra, &acr, &binding);
    let hostile = [
        (AKS_CLIENT, CLIENT_ID),
        ("kubernetes.azure.com/ib-sni-name", "attacker.test"),
        (
            "kubernetes.azure.com/ib-apiserver-ip",
            attacker_address.as_str(),
        ),
        (
            "azure.workload.identity/authority-host",
            attacker_address.as_str(),
        ),
    ];
    let response = exec(&args, &[], &image, &token, &hostile).response();
    assert_eq!(
        response["auth"][REGISTRY]["password"],
        acr.minted()[0].as_str()
    );
    assert_eq!(binding.server.request_count(), 1);
    assert_eq!(
        binding.front.server_names(),
        vec![Some(azure::BINDING_SNI.to_string())]
    );

    let url_client = format!("https://{attacker_address}/");
    exec(
        &json_logs(&args),
        &[],
        &image,
        &token,
        &[(AKS_CLIENT, url_client.as_str())],
    )
    .refused_for_annotation(AKS_CLIENT);
    assert_eq!(binding.server.request_count(), 1);
    assert_eq!(
        attacker.request_count(),
        0,
        "the token went where an annotation said"
    );
}
