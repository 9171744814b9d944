//! Retries, deadlines and broken answers: refused connections, silent
//! servers, stalled and cut bodies, server errors, Retry-After in both
//! forms, and answers that are not HTTP.

use super::*;

#[test]
fn http_dates_are_written_as_senders_must() {
    assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
}

#[test]
fn a_refused_connection_is_retried_then_named() {
    for case in Case::all() {
        let url = format!("http://127.0.0.1:{}", closed_port());
        let started = Instant::now();
        let out = case.run(&url, &[], &[]);
        let line = case.failed_at_first(&out, "network");
        support::assert_says(
            &words(&line),
            &[
                "after 4 attempt(s)",
                "Connection refused",
                "check that the node can reach the endpoint (DNS, firewall; set HTTPS_PROXY",
            ],
        );
        // Four attempts with full-jitter backoff (at most 0.5 + 1 + 2 s).
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(out.stderr.matches("retrying").count(), 3, "{}", out.stderr);
    }
}

#[test]
fn a_server_that_never_answers_ends_at_the_deadline() {
    for case in Case::all() {
        let silent = TestServer::start(|_| Response::hang());
        assert_ends_at_the_deadline(&case, &silent.url(), case.first_service());
        assert_eq!(silent.request_count(), 1, "one attempt fills the deadline");
    }
    // The second call of an exchange stalls: the message names that one.
    let case = Case::azure();
    let Fakes::Azure(entra, acr) = &case.fakes else {
        unreachable!()
    };
    acr.script([Response::hang()]);
    assert_ends_at_the_deadline(&case, &entra.url(), "ACR");
}

#[test]
fn a_reply_that_stalls_mid_body_ends_at_the_deadline() {
    for case in Case::all() {
        let stall = RawServer::start(vec![Raw::SendThenStall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{\"access_token\":\"ya29.partial"
                .to_vec(),
        )]);
        let stalled = assert_ends_at_the_deadline(&case, &stall.url(), case.first_service());
        // The stalled run itself (at debug level) must not print the bytes it did receive:
        // a cut body can hold the start of a token.
        assert!(
            !stalled.stderr.contains("ya29.partial") && !stalled.stderr.contains("access_token"),
            "{}: the partial body reached stderr:\n{}",
            case.name,
            stalled.stderr
        );
    }
}

