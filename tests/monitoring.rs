//! The monitoring pack (monitoring/): the PrometheusRule's alerts run by
//! Debian's `promtool` (`check rules`, and `test rules` on
//! monitoring/rules.test.yaml), every query of the Grafana dashboard parsed
//! by the same promtool, every metric name either names checked against
//! what the binary writes (node-exporter's scrape of a metrics file made
//! here), and the kustomization rendered by the real `kubectl kustomize`.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;
use serde_json::Value;
use support::node_exporter::NodeExporter;
use support::plugin::{IMAGE, exec, request};
use support::sts::{Expect, FakeSts, oauth_error};
use support::token::TokenSpec;

const PROMTOOL: &str = "/usr/bin/promtool";

/// The kubelet's own credential-provider metrics, as
/// pkg/credentialprovider/plugin/metrics.go names them: the errors counter
/// was `kubelet_credential_provider_plugin_errors` before 1.34 and
/// `..._errors_total` since, `config_info` (label `hash`) is 1.34's
/// (kubernetes PR 133016); the duration is a histogram (label
/// `plugin_name`). No kubelet runs here, so these are checked against this
/// list rather than a scrape.
const KUBELET_METRICS: [&str; 6] = [
    "kubelet_credential_provider_plugin_errors",
    "kubelet_credential_provider_plugin_errors_total",
    "kubelet_credential_provider_plugin_duration_bucket",
    "kubelet_credential_provider_plugin_duration_sum",
    "kubelet_credential_provider_plugin_duration_count",
    "kubelet_credential_provider_config_info",
];

fn monitoring() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("monitoring")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn promtool(args: &[&str], dir: &Path) -> Output {
    Command::new(PROMTOOL)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{PROMTOOL}: {e} (bash .ci/run installs prometheus)"))
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// monitoring/prometheusrule.yaml, checked to be a PrometheusRule.
fn prometheus_rule() -> yaml_serde::Value {
    let text = std::fs::read_to_string(monitoring().join("prometheusrule.yaml")).unwrap();
    let rule = yaml_serde::Value::deserialize(yaml_serde::Deserializer::from_str(&text)).unwrap();
    assert_eq!(
        rule["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    rule
}

/// Every rule of the PrometheusRule: (alert name, expression, labels,
/// annotations).
struct Alert {
    name: String,
    expr: String,
    severity: String,
    runbook: String,
}

fn alerts(rule: &yaml_serde::Value) -> Vec<Alert> {
    let mut out = Vec::new();
    for group in rule["spec"]["groups"].as_sequence().unwrap() {
        for r in group["rules"].as_sequence().unwrap() {
            out.push(Alert {
                name: r["alert"].as_str().expect("every rule is an alert").into(),
                expr: r["expr"].as_str().unwrap().into(),
                severity: r["labels"]["severity"].as_str().unwrap_or("").into(),
                runbook: r["annotations"]["runbook_url"]
                    .as_str()
                    .unwrap_or("")
                    .into(),
            });
        }
    }
    out
}

/// The PrometheusRule's spec written as the plain rule file (`rules.yaml`)
/// that promtool and rules.test.yaml read, in `dir`.
fn write_rule_file(dir: &Path) {
    let rule = prometheus_rule();
    std::fs::write(
        dir.join("rules.yaml"),
        yaml_serde::to_string(&rule["spec"]).unwrap(),
    )
    .unwrap();
}

#[test]
fn the_alerts_pass_promtool_and_fire_only_on_their_test_series() {
    let dir = tempfile::tempdir().unwrap();
    write_rule_file(dir.path());
    std::fs::copy(
        monitoring().join("rules.test.yaml"),
        dir.path().join("rules.test.yaml"),
    )
    .unwrap();
    assert_ok(
        &promtool(&["check", "rules", "rules.yaml"], dir.path()),
        "promtool check rules",
    );
    // rules.test.yaml lists, at each evaluation, every alert that must be
    // firing: an alert that fires for a series beside them fails it too.
    assert_ok(
        &promtool(&["test", "rules", "rules.test.yaml"], dir.path()),
        "promtool test rules",
    );

    let tests: yaml_serde::Value = yaml_serde::from_str(
        &std::fs::read_to_string(monitoring().join("rules.test.yaml")).unwrap(),
    )
    .unwrap();
    let mut firing: BTreeSet<String> = BTreeSet::new();
    let mut silent: BTreeSet<String> = BTreeSet::new();
    for case in tests["tests"].as_sequence().unwrap() {
        for eval in case["alert_rule_test"].as_sequence().unwrap() {
            let name = eval["alertname"].as_str().unwrap().to_string();
            if eval["exp_alerts"].as_sequence().unwrap().is_empty() {
                silent.insert(name);
            } else {
                firing.insert(name);
            }
        }
    }
    let troubleshooting = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/troubleshooting.md"),
    )
    .unwrap();
    let anchors: BTreeSet<String> = crate::docs::anchors(&troubleshooting).into_iter().collect();
    let observability = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/observability.md"),
    )
    .unwrap();
    let rule = prometheus_rule();
    let all = alerts(&rule);
    assert!(all.len() >= 8, "{} alerts", all.len());
    for alert in &all {
        assert!(
            firing.contains(&alert.name),
            "{}: no test in rules.test.yaml where it fires",
            alert.name
        );
        assert!(
            ["critical", "warning", "info"].contains(&alert.severity.as_str()),
            "{}: severity {:?}",
            alert.name,
            alert.severity
        );
        let (page, fragment) = alert.runbook.split_once('#').unwrap_or_else(|| {
            panic!(
                "{}: runbook_url {:?} has no anchor",
                alert.name, alert.runbook
            )
        });
        assert!(
            page.ends_with("/docs/troubleshooting.md"),
            "{}: {page}",
            alert.name
        );
        assert!(
            anchors.contains(fragment),
            "{}: docs/troubleshooting.md has no heading for #{fragment}",
            alert.name
        );
        assert!(
            observability.contains(&format!("| `{}` |", alert.name)),
            "{} is not in docs/observability.md's table of alerts",
            alert.name
        );
    }
    // The thresholds that count nodes or wait out rollouts are shown not
    // to fire below them.
    for name in [
        "WiCredentialProviderPullsFailing",
        "WiCredentialProviderFailingFleetWide",
        "WiCredentialProviderConfigDrift",
    ] {
        assert!(
            silent.contains(name),
            "{name}: no test where it stays silent"
        );
    }
}

/// The dashboard's queries, Grafana's variables replaced by values
/// promtool can parse: (panel title, expression).
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring().join("dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = panels.pop() {
        if let Some(inner) = panel["panels"].as_array() {
            panels.extend(inner);
        }
        assert_eq!(
            panel["datasource"]["uid"].as_str(),
            Some("${datasource}"),
            "{}: not on the dashboard's data source variable",
            panel["title"]
        );
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push((
                panel["title"].as_str().unwrap().to_string(),
                target["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            // label_values(METRIC, LABEL) is Grafana's: its METRIC is a
            // selector.
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','))
                .map(|(metric, _)| metric.to_string())
                .unwrap_or_else(|| panic!("variable query {query}"));
            out.push((format!("variable {}", variable["name"]), inner));
        }
    }
    out.into_iter()
        .map(|(title, expr)| {
            let expr = expr
                .replace("$__rate_interval", "5m")
                .replace("$provider", ".*");
            assert!(!expr.contains('$'), "{title}: a variable left in {expr}");
            (title, expr)
        })
        .collect()
}

