//! Every provider served by the .exe under Wine, and TLS from the
//! Windows certificate store plus --ca-file or SSL_CERT_FILE.

use super::*;

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn the_exe_answers_version_with_every_provider() {
    let _ = WHY;
    let out = on_windows(|| run(&["--version"], &[], b""));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("wi-credential-provider "), "{text}");
    for name in [
        "aws",
        "azure",
        "chainguard",
        "cloudsmith",
        "gcp",
        "jfrog",
        "passthrough",
        "quay",
        "token-exchange",
        "vault",
    ] {
        assert!(text.contains(name), "{name} missing: {text}");
    }
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn passthrough_by_the_exe_name() {
    let token = TokenSpec::new("team", "puller", "harbor.test").mint();
    let args = ["--registry", "harbor.test", "--audience", "harbor.test"];
    let stdin = request("harbor.test/team/app", Some(&token), &[]);
    // The kubelet execs `<bin dir>\wi-credential-provider-passthrough.exe`.
    let out = on_windows(|| {
        run_as(
            "wi-credential-provider-passthrough",
            &args,
            &[],
            stdin.as_bytes(),
        )
    });
    let response = served(
        &out,
        "harbor.test/team/app",
        "harbor.test",
        vec![token.clone()],
        &token,
    );
    assert_eq!(
        response["auth"]["harbor.test"]["username"],
        "serviceaccount"
    );
    // The same name with no provider in it serves nothing by itself.
    let out = on_windows(|| run_as("wi-credential-provider", &args, &[], stdin.as_bytes()));
    let line = out.failure();
    assert!(line.contains("harbor.test"), "{line}");
    // A token for another audience: refused before anything is returned.
    let other = TokenSpec::new("team", "puller", "elsewhere.test").mint();
    let out = on_windows(|| {
        run_as(
            "wi-credential-provider-passthrough",
            &args,
            &[],
            request("harbor.test/team/app", Some(&other), &[]).as_bytes(),
        )
    });
    refused(&out, "team/puller");
    out.assert_no_secrets(&[&other]);
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn jfrog() {
    let fake = jfrog::start(
        Trust::service_account("team", "puller", "registry.vendor.test"),
        jfrog::Integration {
            provider_name: "k8s".into(),
            project_key: None,
            mapping: "team".into(),
            username: "k8s-team".into(),
        },
    );
    vendor_case(
        "jfrog",
        &fake,
        "--jfrog-url",
        &["--jfrog-provider-name", "k8s"],
        &[],
        jfrog::error(403, "FORBIDDEN", "no"),
    );
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn quay() {
    let fake = quay::start(
        Trust::service_account("team", "puller", "registry.vendor.test"),
        "acme+puller",
    );
    vendor_case(
        "quay",
        &fake,
        "--quay-url",
        &["--quay-organization", "acme"],
        &[("wi-credential-provider.io/quay-robot", "acme+puller")],
        quay::error(403, "no"),
    );
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn cloudsmith() {
    let fake = cloudsmith::start(
        Trust::service_account("team", "puller", "registry.vendor.test"),
        "acme",
        "puller",
    );
    vendor_case(
        "cloudsmith",
        &fake,
        "--cloudsmith-url",
        &["--cloudsmith-org", "acme"],
        &[("wi-credential-provider.io/cloudsmith-service", "puller")],
        cloudsmith::error(403, "no"),
    );
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn chainguard() {
    const IMAGE: &str = "cgr.dev/example.com/app:latest";
    let cg = FakeChainguard::start();
    let token = TokenSpec::new("team", "puller", chainguard::AUDIENCE).mint();
    let args = cg.flags(&["--provider", "chainguard", "--log-level", "debug"]);
    let annotations = [("wi-credential-provider.io/chainguard-identity", IDENTITY)];
    let out = exec(&args, &[], IMAGE, &token, &annotations);
    served(&out, IMAGE, "cgr.dev", cg.issued(), &token);
    cg.script([chainguard::grpc_error(403, 7, "permission denied")]);
    let out = exec(&args, &[], IMAGE, &token, &annotations);
    refused(&out, "team/puller");
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn vault() {
    const IMAGE: &str = "registry.example.com/team/app";
    let vault = FakeVault::kubernetes_team("vault-kept-password");
    let token = TokenSpec::new("team", "puller", "vault.cluster.test").mint();
    let args = vault.flags(&[
        "--provider",
        "vault",
        "--registry",
        "registry.example.com",
        "--audience",
        "vault.cluster.test",
        "--log-level",
        "debug",
    ]);
    let annotations = [
        ("wi-credential-provider.io/vault-role", "puller"),
        ("wi-credential-provider.io/vault-secret", "team/app"),
    ];
    let out = exec(&args, &[], IMAGE, &token, &annotations);
    served(
        &out,
        IMAGE,
        "registry.example.com",
        vec!["vault-kept-password".into()],
        &token,
    );
    for issued in vault.issued_tokens() {
        assert!(!out.stderr.contains(&issued), "{}", out.stderr);
    }
    // A role Vault does not know.
    let out = exec(
        &args,
        &[],
        IMAGE,
        &token,
        &[
            ("wi-credential-provider.io/vault-role", "nobody"),
            ("wi-credential-provider.io/vault-secret", "team/app"),
        ],
    );
    refused(&out, "team/puller");
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn token_exchange() {
    const IMAGE: &str = "registry.example.com/team/app";
    let sts = FakeSts::start(Expect::puller());
    let args = sts.entry(&["--log-level", "debug"]);
    let token = TokenSpec::new("team", "puller", "sts.cluster.test").mint();
    let out = exec(&args, &[], IMAGE, &token, &[]);
    served(&out, IMAGE, "registry.example.com", sts.issued(), &token);
    // Another service account: the server grants only team/puller.
    let other = TokenSpec::new("team", "intruder", "sts.cluster.test").mint();
    let out = exec(&args, &[], IMAGE, &other, &[]);
    refused(&out, "team/intruder");
    out.assert_no_secrets(&[&other]);
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn aws_against_moto() {
    let moto = Moto::start();
    let token = TokenSpec::new("team", "puller", "sts.amazonaws.com").mint();
    let host = "210987654321.dkr.ecr.eu-west-1.amazonaws.com";
    let image = format!("{host}/team/app");
    let args = strings(&["--provider", "aws", "--log-level", "debug"]);
    let role = [(
        "eks.amazonaws.com/role-arn",
        "arn:aws:iam::210987654321:role/ecr-pull",
    )];
    let out = exec(
        &args,
        &[("AWS_ENDPOINT_URL", &moto.url())],
        &image,
        &token,
        &role,
    );
    // moto's ECR password names the account STS's credentials belong to:
    // STS, then ECR signed with what STS returned.
    let response = served(
        &out,
        &image,
        host,
        vec!["210987654321-auth-token".into()],
        &token,
    );
    assert_eq!(response["auth"][host]["username"], "AWS");
    // STS refuses: one line naming the account and the role.
    let sts = TestServer::start(|_| {
        Response::text(
            403,
            "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>\
             <Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message>\
             </Error><RequestId>r</RequestId></ErrorResponse>",
        )
        .with_header("Content-Type", "text/xml")
    });
    let out = exec(
        &args,
        &[
            ("AWS_ENDPOINT_URL_STS", &sts.url()),
            ("AWS_ENDPOINT_URL_ECR", "http://127.0.0.1:9"),
        ],
        &image,
        &token,
        &role,
    );
    let line = refused(&out, "team/puller");
    assert!(line.contains("AccessDenied"), "{line}");
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn azure() {
    const IMAGE: &str = "contoso.azurecr.io/team/app";
    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let acr = FakeAcr::start("contoso.azurecr.io", &entra);
    let token = TokenSpec::new("team", "puller", azure::AUDIENCE).mint();
    let out = exec(
        &azure::flags(&entra, &acr, AZURE),
        &[],
        IMAGE,
        &token,
        &AZURE_IDENTITY,
    );
    served(&out, IMAGE, "contoso.azurecr.io", acr.minted(), &token);
    for issued in entra.issued() {
        assert!(!out.stderr.contains(&issued), "{}", out.stderr);
    }
    // A service account Entra has no federated credential for.
    let other = TokenSpec::new("team", "other", azure::AUDIENCE).mint();
    let out = exec(
        &azure::flags(&entra, &acr, AZURE),
        &[],
        IMAGE,
        &other,
        &AZURE_IDENTITY,
    );
    let line = refused(&out, "team/other");
    assert!(line.contains("AADSTS"), "{line}");
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn gcp() {
    const IMAGE: &str = "us-docker.pkg.dev/my-project/team/app";
    let sts = GoogleSts::start();
    let token = TokenSpec::new("team", "puller", &format!("{GCP_PROJECT}.svc.id.goog")).mint();
    let args = strings(&[
        "--provider",
        "gcp",
        "--log-level",
        "debug",
        "--gcp-project-id",
        GCP_PROJECT,
        "--gcp-cluster",
        GCP_CLUSTER,
        "--gcp-sts-endpoint",
        &sts.server.url(),
    ]);
    let out = exec(&args, &[], IMAGE, &token, &[]);
    let response = served(&out, IMAGE, "us-docker.pkg.dev", sts.issued(), &token);
    assert_eq!(
        response["auth"]["us-docker.pkg.dev"]["username"],
        "oauth2accesstoken"
    );
    sts.script([Response::json(
        403,
        json!({"error": {"code": 403, "message": "Request is prohibited by organization's policy.", "status": "PERMISSION_DENIED"}}),
    )]);
    let out = exec(&args, &[], IMAGE, &token, &[]);
    refused(&out, "team/puller");
}

/// TLS on Windows: the certificate store's chain engine with `--ca-file`
/// on top vouches for a server whose CA only that file names; without it
/// the same server is refused; `SSL_CERT_FILE` replaces the store.
#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn tls_trusts_the_store_plus_the_ca_file_or_ssl_cert_file() {
    use support::net::{CA_PEM, TlsFront};
    const IMAGE: &str = "us-docker.pkg.dev/my-project/team/app";
    let sts = GoogleSts::start();
    let front = TlsFront::start(sts.server.addr());
    let token = TokenSpec::new("team", "puller", &format!("{GCP_PROJECT}.svc.id.goog")).mint();
    let args = |extra: &[&str]| {
        let mut args = strings(&[
            "--provider",
            "gcp",
            "--gcp-project-id",
            GCP_PROJECT,
            "--gcp-cluster",
            GCP_CLUSTER,
            "--gcp-sts-endpoint",
            &front.url(),
        ]);
        args.extend(strings(extra));
        args
    };
    let ca = windows::path(Path::new(CA_PEM));
    let out = exec(&args(&["--ca-file", &ca]), &[], IMAGE, &token, &[]);
    served(&out, IMAGE, "us-docker.pkg.dev", sts.issued(), &token);
    assert_eq!(front.requests(), 1, "{}", out.stderr);

    let out = exec(&args(&[]), &[], IMAGE, &token, &[]);
    let line = refused(&out, "team/puller");
    assert_eq!(
        front.requests(),
        1,
        "no request goes over an untrusted connection"
    );
    assert!(line.to_lowercase().contains("certificate"), "{line}");

    let out = exec(&args(&[]), &[("SSL_CERT_FILE", &ca)], IMAGE, &token, &[]);
    served(&out, IMAGE, "us-docker.pkg.dev", sts.issued(), &token);
}
