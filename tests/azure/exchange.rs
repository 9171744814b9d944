//! The Entra ID and ACR exchange that works: the request each side
//! receives, cache durations, annotation keys, authorities and clouds, ACR
//! host forms, real pulls, and ACR cache rules.

use super::*;

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