#[test]
fn every_dashboard_query_parses() {
    let queries = dashboard_queries();
    assert!(queries.len() >= 16, "{} queries", queries.len());
    // promtool parses a rule file's expressions: one recording rule each.
    let rules: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, (_, expr))| serde_json::json!({"record": format!("dashboard:query_{i}"), "expr": expr}))
        .collect();
    let file = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dashboard-rules.yaml"), file.to_string()).unwrap();
    assert_ok(
        &promtool(&["check", "rules", "dashboard-rules.yaml"], dir.path()),
        "promtool check rules over the dashboard's queries",
    );
    // The panels the issue names are there.
    let titles: BTreeSet<&str> = queries.iter().map(|(t, _)| t.as_str()).collect();
    for title in [
        "Errors by provider and kind",
        "Cache hit ratio by provider",
        "Exchange latency",
        "Kubelet: failed runs of the plugin",
        "Nodes whose credential-provider config differs from the fleet's",
    ] {
        assert!(titles.contains(title), "no panel {title}: {titles:?}");
    }
}

/// Every `name{labels}` selector of a PromQL expression: the metric
/// names it reads, with the label names its matchers use.
fn selectors(expr: &str) -> Vec<(String, BTreeSet<String>)> {
    let bytes = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    while i < bytes.len() {
        // Strings are skipped whole: a label value is not a name.
        if bytes[i] == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if !word(bytes[i]) || (i > 0 && word(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && word(bytes[i]) {
            i += 1;
        }
        let name = &expr[start..i];
        if !["wicp_", "kubelet_", "node_"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            continue;
        }
        let mut labels = BTreeSet::new();
        if bytes.get(i) == Some(&b'{') {
            let end = expr[i..].find('}').unwrap() + i;
            for matcher in expr[i + 1..end].split(',') {
                let label: String = matcher
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !label.is_empty() {
                    labels.insert(label);
                }
            }
            i = end + 1;
        }
        out.push((name.to_string(), labels));
    }
    out
}

/// Metrics of every family the plugin writes, scraped by node-exporter:
/// hits, a miss and a refusal against the local token server, with a cache
/// and a metrics directory. Each sample name maps to the label names its
/// series carry (node-exporter's own `node_textfile_*` included).
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    let sts = FakeSts::start(Expect::puller());
    let root = tempfile::tempdir().unwrap();
    let metrics = root.path().join("textfile");
    std::fs::create_dir(&metrics).unwrap();
    let token = TokenSpec::new("team", "puller", support::sts::AUDIENCE).mint();
    let run = |cache: &str| {
        let cache = root.path().join(cache).display().to_string();
        let metrics = metrics.display().to_string();
        let args = sts.entry(&["--cache-dir", &cache, "--metrics-dir", &metrics]);
        exec(&args, &request(IMAGE, Some(&token), &[]))
    };
    run("cache").response();
    run("cache").response();
    sts.script([oauth_error(400, "invalid_grant", "subject not allowed")]);
    assert_eq!(run("other-cache").code, Some(1));

    let exporter = NodeExporter::start(&metrics);
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in exporter.exposition().lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let sample = line.rsplit_once(' ').unwrap().0;
        let (name, labels) = sample.split_once('{').unwrap_or((sample, ""));
        let entry = out.entry(name.to_string()).or_default();
        for pair in labels.trim_end_matches('}').split("\",") {
            if let Some((label, _)) = pair.split_once('=') {
                entry.insert(label.to_string());
            }
        }
    }
    out
}

