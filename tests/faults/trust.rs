//! TLS trust: an unknown CA, --ca-file and SSL_CERT_FILE, a CA file
//! another user could change, and what a miss reads of the trust store.

use super::*;

#[test]
fn tls_with_an_unknown_ca_fails_unless_the_ca_is_trusted() {
    for case in Case::all() {
        let front = TlsFront::start(case.first_addr());
        let out = case.run(&front.url(), &[], &[]);
        let line = case.failed_at_first(&out, "network");
        support::assert_says(
            &words(&line),
            &["certificate is not trusted", "UnknownIssuer", "--ca-file"],
        );
        // Not retried, and nothing (the token least of all) was sent.
        assert_eq!(front.connections(), 1, "{line}");
        assert_eq!(front.requests(), 0);
        assert_eq!(case.first_requests(), 0);

        // --ca-file, or its variable, adds the CA.
        case.run(&front.url(), &["--ca-file", CA_PEM], &[])
            .response();
        case.run(&front.url(), &[], &[("WICP_CA_FILE", CA_PEM)])
            .response();
        // SSL_CERT_FILE replaces the node's trust store.
        case.run(&front.url(), &[], &[("SSL_CERT_FILE", CA_PEM)])
            .response();
        assert_eq!(front.requests(), 3 * case.calls_to_first());
        assert_eq!(case.first_requests(), 3);
    }
}

#[test]
fn a_bad_ca_file_or_ssl_cert_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let missing = dir.path().join("missing.pem");
    for case in Case::all() {
        let front = TlsFront::start(case.first_addr());
        let refused = |extra: &[&str], env: &[(&str, &str)], flag: &str| {
            let line = case.failure(&case.run(&front.url(), extra, env));
            assert_eq!(line["kind"], "config", "{line}");
            assert_eq!(line["facts"]["flag"], flag, "{line}");
            words(&line)
        };
        let missing = missing.to_str().unwrap();
        refused(&["--ca-file", missing], &[], "--ca-file");
        let said = refused(&["--ca-file", empty.to_str().unwrap()], &[], "--ca-file");
        assert!(said.contains("holds no PEM certificate"), "{said}");
        let said = refused(&[], &[("SSL_CERT_FILE", missing)], "SSL_CERT_FILE");
        assert!(
            said.contains("to add a CA to the system's, use --ca-file"),
            "{said}"
        );
        assert_eq!(front.connections(), 0, "checked before connecting");
    }
}

/// Round-5 item 9: a CA file another user could change (owned by another
/// uid, or writable by its group or others) is refused before any
/// connection, as `--ca-file` and as `SSL_CERT_FILE`: whoever can write it
/// chooses whom the tokens go to. Readable by others is fine.
#[test]
fn a_ca_file_another_user_could_change_is_refused() {
    use std::os::unix::fs::{PermissionsExt, chown};
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::copy(CA_PEM, &ca).unwrap();
    let ca_arg = ca.to_str().unwrap();
    let case = &Case::all()[0];
    let front = TlsFront::start(case.first_addr());
    let refused = |extra: &[&str], env: &[(&str, &str)], flag: &str, problem: &str| {
        let line = case.failure(&case.run(&front.url(), extra, env));
        assert_eq!(line["kind"], "config", "{line}");
        assert_eq!(line["facts"]["flag"], flag, "{line}");
        assert!(words(&line).contains(problem), "{problem}: {line}");
    };
    for mode in [0o666, 0o664, 0o646] {
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(mode)).unwrap();
        refused(
            &["--ca-file", ca_arg],
            &[],
            "--ca-file",
            "other users may write it",
        );
        refused(
            &[],
            &[("SSL_CERT_FILE", ca_arg)],
            "SSL_CERT_FILE",
            "other users may write it",
        );
    }
    std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).unwrap();
    chown(&ca, Some(4242), None).unwrap();
    refused(
        &["--ca-file", ca_arg],
        &[],
        "--ca-file",
        "owned by uid 4242",
    );
    assert_eq!(front.connections(), 0, "checked before connecting");
    chown(&ca, Some(0), None).unwrap();
    let ok = case.run(&front.url(), &["--ca-file", ca_arg], &[]);
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
}

