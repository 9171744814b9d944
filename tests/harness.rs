//! Tests for the test support code itself: the fake HTTP server, the real registry harness and
//! the containerd harness.

use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::json;
use support::containerd::Containerd;
use support::http_server::{Response, TestServer};
use support::registry::{Registry, TokenPost};

/// Sends `raw` as-is and returns everything the server answers until it closes.
fn roundtrip(server: &TestServer, raw: &str) -> String {
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(raw.as_bytes()).unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn records_form_posts_and_headers() {
    let server = TestServer::start(|req| {
        Response::json(200, json!({"got": req.form()["grant_type"]})).with_header("X-Test", "1")
    });
    let body = "grant_type=urn%3Aietf%3Aparams&scope=a+b%2Fc&empty=&weird=%zz%4";
    let answer = roundtrip(
        &server,
        &format!(
            "POST /v1/token?x=1&y=%2F HTTP/1.1\r\nHost: h\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             content-length: {}\r\nAuthorization: Basic {}\r\n\r\n{body}",
            body.len(),
            BASE64.encode("user:pa:ss"),
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    support::assert_says(&answer, &["Connection: close\r\n", "X-Test: 1\r\n"]);
    assert!(answer.ends_with(r#"{"got":"urn:ietf:params"}"#), "{answer}");

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let req = &reqs[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/v1/token");
    assert_eq!(req.query, "x=1&y=%2F");
    assert_eq!(
        req.query_pairs(),
        [("x".into(), "1".into()), ("y".into(), "/".into())]
    );
    assert_eq!(
        req.header("CONTENT-TYPE"),
        Some("application/x-www-form-urlencoded")
    );
    let form = req.form();
    assert_eq!(form["scope"], "a b/c");
    assert_eq!(form["empty"], "");
    assert_eq!(form["weird"], "%zz%4");
    assert_eq!(req.basic_auth(), Some(("user".into(), "pa:ss".into())));
    assert_eq!(req.bearer(), None);
}

#[test]
fn records_json_bearer_and_chunked_bodies_in_order() {
    let server = TestServer::start(|req| Response::text(201, req.json()["n"].to_string()));
    let first = roundtrip(
        &server,
        "POST /a HTTP/1.1\r\nHost: h\r\nauthorization: bearer tok.en\r\nContent-Length: 7\r\n\r\n{\"n\":1}",
    );
    assert!(first.starts_with("HTTP/1.1 201 Created\r\n"), "{first}");
    assert!(first.ends_with("\r\n\r\n1"), "{first}");
    let second = roundtrip(
        &server,
        "PUT /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"n\"\r\n3;ext=1\r\n:2}\r\n0\r\n\r\n",
    );
    assert!(second.ends_with("\r\n\r\n2"), "{second}");

    assert_eq!(server.request_count(), 2);
    let reqs = server.requests();
    assert_eq!(reqs[0].bearer().as_deref(), Some("tok.en"));
    assert_eq!(reqs[0].json(), json!({"n": 1}));
    assert_eq!(reqs[1].method, "PUT");
    assert_eq!(reqs[1].body, br#"{"n":2}"#);
}

#[test]
fn keep_alive_clients_get_connection_close() {
    let server = TestServer::start(|_| Response::text(200, "ok"));
    // A keep-alive client must still see the connection end after the response, or it would
    // wait forever for a next response.
    let answer = roundtrip(
        &server,
        "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n",
    );
    assert!(
        answer.contains("Content-Length: 2\r\nConnection: close\r\n\r\nok"),
        "{answer}"
    );
}

#[test]
fn expect_100_continue_gets_the_go_ahead() {
    let server = TestServer::start(|req| Response::text(200, format!("{} bytes", req.body.len())));
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
        .write_all(
            b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
        )
        .unwrap();
    let mut interim = [0u8; 25];
    stream.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    stream.write_all(b"abc").unwrap();
    let mut rest = String::new();
    stream.read_to_string(&mut rest).unwrap();
    assert!(
        rest.starts_with("HTTP/1.1 200 OK\r\n") && rest.ends_with("3 bytes"),
        "{rest}"
    );
}

#[test]
fn handler_panic_becomes_500() {
    let server = TestServer::start(|_| panic!("boom in handler"));
    let answer = roundtrip(&server, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 500 "), "{answer}");
    assert!(answer.contains("boom in handler"), "{answer}");
}

#[test]
fn hang_holds_the_connection_until_drop_and_drop_frees_the_port() {
    let server = TestServer::start(|_| Response::hang());
    let addr = server.addr();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 1];
    let err = stream.read(&mut buf).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err:?}"
    );
    assert_eq!(server.requests()[0].path, "/slow");

    let started = Instant::now();
    drop(server);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "drop took {:?}",
        started.elapsed()
    );
    // The hung connection is closed without a response...
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    assert_eq!(stream.read(&mut buf).unwrap_or(0), 0);
    // ...and nothing listens on the port any more.
    // Polled rather than checked once: a process that another test forks at this moment holds a
    // copy of the listening socket until it execs (close-on-exec), so the port can answer for a
    // few more milliseconds.
    let deadline = Instant::now() + Duration::from_secs(2);
    while TcpStream::connect(addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "port {addr} still listening after drop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn drop_does_not_wait_for_silent_clients() {
    let server = TestServer::start(|_| Response::text(200, "ok"));
    // Connected but never sends a request: its thread is blocked reading.
    let _silent = TcpStream::connect(server.addr()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    drop(server);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn token_auth_registry_admin_pushes_and_only_accepted_creds_pull() {
    let registry = Registry::start_with_token_auth(|user, pass| user == "puller" && pass == "good");
    let digest = registry.push_test_image("team/app", "v1");
    assert!(digest.starts_with("sha256:"), "{digest}");
    let after_push = registry.token_requests_accepted();
    assert!(after_push >= 1);
    assert_eq!(registry.token_requests_refused(), 0);

    registry.pull("team/app", "v1", "puller", "good").unwrap();
    assert!(registry.token_requests_accepted() > after_push);

    let err = registry
        .pull("team/app", "v1", "puller", "bad")
        .unwrap_err();
    assert!(err.contains("unauthorized"), "{err}");
    assert!(registry.token_requests_refused() >= 1);

    let auth = BASE64.encode("puller:good");
    let authfile = json!({"auths": {registry.host(): {"auth": auth}}}).to_string();
    registry
        .pull_with_authfile("team/app", "v1", &authfile)
        .unwrap();

    let bad = BASE64.encode("puller:nope");
    let authfile = json!({"auths": {registry.host(): {"auth": bad}}}).to_string();
    let err = registry
        .pull_with_authfile("team/app", "v1", &authfile)
        .unwrap_err();
    assert!(err.contains("unauthorized"), "{err}");

    let err = registry
        .pull("team/app", "missing", "puller", "good")
        .unwrap_err();
    assert!(err.contains("manifest unknown"), "{err}");
}

#[test]
fn token_service_grants_requested_scopes_by_role() {
    let registry = Registry::start_with_token_auth(|user, _| user == "puller");
    let realm = registry.token_realm().unwrap();
    let port = realm.split(':').nth(2).unwrap().split('/').next().unwrap();
    let get = |creds: &str| {
        let mut stream = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
        write!(
            stream,
            "GET /token?service=wicp-test-registry&scope=repository%3Aa%2Fb%3Apull%2Cpush\
             &scope=repository:c:pull HTTP/1.1\r\nHost: h\r\nAuthorization: Basic {}\r\n\r\n",
            BASE64.encode(creds)
        )
        .unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).unwrap();
        out
    };
    let access = |answer: String| {
        let body: serde_json::Value =
            serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["token"], body["access_token"]);
        assert_eq!(body["expires_in"], 300);
        let issued_at = body["issued_at"].as_str().unwrap();
        assert!(
            issued_at.len() == 20 && issued_at.ends_with('Z'),
            "{issued_at}"
        );
        let claims: serde_json::Value =
            jsonwebtoken::dangerous::insecure_decode_claims(body["token"].as_str().unwrap())
                .unwrap();
        assert_eq!(claims["aud"], "wicp-test-registry");
        assert_eq!(claims["iss"], "wicp-test-issuer");
        claims["access"].clone()
    };

    assert_eq!(
        access(get("puller:x")),
        json!([
            {"type": "repository", "name": "a/b", "actions": ["pull"]},
            {"type": "repository", "name": "c", "actions": ["pull"]},
        ])
    );
    let admin = format!("{}:{}", Registry::ADMIN_USER, registry.admin_password());
    assert_eq!(
        access(get(&admin))[0],
        json!({"type": "repository", "name": "a/b", "actions": ["pull", "push"]})
    );
    assert!(get("stranger:x").starts_with("HTTP/1.1 401 "));
    assert_eq!(registry.token_requests_accepted(), 2);
    assert_eq!(registry.token_requests_refused(), 1);
}

#[test]
fn htpasswd_registry_accepts_only_its_account() {
    let registry = Registry::start_with_htpasswd("AWS", "s3cr:et pass");
    registry.push_test_image("library/hello", "latest");
    registry
        .pull("library/hello", "latest", "AWS", "s3cr:et pass")
        .unwrap();

    let err = registry
        .pull("library/hello", "latest", "AWS", "wrong")
        .unwrap_err();
    assert!(err.contains("unauthorized"), "{err}");

    let auth = BASE64.encode("AWS:s3cr:et pass");
    let authfile = json!({"auths": {registry.host(): {"auth": auth}}}).to_string();
    registry
        .pull_with_authfile("library/hello", "latest", &authfile)
        .unwrap();
    assert_eq!(registry.token_requests_accepted(), 0);
}

/// Sends one raw request to the registry's token service and returns the answer.
fn token_service(registry: &Registry, raw: &str) -> String {
    let realm = registry.token_realm().unwrap();
    let port: u16 = realm
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(raw.as_bytes()).unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

fn form_post(body: &str) -> String {
    format!(
        "POST /token HTTP/1.1\r\nHost: h\r\nContent-Type: application/x-www-form-urlencoded; \
         charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn token_service_answers_containerds_oauth2_post() {
    let registry = Registry::start_with_token_auth(|user, pass| user == "puller" && pass == "good");
    // As containerd sends it (remotes/docker/auth/fetch.go, FetchTokenWithOAuth).
    let grant = "scope=repository%3Ateam%2Fapp%3Apull&service=wicp-test-registry\
                 &client_id=containerd-client&grant_type=password&username=puller&password=";
    let answer = token_service(&registry, &form_post(&format!("{grant}good")));
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    let body: serde_json::Value =
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert!(body["token"].is_null(), "the OAuth2 answer has no `token`");
    assert_eq!(body["scope"], "repository:team/app:pull");
    assert_eq!(body["expires_in"], 300);
    let claims: serde_json::Value =
        jsonwebtoken::dangerous::insecure_decode_claims(body["access_token"].as_str().unwrap())
            .unwrap();
    assert_eq!(
        claims["access"],
        json!([{"type": "repository", "name": "team/app", "actions": ["pull"]}])
    );
    // Wrong password: 401, so containerd tries the GET (and fails there too).
    let answer = token_service(&registry, &form_post(&format!("{grant}bad")));
    assert!(answer.starts_with("HTTP/1.1 401 "), "{answer}");
    // Malformed grants are 400, never a token.
    for broken in [
        grant.replace("grant_type=password", "grant_type=refresh_token"),
        grant.replace("client_id=containerd-client", "client_id="),
        grant.replace("service=wicp-test-registry", "service=other"),
        grant.replace("scope=repository%3Ateam%2Fapp%3Apull&", ""),
    ] {
        let answer = token_service(&registry, &form_post(&format!("{broken}good")));
        assert!(answer.starts_with("HTTP/1.1 400 "), "{broken}: {answer}");
    }
    let statuses: Vec<u16> = registry.token_calls().iter().map(|(_, s)| *s).collect();
    assert_eq!(statuses, [200, 401, 400, 400, 400, 400]);
    assert_eq!(registry.token_requests_accepted(), 1);
}

#[test]
fn token_service_refuses_the_post_as_told_and_still_grants_the_get() {
    let registry = Registry::start_with_token_service(TokenPost::Refuse(404), |user, pass| {
        user == "puller" && pass == "good"
    });
    let answer = token_service(
        &registry,
        &form_post(
            "grant_type=password&username=puller&password=good&client_id=c&service=wicp-test-registry&scope=repository%3Aa%3Apull",
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
    let answer = token_service(
        &registry,
        &format!(
            "GET /token?service=wicp-test-registry&scope=repository%3Aa%3Apull HTTP/1.1\r\n\
             Host: h\r\nAuthorization: Basic {}\r\nConnection: close\r\n\r\n",
            BASE64.encode("puller:good")
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert_eq!(
        registry.token_calls(),
        [("POST".to_string(), 404), ("GET".to_string(), 200)]
    );
}

/// The containerd harness stops the daemon and removes its directories
/// when the test using it panics, not only when it passes.
#[test]
fn containerd_is_stopped_and_removed_when_a_test_panics() {
    let seen = std::sync::Mutex::new(None);
    let result = std::panic::catch_unwind(|| {
        let containerd = Containerd::start();
        *seen.lock().unwrap() = Some((containerd.pid(), containerd.dir().to_owned()));
        assert!(containerd.dir().join("containerd.sock").exists());
        panic!("a failing test");
    });
    assert!(result.is_err());
    let (pid, dir) = seen.into_inner().unwrap().expect("containerd started");
    assert!(!dir.exists(), "{} is left behind", dir.display());
    // Reaped, so /proc has no entry for it, or (pid reused) one that is not our daemon.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains(&*dir.to_string_lossy()),
        "containerd {pid} still runs"
    );
}

/// containerd pulls from the token-auth registry with good credentials,
/// and a wrong password fails the pull with the registry's 401.
#[test]
fn containerd_pulls_only_with_accepted_credentials() {
    let registry = Registry::start_with_token_auth(|user, pass| user == "puller" && pass == "good");
    let digest = registry.push_test_image("team/app", "v1");
    let image = format!("{}/team/app:v1", registry.host());
    let containerd = Containerd::start();
    containerd.assert_pulls_only_with(&image, "puller", ("good", "bad"), &digest);
    let err = containerd
        .pull(
            &format!("{}/team/app:missing", registry.host()),
            "puller",
            "good",
        )
        .unwrap_err();
    assert!(err.contains("not found"), "{err}");
}
