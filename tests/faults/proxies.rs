//! Proxies: HTTPS_PROXY, HTTP_PROXY and NO_PROXY as curl reads them,
//! proxy credentials never logged, unreachable and unusable proxies.

use super::*;

#[test]
fn https_proxy_carries_every_call_and_no_proxy_bypasses_it() {
    for case in Case::all() {
        let (fronts, extra) = tls_fronts(&case);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        // One tunnel per call: the fakes close each connection after answering.
        let tunnels: Vec<Target> = fronts
            .iter()
            .flat_map(|f| {
                std::iter::repeat_n(Target::Tunnel(f.addr().to_string()), case.calls_to_first())
            })
            .collect();

        let proxy = Proxy::start();
        let out = case.run(&fronts[0].url(), &extra, &[("HTTPS_PROXY", &proxy.url())]);
        out.response();
        assert_eq!(proxy.targets(), tunnels, "{}", case.name);
        assert!(
            out.stderr.contains(&format!("HTTPS_PROXY={}", proxy.url())),
            "{}",
            out.stderr
        );

        // Lowercase, as many distributions write it.
        let proxy = Proxy::start();
        case.run(&fronts[0].url(), &extra, &[("https_proxy", &proxy.url())])
            .response();
        assert_eq!(proxy.targets(), tunnels);

        // NO_PROXY names the endpoints' host: straight there.
        let proxy = Proxy::start();
        case.run(
            &fronts[0].url(),
            &extra,
            &[
                ("HTTPS_PROXY", &proxy.url()),
                ("NO_PROXY", "localhost,127.0.0.1"),
            ],
        )
        .response();
        assert_eq!(proxy.targets(), vec![], "{}", case.name);

        // HTTP_PROXY does not apply to https:// calls.
        let proxy = Proxy::start();
        case.run(&fronts[0].url(), &extra, &[("HTTP_PROXY", &proxy.url())])
            .response();
        assert_eq!(proxy.targets(), vec![]);
    }
}

#[test]
fn http_proxy_carries_plain_http_calls() {
    for case in Case::all() {
        let proxy = Proxy::start();
        case.run_normal(&[], &[("HTTP_PROXY", &proxy.url())])
            .response();
        let targets = proxy.targets();
        assert!(!targets.is_empty());
        match &targets[0] {
            Target::Forward(url) => assert!(url.starts_with(&case.first_url()), "{url}"),
            other => panic!("{other:?}"),
        }
        // HTTPS_PROXY does not apply to http:// calls.
        let proxy = Proxy::start();
        case.run_normal(&[], &[("HTTPS_PROXY", &proxy.url())])
            .response();
        assert_eq!(proxy.targets(), vec![]);
    }
}

/// `NO_PROXY` as the kubelet (Go's httpproxy) reads it: `*` and a CIDR
/// cover IP literals, so the token never reaches the proxy.
#[test]
fn no_proxy_star_and_cidrs_cover_ip_literals() {
    for case in Case::all() {
        for no_proxy in ["*", "10.0.0.0/8, 127.0.0.0/8", "127.0.0.1"] {
            let proxy = Proxy::start();
            let url = proxy.url();
            case.run_normal(
                &[],
                &[
                    ("HTTP_PROXY", &url),
                    ("HTTPS_PROXY", &url),
                    ("NO_PROXY", no_proxy),
                ],
            )
            .response();
            assert_eq!(proxy.targets(), vec![], "{} NO_PROXY={no_proxy}", case.name);
        }
        // A CIDR that does not hold the address leaves the call on the proxy.
        let proxy = Proxy::start();
        let url = proxy.url();
        case.run_normal(&[], &[("HTTP_PROXY", &url), ("NO_PROXY", "10.0.0.0/8")])
            .response();
        assert!(!proxy.targets().is_empty(), "{}", case.name);
    }
}

#[test]
fn proxy_credentials_are_used_and_never_logged() {
    const PASSWORD: &str = "pr0xy-Pa55word-never-logged";
    for case in Case::all() {
        let (fronts, extra) = tls_fronts(&case);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let proxy = Proxy::start_with_credentials("node", PASSWORD);
        let url = format!("http://node:{PASSWORD}@127.0.0.1:{}", proxy.port());
        let out = case.run(&fronts[0].url(), &extra, &[("HTTPS_PROXY", &url)]);
        out.response();
        assert!(proxy.authorizations().iter().all(Option::is_some));
        assert!(!out.stderr.contains(PASSWORD), "{}", out.stderr);
        assert!(
            out.stderr.contains(&format!(
                "HTTPS_PROXY=http://<credentials>@127.0.0.1:{}",
                proxy.port()
            )),
            "{}",
            out.stderr
        );

        // Wrong credentials: the proxy's 407 is reported, the password is not.
        let wrong = format!("http://node:wrong-{PASSWORD}@127.0.0.1:{}", proxy.port());
        let out = case.run(&fronts[0].url(), &extra, &[("HTTPS_PROXY", &wrong)]);
        let line = case.failed_at_first(&out, "network");
        support::assert_says(
            &words(&line),
            &[
                "proxy authorization required",
                "credentials go in the proxy URL",
            ],
        );
        assert!(!out.stderr.contains(PASSWORD), "{}", out.stderr);
    }
}