#[test]
fn a_server_error_is_retried_and_the_exchange_succeeds() {
    for case in Case::all() {
        case.script(vec![Response::text(500, "<html>internal error</html>")]);
        let out = case.run_normal(&[], &[]);
        out.response();
        assert_eq!(case.first_requests(), 2, "{}", case.name);
        assert!(
            out.stderr.contains("HTTP 500 on attempt 1, retrying"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn retry_after_in_seconds_is_honoured() {
    for case in Case::all() {
        case.script(vec![case.throttled("2")]);
        let started = Instant::now();
        case.run_normal(&[], &[]).response();
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(case.first_requests(), 2);
    }
}

#[test]
fn retry_after_as_an_http_date_is_honoured() {
    for case in Case::all() {
        // Three seconds ahead, to the second: a wait of two to three seconds.
        case.script(vec![case.throttled(&http_date(token::now() + 3))]);
        let started = Instant::now();
        case.run_normal(&[], &[]).response();
        assert!(
            started.elapsed() >= Duration::from_millis(1500),
            "{}: {:?}",
            case.name,
            started.elapsed()
        );
        assert_eq!(case.first_requests(), 2);
        // A date in the past, or one in an obsolete format: retried at once
        // or after the usual backoff, never an error.
        case.script(vec![
            case.throttled(&http_date(token::now() - 3600)),
            case.throttled("Sunday, 06-Nov-94 08:49:37 GMT"),
        ]);
        case.run_normal(&[], &[]).response();
        assert_eq!(case.first_requests(), 5);
    }
}

#[test]
fn retry_after_beyond_the_deadline_fails_at_once() {
    for case in Case::all() {
        case.script(vec![case.throttled("120")]);
        let started = Instant::now();
        let out = case.run_normal(&["--timeout", "10s"], &[]);
        let line = case.failed_at_first(&out, "upstream");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "slept toward the deadline: {:?}",
            started.elapsed()
        );
        assert_eq!(line["facts"]["status"], "429", "{line}");
        support::assert_says(
            &words(&line),
            &["asking to retry after 2m0s", "left of the 10s deadline"],
        );
        assert_eq!(case.first_requests(), 1);
    }
}

#[test]
fn an_absurd_retry_after_is_shown_clamped() {
    for case in Case::all() {
        case.script(vec![case.throttled("99999999999999999999")]);
        let out = case.run_normal(&["--timeout", "10s"], &[]);
        let line = case.failed_at_first(&out, "upstream");
        assert_eq!(line["facts"]["status"], "429", "{line}");
        assert!(
            words(&line).contains("asking to retry after more than 24h0m0s, beyond the "),
            "{line}"
        );
        assert_eq!(case.first_requests(), 1);
    }
}

#[test]
fn a_refusal_is_not_retried() {
    for case in Case::all() {
        case.script(vec![case.forbidden()]);
        let out = case.run_normal(&[], &[]);
        let line = case.failed_at_first(&out, "upstream");
        assert_eq!(line["facts"]["status"], "403", "{line}");
        assert_eq!(case.first_requests(), 1, "{line}");
        assert!(!out.stderr.contains("retrying"), "{}", out.stderr);
    }
}

#[test]
fn a_cut_body_is_retried_then_reported() {
    let cut = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{\"access_token\":\"ya29.cut-secret".to_vec();
    for case in Case::all() {
        // Cut once, then the real answer through a relay to the fake.
        let server = RawServer::start(vec![Raw::Send(cut.clone())]);
        let out = case.run(&server.url(), &[], &[]);
        let line = case.failed_at_first(&out, "network");
        support::assert_says(&words(&line), &["failed after 4 attempt(s)", "body"]);
        assert_eq!(server.request_count(), 4);
        assert!(!out.stderr.contains("ya29.cut-secret"), "{}", out.stderr);
        // Every attempt carried the same, complete request.
        let forms = server.forms();
        assert!(forms.windows(2).all(|w| w[0] == w[1]));
    }
}

#[test]
fn malformed_and_non_http_answers_are_refused_without_echoing_them() {
    for case in Case::all() {
        case.script(vec![case.malformed()]);
        let line = case.failed_at_first(&case.run_normal(&[], &[]), "upstream");
        assert_eq!(line["facts"]["status"], "200", "{line}");
        assert!(line["facts"]["body_shape"].is_string(), "{line}");
        assert_eq!(case.first_requests(), 1);

        let garbage = RawServer::start(vec![Raw::Send(
            b"SSH-2.0-OpenSSH_9.2 ya29.not-http-secret\r\n".to_vec(),
        )]);
        let out = case.run(&garbage.url(), &[], &[]);
        case.failed_at_first(&out, "network");
        assert!(
            !out.stderr.contains("ya29.not-http-secret"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn aws_refused_failing_refusing_and_cut_answers() {
    let aws = Aws::start();
    // Refused.
    let refused = format!("http://127.0.0.1:{}", closed_port());
    let line = aws.failure(&aws.run(&refused, &aws.moto.url(), &[], &[]), "network");
    assert_eq!(line["facts"]["service"], "AWS STS", "{line}");
    assert!(words(&line).contains("Connection refused"), "{line}");

    // 500, then moto's answer.
    aws.sts
        .script([Response::text(500, "<html>internal error</html>")]);
    assert_ecr_login(&aws.run_normal(&[], &[]));
    assert_eq!(aws.sts.server.request_count(), 2);

    // AccessDenied: final.
    aws.sts.script([sts_error(
        403,
        "AccessDenied",
        "Not authorized to perform sts:AssumeRoleWithWebIdentity",
    )]);
    let line = aws.failure(&aws.run_normal(&[], &[]), "upstream");
    assert_eq!(line["facts"]["service"], "AWS STS", "{line}");
    assert_eq!(line["facts"]["status"], "403", "{line}");
    assert!(words(&line).contains("AccessDenied"), "{line}");
    assert_eq!(aws.sts.server.request_count(), 3, "not retried");

    // A cut answer.
    let cut = RawServer::start(vec![Raw::Send(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: 900\r\n\r\n<AssumeRoleWithWebIdentityResponse><SecretAccessKey>cut-secret-key-value"
            .to_vec(),
    )]);
    let out = aws.run(&cut.url(), &aws.moto.url(), &[], &[]);
    let line = aws.failure(&out, "network");
    assert_eq!(line["facts"]["service"], "AWS STS", "{line}");
    assert!(
        !out.stderr.contains("cut-secret-key-value"),
        "{}",
        out.stderr
    );
}
