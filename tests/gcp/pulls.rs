//! Federation and GKE, direct and impersonated, end to end: audiences,
//! cache durations, registry hosts and remote repositories.

use super::*;

#[test]
fn federation_direct_access_pulls_end_to_end() {
    end_to_end(Pool::Federation { allowed: vec![] }, false);
}

#[test]
fn federation_with_impersonation_pulls_end_to_end() {
    end_to_end(Pool::Federation { allowed: vec![] }, true);
}

#[test]
fn gke_direct_access_pulls_end_to_end() {
    end_to_end(Pool::Gke, false);
}

#[test]
fn gke_with_impersonation_pulls_end_to_end() {
    end_to_end(Pool::Gke, true);
}

#[test]
fn federation_accepts_both_audience_forms_and_a_configured_one() {
    let google = FakeGoogle::start(Pool::Federation { allowed: vec![] });
    for aud in [
        format!("//iam.googleapis.com/{PROVIDER}"),
        format!("https://iam.googleapis.com/{PROVIDER}"),
    ] {
        let t = TokenSpec::new("team", "puller", &aud).mint();
        exec(&google.args(), &request(IMAGE, Some(&t), &[])).response();
    }
    // A provider with allowedAudiences: --audience names the one requested.
    let custom = "https://cluster.example/gcp";
    let google = FakeGoogle::start(Pool::Federation {
        allowed: vec![custom.into()],
    });
    let t = TokenSpec::new("team", "puller", custom).mint();
    let mut args = google.args();
    args.extend(["--audience".into(), custom.into()]);
    exec(&args, &request(IMAGE, Some(&t), &[])).response();
    assert_sts_request(
        &google.sts.requests()[0],
        &format!("//iam.googleapis.com/{PROVIDER}"),
        &t,
    );
    // Without --audience the same token is refused before any network call.
    let mut json = google.args();
    json.extend(["--log-format", "json"].map(String::from));
    let line = exec(&json, &request(IMAGE, Some(&t), &[])).refused("token", &[("claim", "aud")]);
    assert!(
        plugin::words(&line).contains(&format!("//iam.googleapis.com/{PROVIDER}")),
        "{line}"
    );
    assert_eq!(google.sts.request_count(), 1);
}

#[test]
fn gke_token_audience_is_the_pool() {
    let google = FakeGoogle::start(Pool::Gke);
    let t = TokenSpec::new("team", "puller", "sts.googleapis.com").mint();
    let line = exec(&json_logs(&google.args()), &request(IMAGE, Some(&t), &[]))
        .refused("token", &[("claim", "aud")]);
    assert!(
        words(&line).contains("serviceAccountTokenAudience: my-project.svc.id.goog"),
        "{line}"
    );
    assert_eq!(google.sts.request_count(), 0);
}

#[test]
fn cache_duration_follows_the_earliest_expiry() {
    // Direct access: the federated token dies with a 10-minute subject token.
    let google = FakeGoogle::start(Pool::Gke);
    let mut spec = TokenSpec::new("team", "puller", &Pool::Gke.audience());
    spec.expires_in = 600;
    let out = exec(&google.args(), &request(IMAGE, Some(&spec.mint()), &[]));
    let d = out.cache_seconds();
    assert!((470..=480).contains(&d), "{d}");

    // Impersonation: an hour-long service account token, but a 30-minute
    // subject token bounds it.
    google.allow_impersonation(GSA, &Pool::Gke.principal("team", "puller"));
    spec.expires_in = 1800;
    let out = exec(
        &google.args(),
        &request(IMAGE, Some(&spec.mint()), &[(ANNOTATION, GSA)]),
    );
    let d = out.cache_seconds();
    assert!((1430..=1440).contains(&d), "{d}");

    // And the other way round: a 2-hour subject token, a 20-minute lifetime.
    spec.expires_in = 7200;
    let mut args = google.args();
    args.extend(["--gcp-token-lifetime".into(), "20m".into()]);
    let out = exec(
        &args,
        &request(IMAGE, Some(&spec.mint()), &[(ANNOTATION, GSA)]),
    );
    let d = out.cache_seconds();
    assert!((950..=960).contains(&d), "{d}");
    let iam = google.iam.requests();
    assert_eq!(iam.last().unwrap().json()["lifetime"], "1200s");
}

#[test]
fn registry_hosts_and_lookalikes() {
    let google = FakeGoogle::start(Pool::Gke);
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    for host in [
        "gcr.io",
        "us.gcr.io",
        "eu.gcr.io",
        "asia.gcr.io",
        "europe-west1-docker.pkg.dev",
        "container.cloud.google.com",
        // Round 5, item 14: every host auth-provider-gcp serves
        // (`*.gcr.io`, `*.pkg.dev`).
        "marketplace.gcr.io",
        "mirror.gcr.io",
    ] {
        let out = exec(
            &google.args(),
            &request(&format!("{host}/p/app:1"), Some(&t), &[]),
        );
        let response = out.response();
        assert_eq!(
            response["auth"]
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            [host]
        );
    }
    let before = google.sts.request_count();
    for host in [
        "gcr.io.evil.com",
        "evilgcr.io",
        "a.mirror.gcr.io",
        "us-docker.pkg.dev.evil.com",
        "evil-docker.pkg.dev.attacker.io",
        "gcr.io:5000",
        "127.0.0.1:5000",
    ] {
        let mut args = google.args();
        args.extend(["--log-format", "json"].map(String::from));
        exec(&args, &request(&format!("{host}/p/app"), Some(&t), &[])).refused_registry(host);
    }
    assert_eq!(
        google.sts.request_count(),
        before,
        "no token sent for a lookalike"
    );

    // `auto` routes Google hosts to gcp.
    let mut args = google.args();
    args[1] = "auto".into();
    exec(&args, &request(IMAGE, Some(&t), &[])).response();
}

/// An Artifact Registry remote repository as a registry mirror: the
/// kubelet asks about `docker.io/library/nginx`; with `--registry-mirror
/// docker.io=us-docker.pkg.dev/my-project/dockerhub-remote` the Google
/// exchange runs as for any Artifact Registry image and the access token
/// is keyed `docker.io` only.
#[test]
fn an_artifact_registry_remote_repository_serves_docker_io_keyed_by_docker_io() {
    let google = FakeGoogle::start(Pool::Federation { allowed: vec![] });
    let t = TokenSpec::new(
        "team",
        "puller",
        &format!("//iam.googleapis.com/{PROVIDER}"),
    )
    .mint();
    let mut args = google.args();
    args.extend([
        "--registry-mirror".into(),
        "docker.io=us-docker.pkg.dev/my-project/dockerhub-remote".into(),
    ]);
    let response = exec(&args, &request("docker.io/library/nginx", Some(&t), &[])).response();
    let auth = response["auth"].as_object().unwrap();
    assert_eq!(auth.keys().collect::<Vec<_>>(), ["docker.io"], "{response}");
    assert_eq!(auth["docker.io"]["username"], "oauth2accesstoken");
    assert_eq!(google.sts.request_count(), 1);
}
