//! Debian's `prometheus-node-exporter` reading a textfile directory, as a
//! node's does: tests/observability.rs checks what it makes of the
//! plugin's metrics file, tests/monitoring.rs which names it exports.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";

/// Debian's node-exporter with only the textfile collector, on a free
/// loopback port, stopped when dropped.
pub struct NodeExporter {
    child: Child,
    port: u16,
}

impl NodeExporter {
    pub fn start(dir: &Path) -> NodeExporter {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(NODE_EXPORTER)
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--collector.disable-defaults")
            .arg("--collector.textfile")
            .arg(format!("--collector.textfile.directory={}", dir.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{NODE_EXPORTER}: {e} (bash .ci/run installs it)"));
        let exporter = NodeExporter { child, port };
        let until = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "node-exporter did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        exporter
    }

    /// One scrape of /metrics: the series as `name{sorted labels}` -> value.
    pub fn scrape(&self) -> BTreeMap<String, f64> {
        series(&self.exposition())
    }

    /// One scrape of /metrics, as node-exporter wrote it.
    pub fn exposition(&self) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
            "{head}"
        );
        body.to_string()
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses text-format samples into `name{a="x",b="y"}` (labels sorted) ->
/// value, so that the exporter's ordering does not matter.
pub fn series(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (sample, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
        let key = match sample.split_once('{') {
            None => sample.to_string(),
            Some((name, labels)) => {
                // node-exporter fills a family's missing labels with "",
                // which Prometheus reads as no label: left out here.
                let mut pairs: Vec<String> = labels
                    .trim_end_matches('}')
                    .split("\",")
                    .filter_map(|piece| {
                        let (label, value) = piece.split_once("=\"")?;
                        let value = value.trim_end_matches('"');
                        (!value.is_empty()).then(|| format!("{label}=\"{value}\""))
                    })
                    .collect();
                pairs.sort_unstable();
                format!("{name}{{{}}}", pairs.join(","))
            }
        };
        out.insert(key, value);
    }
    out
}
