//! What Google STS and IAM refuse, transient failures, broken successes,
//! deadlines and configuration errors, each with its fix.

use super::*;

#[test]
fn sts_refusals_fail_with_the_code_and_a_fix() {
    let google = FakeGoogle::start(Pool::Federation { allowed: vec![] });
    let aud = Pool::Federation { allowed: vec![] }.audience();
    let json = |mut args: Vec<String>| {
        args.extend(["--log-format".to_string(), "json".to_string()]);
        args
    };
    // Who refused and how, as facts; the code and the fix, as words.
    let refused = |line: &Value, status: &str| {
        assert_eq!(line["kind"], "upstream", "{line}");
        assert_eq!(line["facts"]["service"], "Google STS", "{line}");
        assert_eq!(line["facts"]["status"], status, "{line}");
        (
            line["message"].as_str().unwrap_or_default().to_string(),
            line["fix"].as_str().unwrap_or_default().to_string(),
        )
    };

    // A token the provider cannot verify.
    let forged = TokenSpec::new("team", "puller", &aud).mint_with_wrong_key();
    let out = exec(&json(google.args()), &request(IMAGE, Some(&forged), &[]));
    let line = out.failure_json();
    let (message, fix) = refused(&line, "400");
    assert_eq!(line["service_account"], "team/puller", "{line}");
    assert_eq!(line["registry"], "us-docker.pkg.dev", "{line}");
    assert!(
        message.contains("invalid_grant: \"Invalid JWT signature.\""),
        "{line}"
    );
    assert!(
        fix.starts_with("the pool provider did not accept the token"),
        "{line}"
    );
    assert!(fix.contains("https://oidc.cluster.test"), "{line}");
    assert!(!out.stderr.contains(&forged));
    assert_eq!(google.sts.request_count(), 1, "a refusal is not retried");

    // A provider that does not exist: invalid_target.
    let other =
        "projects/123456789012/locations/global/workloadIdentityPools/k8s-pool/providers/gone";
    let mut args = google.args();
    let at = args.iter().position(|a| a == PROVIDER).unwrap();
    args[at] = other.into();
    let t = TokenSpec::new("team", "puller", &format!("//iam.googleapis.com/{other}")).mint();
    let line = exec(&json(args), &request(IMAGE, Some(&t), &[])).failure_json();
    let (message, fix) = refused(&line, "400");
    assert!(message.contains("invalid_target"), "{line}");
    assert!(
        fix.starts_with("no enabled pool provider has this name"),
        "{line}"
    );
}

#[test]
fn transient_failures_are_retried_then_reported() {
    let google = FakeGoogle::start(Pool::Gke);
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    let req = request(IMAGE, Some(&t), &[]);

    // 429 with Retry-After, then success.
    google.script_sts(
        google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.").with_header("Retry-After", "0"),
    );
    exec(&google.args(), &req).response();
    assert_eq!(google.sts.request_count(), 2);

    // 500 on every attempt: reported after the retries, with the status.
    for _ in 0..4 {
        google.script_sts(google_error(500, "INTERNAL", "Internal error encountered."));
    }
    let mut json = google.args();
    json.extend(["--log-format".to_string(), "json".to_string()]);
    let refusal = exec(&json, &req).failure_json();
    assert_eq!(refusal["facts"]["service"], "Google STS", "{refusal}");
    assert_eq!(refusal["facts"]["status"], "500", "{refusal}");
    let line = plugin::words(&refusal);
    support::assert_says(
        &line,
        &[
            "INTERNAL: \"Internal error encountered.\"",
            "throttling or unavailable",
        ],
    );
    assert_eq!(google.sts.request_count(), 6);
}

#[test]
fn broken_successes_are_refused() {
    let google = FakeGoogle::start(Pool::Gke);
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    let req = request(IMAGE, Some(&t), &[]);
    let cases = [
        (
            Response::text(200, "{\"access_token\": \"ya29.cut"),
            "with a body that is not a JSON token response",
        ),
        (
            Response::json(
                200,
                json!({"access_token": "ya29.zero", "token_type": "Bearer", "expires_in": 0}),
            ),
            "with no positive expires_in",
        ),
        (
            Response::json(200, json!({"token_type": "Bearer", "expires_in": 3600})),
            "with no access_token",
        ),
    ];
    for (canned, needle) in cases {
        google.script_sts(canned);
        let out = exec(&json_logs(&google.args()), &req);
        let line = out.refused("upstream", &[("service", "Google STS"), ("status", "200")]);
        assert!(words(&line).contains(needle), "{line}");
        assert!(!out.stderr.contains("ya29."), "{}", out.stderr);
    }

    // The same from IAM Credentials.
    google.allow_impersonation(GSA, &Pool::Gke.principal("team", "puller"));
    let req = request(IMAGE, Some(&t), &[(ANNOTATION, GSA)]);
    google.script_iam(Response::json(
        200,
        json!({"accessToken": "ya29.c.x", "expireTime": "in an hour"}),
    ));
    let iam = [("service", "Google IAM Credentials"), ("status", "200")];
    let line = exec(&json_logs(&google.args()), &req).refused("upstream", &iam);
    assert!(
        words(&line).contains("an expireTime \"in an hour\" that is not an RFC 3339 timestamp"),
        "{line}"
    );
    google.script_iam(Response::text(200, "<html>proxy login</html>"));
    let line = exec(&json_logs(&google.args()), &req).refused("upstream", &iam);
    assert!(
        words(&line).contains("a body that is not a JSON token response"),
        "{line}"
    );
}