#[test]
fn every_metric_the_pack_reads_is_one_the_binary_writes() {
    let exported = exported();
    assert!(
        exported.contains_key("wicp_invocations_total"),
        "{:?}",
        exported.keys()
    );
    let rule = prometheus_rule();
    let mut expressions: Vec<(String, String)> = alerts(&rule)
        .into_iter()
        .map(|a| (a.name, a.expr))
        .collect();
    expressions.extend(dashboard_queries());
    let mut read = BTreeSet::new();
    let mut wrong = Vec::new();
    for (whose, expr) in &expressions {
        for (name, labels) in selectors(expr) {
            read.insert(name.clone());
            if name.starts_with("kubelet_") {
                if !KUBELET_METRICS.contains(&name.as_str()) {
                    wrong.push(format!("{whose}: {name} is not a kubelet metric"));
                }
                continue;
            }
            match exported.get(&name) {
                None => wrong.push(format!("{whose}: {name} is not exported")),
                Some(has) => {
                    for label in labels.difference(has) {
                        wrong.push(format!("{whose}: {name} has no label {label}"));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\nexported: {:?}",
        wrong.join("\n"),
        exported.keys()
    );
    // What the issue asks the pack to show is read.
    for name in [
        "wicp_invocations_total",
        "wicp_exchange_duration_seconds_bucket",
        "wicp_upstream_requests_total",
        "kubelet_credential_provider_plugin_errors_total",
        "kubelet_credential_provider_plugin_duration_bucket",
        "kubelet_credential_provider_config_info",
    ] {
        assert!(read.contains(name), "the pack never reads {name}");
    }
}

/// The checker above sees a name it does not know: the guard against a
/// rename is not vacuous.
#[test]
fn the_name_check_sees_names_and_labels() {
    let found = selectors(
        r#"sum by (provider) (rate(wicp_renamed_total{outcome="hit", provider=~"$p"}[5m])) / on() kubelet_x"#,
    );
    assert_eq!(
        found,
        vec![
            (
                "wicp_renamed_total".to_string(),
                ["outcome", "provider"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            ),
            ("kubelet_x".to_string(), BTreeSet::new()),
        ]
    );
}

/// `kubectl kustomize monitoring/`: the PrometheusRule as it is and the
/// dashboard in a ConfigMap Grafana's sidecar loads.
#[test]
fn the_monitoring_kustomization_renders_with_kubectl() {
    let rendered = support::kubectl_kustomize(&monitoring());
    let rule = rendered
        .iter()
        .find(|d| d["kind"].as_str() == Some("PrometheusRule"))
        .expect("a PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"].as_str(), Some("monitoring"));
    assert_eq!(rule["spec"], prometheus_rule()["spec"]);
    let map = rendered
        .iter()
        .find(|d| d["kind"].as_str() == Some("ConfigMap"))
        .expect("the dashboard's ConfigMap");
    assert_eq!(
        map["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("1")
    );
    let json = map["data"]["wi-credential-provider.json"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(json).unwrap(),
        serde_json::from_str::<Value>(
            &std::fs::read_to_string(monitoring().join("dashboard.json")).unwrap()
        )
        .unwrap()
    );
}