#[test]
fn an_unreachable_proxy_is_reported() {
    for case in Case::all() {
        let (fronts, extra) = tls_fronts(&case);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let proxy = format!("http://127.0.0.1:{}", closed_port());
        let out = case.run(&fronts[0].url(), &extra, &[("HTTPS_PROXY", &proxy)]);
        let line = case.failed_at_first(&out, "network");
        support::assert_says(
            &words(&line),
            &[
                &format!("(proxy settings: HTTPS_PROXY={proxy})"),
                "check that the proxy is reachable",
            ],
        );
        assert_eq!(fronts[0].connections(), 0);
    }
}

/// Issue 15 item 5: an unusable proxy setting is an error naming the
/// variable (never its password), before any connection.
#[test]
fn an_unusable_proxy_setting_is_refused_not_bypassed() {
    for case in Case::all() {
        for (var, value, why) in UNUSABLE_PROXIES {
            let out = case.run_normal(&[], &[(var, value)]);
            let line = case.failure(&out);
            assert_eq!(line["kind"], "config", "{line}");
            assert_eq!(line["facts"]["flag"], var, "{line}");
            let problem = line["facts"]["problem"].as_str().unwrap();
            assert!(problem.contains(why), "{line}");
            assert!(
                !out.stderr.contains("pa ss") && !out.stderr.contains("pa/ss"),
                "{}",
                out.stderr
            );
            assert_eq!(
                case.first_requests(),
                0,
                "{var}={value}: connected directly"
            );
        }
    }
}

#[test]
fn aws_https_proxy_carries_sts_and_ecr_and_no_proxy_bypasses_it() {
    const PASSWORD: &str = "aws-pr0xy-Pa55word-never-logged";
    let aws = Aws::start();
    let sts = TlsFront::start(aws.sts.server.addr());
    let ecr = TlsFront::start(aws.moto_addr());
    let ca = ["--ca-file", CA_PEM];
    let tunnels = vec![
        Target::Tunnel(sts.addr().to_string()),
        Target::Tunnel(ecr.addr().to_string()),
    ];

    let proxy = Proxy::start();
    assert_ecr_login(&aws.run(
        &sts.url(),
        &ecr.url(),
        &ca,
        &[("HTTPS_PROXY", &proxy.url())],
    ));
    assert_eq!(proxy.targets(), tunnels);

    let proxy = Proxy::start();
    assert_ecr_login(&aws.run(
        &sts.url(),
        &ecr.url(),
        &ca,
        &[("HTTPS_PROXY", &proxy.url()), ("NO_PROXY", "127.0.0.1")],
    ));
    assert_eq!(proxy.targets(), vec![]);

    let proxy = Proxy::start_with_credentials("node", PASSWORD);
    let url = format!("http://node:{PASSWORD}@127.0.0.1:{}", proxy.port());
    let out = aws.run(&sts.url(), &ecr.url(), &ca, &[("https_proxy", &url)]);
    assert_ecr_login(&out);
    assert_eq!(proxy.targets(), tunnels);
    assert!(proxy.authorizations().iter().all(Option::is_some));
    assert!(!out.stderr.contains(PASSWORD), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("https_proxy=http://<credentials>@127.0.0.1:"),
        "{}",
        out.stderr
    );
}

/// Issue 15 item 5, through the AWS SDK: the same refusal as for the
/// hand-written calls, before STS sees anything.
#[test]
fn aws_an_unusable_proxy_setting_is_refused_not_bypassed() {
    let aws = Aws::start();
    for (var, value, why) in UNUSABLE_PROXIES {
        let out = aws.run_normal(&[], &[(var, value)]);
        let line = aws.failure(&out, "config");
        assert_eq!(line["facts"]["flag"], var, "{line}");
        assert!(
            line["facts"]["problem"].as_str().unwrap().contains(why),
            "{line}"
        );
        assert!(
            !out.stderr.contains("pa ss") && !out.stderr.contains("pa/ss"),
            "{}",
            out.stderr
        );
    }
    assert_eq!(aws.sts.server.request_count(), 0, "connected directly");
}