#[test]
fn impersonation_refusals_name_the_binding_to_add() {
    let pool = Pool::Federation { allowed: vec![] };
    let google = FakeGoogle::start(pool.clone());
    let t = TokenSpec::new("team", "puller", &pool.audience()).mint();
    let mut json = google.args();
    json.extend(["--log-format".to_string(), "json".to_string()]);
    let out = exec(&json, &request(IMAGE, Some(&t), &[(ANNOTATION, GSA)]));
    let refusal = out.failure_json();
    assert_eq!(refusal["kind"], "upstream", "{refusal}");
    assert_eq!(
        refusal["facts"]["service"], "Google IAM Credentials",
        "{refusal}"
    );
    assert_eq!(refusal["facts"]["status"], "403", "{refusal}");
    let line = plugin::words(&refusal);
    support::assert_says(
        &line,
        &[
            &format!("IAM Credentials refused to impersonate {GSA}"),
            "PERMISSION_DENIED: \"Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).\"",
        ],
    );
    // The fix names the exact member the fake's policy needs.
    let member = pool.principal("team", "puller");
    assert!(refusal["fix"].as_str().unwrap_or_default().contains(&format!(
        "gcloud iam service-accounts add-iam-policy-binding {GSA} --role roles/iam.workloadIdentityUser --member '{member}'"
    )), "{line}");
    assert_eq!(google.iam.request_count(), 1, "403 is not retried");
    for secret in google.issued_secrets() {
        assert!(!out.stderr.contains(&secret), "{}", out.stderr);
    }
    // Following the fix works.
    google.allow_impersonation(GSA, &member);
    exec(
        &google.args(),
        &request(IMAGE, Some(&t), &[(ANNOTATION, GSA)]),
    )
    .response();

    // Above an hour, the default organization policy refuses the lifetime.
    let mut args = json.clone();
    args.extend(["--gcp-token-lifetime".into(), "2h".into()]);
    let refusal = exec(&args, &request(IMAGE, Some(&t), &[(ANNOTATION, GSA)])).failure_json();
    assert_eq!(refusal["facts"]["status"], "400", "{refusal}");
    let line = plugin::words(&refusal);
    support::assert_says(
        &line,
        &[
            "INVALID_ARGUMENT",
            "allowServiceAccountCredentialLifetimeExtension",
        ],
    );
}

#[test]
fn a_hanging_endpoint_meets_the_deadline() {
    let google = FakeGoogle::start(Pool::Gke);
    google.script_sts(Response::hang());
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    let args = json_logs(&[google.args(), plugin::flags(&["--timeout", "2s"], &[])].concat());
    let started = std::time::Instant::now();
    let line = exec(&args, &request(IMAGE, Some(&t), &[]))
        .refused("network", &[("service", "Google STS")]);
    assert!(
        words(&line).contains("the deadline of 2s ran out"),
        "{line}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn configuration_errors_name_the_flags() {
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    let req = request(IMAGE, Some(&t), &[]);
    let config = |args: &[String], flag: &str| {
        words(&exec(&json_logs(args), &req).refused("config", &[("flag", flag)]))
    };
    let none = config(
        &plugin::flags(&["--provider", "gcp"], &[]),
        "--gcp-workload-identity-provider",
    );
    assert!(none.contains("--gcp-cluster"), "{none}");

    let both: Vec<String> = [
        "--provider",
        "gcp",
        "--gcp-workload-identity-provider",
        PROVIDER,
        "--gcp-project-id",
        GCP_PROJECT,
        "--gcp-cluster",
        GCP_CLUSTER,
    ]
    .map(String::from)
    .into();
    let line = config(&both, "--gcp-workload-identity-provider");
    assert!(line.contains("are both set"), "{line}");

    let half: Vec<String> = ["--provider", "gcp", "--gcp-project-id", GCP_PROJECT]
        .map(String::from)
        .into();
    config(&half, "--gcp-project-id");

    let prefixed: Vec<String> = [
        "--provider",
        "gcp",
        "--gcp-workload-identity-provider",
        &format!("//iam.googleapis.com/{PROVIDER}"),
    ]
    .map(String::from)
    .into();
    let line = config(&prefixed, "--gcp-workload-identity-provider");
    assert!(
        line.contains("the flag takes the resource name alone"),
        "{line}"
    );

    // The same through the environment, as the kubelet's `env` sets it.
    run(
        &["--provider", "gcp", "--log-format", "json"],
        &[("WICP_GCP_CLUSTER", "prod")],
        req.as_bytes(),
    )
    .refused("config", &[("flag", "--gcp-cluster")]);

    // An unusable lifetime is a usage error.
    let out = run(
        &["--provider", "gcp", "--gcp-token-lifetime", "13h"],
        &[],
        req.as_bytes(),
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

#[test]
fn a_malformed_annotation_fails_before_the_network() {
    let google = FakeGoogle::start(Pool::Gke);
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    for bad in [
        "puller",
        "puller@gmail.com",
        "a@b.iam.gserviceaccount.com/../../x",
    ] {
        let mut json = google.args();
        json.extend(["--log-format", "json"].map(String::from));
        let line = exec(&json, &request(IMAGE, Some(&t), &[(ANNOTATION, bad)]))
            .refused_for_annotation(ANNOTATION);
        assert!(
            line["fix"]
                .as_str()
                .unwrap()
                .starts_with("set iam.gke.io/gcp-service-account to"),
            "{line}"
        );
    }
    assert_eq!(google.sts.request_count(), 0);
    assert_eq!(google.iam.request_count(), 0);
}
