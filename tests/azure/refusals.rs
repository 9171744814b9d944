//! What Entra ID and ACR refuse, and what we refuse before the network:
//! each with its code and remedy, retried where it is transient, never
//! echoing what came back.

use super::*;

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