/// Issues 13 and 47: what a miss reads of the trust store, by strace.
///
/// - `--ca-file` that vouches for the server is read once and tried alone:
///   the system's bundle is never opened;
/// - trusting the base store (`SSL_CERT_FILE` here, which takes the same
///   path as the system's bundle): the first miss reads the bundle once
///   and prepares its anchors in `--cache-dir`; the next miss reads the
///   prepared store and never opens the bundle;
/// - the system's bundle is read once and the directory that holds the
///   same certificates is never walked;
/// - a plain-HTTP miss opens no CA file at all, and a hit none either.
#[test]
fn what_a_miss_reads_of_the_trust_store() {
    let bundle = "/etc/ssl/certs/ca-certificates.crt";
    if !std::path::Path::new(bundle).is_file() {
        eprintln!("skipped: no system bundle at {bundle}");
        return;
    }
    let case = Case::gcp();
    let front = TlsFront::start(case.first_addr());
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap().to_string();
    let opened = |trace: &str, path: &str| {
        trace
            .lines()
            .filter(|l| l.contains("open") && l.contains(&format!("\"{path}\"")))
            .count()
    };
    let stdin_for = |name: &str| {
        let audience = format!("{GCP_PROJECT}.svc.id.goog");
        let token = TokenSpec::new("team", name, &audience).mint();
        request(&case.image, Some(&token), &case.annotations)
    };

    // --ca-file alone.
    let args = case.args(
        &front.url(),
        &["--ca-file", CA_PEM, "--cache-dir", &cache_dir],
    );
    let (miss, trace) = traced(&args, stdin_for("one").as_bytes());
    miss.response();
    assert_eq!(opened(&trace, CA_PEM), 1, "{trace}");
    assert_eq!(opened(&trace, bundle), 0, "{trace}");
    let (hit, trace) = traced(&args, stdin_for("one").as_bytes());
    hit.response();
    assert!(
        !trace.contains("/etc/ssl") && !trace.contains(CA_PEM),
        "{trace}"
    );

    // The base store, prepared.
    let files = tempfile::tempdir().unwrap();
    let base = files.path().join("base.pem");
    let mut pem = std::fs::read(bundle).unwrap();
    pem.extend(std::fs::read(CA_PEM).unwrap());
    std::fs::write(&base, pem).unwrap();
    let base = base.to_str().unwrap().to_string();
    let args = case.args(&front.url(), &["--cache-dir", &cache_dir]);
    let env = format!("SSL_CERT_FILE={base}");
    let with_env = |name: &str| {
        let mut full = vec![
            "env".to_string(),
            env.clone(),
            support::plugin::bin().display().to_string(),
        ];
        full.extend(args.iter().cloned());
        traced_program(&full, stdin_for(name).as_bytes())
    };
    let (first, trace) = with_env("two");
    first.response();
    assert_eq!(opened(&trace, &base), 1, "{trace}");
    assert!(trace.contains("trust-anchors"), "{trace}");
    let (next, trace) = with_env("three");
    next.response();
    assert_eq!(opened(&trace, &base), 0, "read the bundle again:\n{trace}");
    assert!(
        opened(&trace, &format!("{cache_dir}/trust-anchors")) == 1,
        "{trace}"
    );

    // The system's bundle: read once, its directory never walked (the
    // server is not one of its CAs', so the pull is refused).
    let args = case.args(&front.url(), &[]);
    let (refused, trace) = traced(&args, stdin_for("four").as_bytes());
    let line = refused.failure_json();
    assert!(words(&line).contains("not trusted"), "{line}");
    assert_eq!(opened(&trace, bundle), 1, "{trace}");
    for dir in ["/etc/ssl/certs", "/usr/lib/ssl/certs", "/etc/pki/tls/certs"] {
        assert!(
            !trace.contains(&format!("\"{dir}\"")),
            "{dir} was opened:\n{trace}"
        );
    }
    let in_certs_dir = trace
        .lines()
        .filter(|l| l.contains("\"/etc/ssl/certs/") && !l.contains(bundle))
        .count();
    assert_eq!(in_certs_dir, 0, "{trace}");

    // Plain HTTP: no trust store at all.
    let args = case.args(&case.first_url(), &[]);
    let (plain, trace) = traced(&args, stdin_for("five").as_bytes());
    plain.response();
    for what in ["/etc/ssl", "/etc/pki", ".pem\"", ".crt\"", "trust-anchors"] {
        assert!(
            !trace.contains(what),
            "a plain-HTTP miss opened {what}:\n{trace}"
        );
    }
}

#[test]
fn aws_tls_with_an_unknown_ca_fails_unless_the_ca_is_trusted() {
    let aws = Aws::start();
    let sts = TlsFront::start(aws.sts.server.addr());
    let ecr = TlsFront::start(aws.moto_addr());
    let out = aws.run(&sts.url(), &ecr.url(), &[], &[]);
    let line = aws.failure(&out, "network");
    assert_eq!(line["facts"]["service"], "AWS STS", "{line}");
    support::assert_says(
        &words(&line),
        &[
            "the server's TLS certificate is not trusted (invalid peer certificate: UnknownIssuer)",
            "--ca-file",
        ],
    );
    assert_eq!(sts.requests(), 0, "nothing was sent");
    assert_eq!(aws.sts.server.request_count(), 0);

    for (extra, env) in [
        (&["--ca-file", CA_PEM][..], &[][..]),
        (&[][..], &[("WICP_CA_FILE", CA_PEM)][..]),
        (&[][..], &[("SSL_CERT_FILE", CA_PEM)][..]),
    ] {
        assert_ecr_login(&aws.run(&sts.url(), &ecr.url(), extra, env));
    }
    assert_eq!(sts.requests(), 3);
    assert_eq!(ecr.requests(), 3);

    // A CERTIFICATE block that is no certificate: the SDK loads extra roots
    // with `expect`, so this must be refused before it gets there.
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(
        &junk,
        "-----BEGIN CERTIFICATE-----\nAAAAAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let out = aws.run(
        &sts.url(),
        &ecr.url(),
        &["--ca-file", junk.to_str().unwrap()],
        &[],
    );
    let line = aws.failure(&out, "config");
    assert_eq!(line["facts"]["flag"], "--ca-file", "{line}");
    assert!(
        words(&line).contains("holds a certificate (number 1) that cannot be parsed"),
        "{line}"
    );
    assert_eq!(out.code, Some(1), "an error, not an abort");
}
