//! AKS identity bindings: the token goes to the endpoint the admin pinned,
//! never one an annotation names, over a CA only root may write.

use super::*;

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
