//! Network parts for fault injection, on 127.0.0.1 with OS-assigned ports:
//!
//! * [`TlsFront`]: a real TLS server (rustls, the test CA of
//!   tests/fixtures/tls) in front of a plain test server, so the plugin's
//!   trust store decisions are made on a real handshake;
//! * [`Proxy`]: an HTTP proxy that tunnels `CONNECT` and forwards
//!   absolute-form requests, recording every target, optionally demanding
//!   Basic proxy credentials;
//! * [`RawServer`]: answers each request with scripted raw bytes (a cut
//!   body, a stalled body, something that is not HTTP);
//! * [`Relay`]: forwards to a real backend (moto), answering scripted
//!   faults first and keeping every answer it relayed;
//! * [`closed_port`]: a port nothing listens on.
//!
//! Every server stops when dropped: it wakes its accept loop, shuts down
//! the sockets it handed out and joins its threads.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use base64::Engine as _;

pub const CA_PEM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls/ca.pem");
/// A second CA standing in for an AKS cluster's, and the certificate it
/// signed for `ib.cluster.test` (the identity-binding endpoint's SNI name).
pub const CLUSTER_CA_PEM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/tls/cluster-ca.pem"
);
pub const BINDING_PEM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/tls/binding.pem"
);
pub const BINDING_KEY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/tls/binding.key"
);
const SERVER_PEM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls/server.pem");
const SERVER_KEY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls/server.key");

/// A port on 127.0.0.1 that refuses connections: bound by the OS, then
/// released.
pub fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// The accept loop, connection sockets and threads every server here keeps.
struct Runner {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: Option<JoinHandle<()>>,
}

impl Runner {
    /// Serves each connection with `serve` on its own thread.
    fn start(serve: impl Fn(TcpStream, &Tracker) + Send + Sync + 'static) -> Runner {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("addr");
        let stopping = Arc::new(AtomicBool::new(false));
        let sockets = Arc::new(Mutex::new(Vec::new()));
        let threads = Arc::new(Mutex::new(Vec::new()));
        let tracker = Tracker {
            sockets: Arc::clone(&sockets),
        };
        let serve = Arc::new(serve);
        let accept = {
            let (stopping, threads) = (Arc::clone(&stopping), Arc::clone(&threads));
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    tracker.track(&stream);
                    let (serve, tracker) = (Arc::clone(&serve), tracker.clone());
                    let handle = thread::spawn(move || serve(stream, &tracker));
                    threads.lock().unwrap().push(handle);
                }
            })
        };
        Runner {
            addr,
            stopping,
            sockets,
            threads,
            accept: Some(accept),
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for socket in self.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
        let threads: Vec<_> = self.threads.lock().unwrap().drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// Lets connection threads register the sockets they open, so that
/// dropping the server unblocks them.
#[derive(Clone)]
struct Tracker {
    sockets: Arc<Mutex<Vec<TcpStream>>>,
}

impl Tracker {
    fn track(&self, stream: &TcpStream) {
        if let Ok(clone) = stream.try_clone() {
            self.sockets.lock().unwrap().push(clone);
        }
    }
}

/// A request's head lines and body.
type RawRequest = (Vec<String>, Vec<u8>);

/// Reads a request head (up to the blank line) and the body its
/// `Content-Length` announces. `None` if the peer closed first.
fn read_request(reader: &mut impl BufRead) -> Option<RawRequest> {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end_matches(['\r', '\n']).to_string();
        if line.is_empty() {
            break;
        }
        lines.push(line);
    }
    let length = lines
        .iter()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((lines, body))
}

fn head_bytes(lines: &[String]) -> Vec<u8> {
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out
}

/// Copies both directions between two sockets until either side closes.
fn pipe(a: TcpStream, b: TcpStream) {
    let (Ok(mut a_read), Ok(mut b_write)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let upstream = thread::spawn(move || {
        let _ = std::io::copy(&mut a_read, &mut b_write);
        let _ = b_write.shutdown(Shutdown::Write);
    });
    let (mut b_read, mut a_write) = (b, a);
    let _ = std::io::copy(&mut b_read, &mut a_write);
    let _ = a_write.shutdown(Shutdown::Write);
    let _ = upstream.join();
}

/// A TLS server with the test CA's certificate for 127.0.0.1, forwarding
/// each request to a plain HTTP backend that closes after answering (as
/// [`super::http_server::TestServer`] does).
pub struct TlsFront {
    runner: Runner,
    handshakes: Arc<AtomicUsize>,
    completed: Arc<AtomicUsize>,
    /// The TLS server name each client sent (SNI), in order.
    server_names: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

impl TlsFront {
    pub fn start(backend: SocketAddr) -> TlsFront {
        Self::start_with(backend, SERVER_PEM, SERVER_KEY)
    }

    /// Like [`TlsFront::start`], with another certificate (PEM file) and key.
    pub fn start_with(backend: SocketAddr, cert_pem: &str, key_pem: &str) -> TlsFront {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_pem)
            .expect("certificate file")
            .collect::<Result<_, _>>()
            .expect("certificates");
        let key = PrivateKeyDer::from_pem_file(key_pem).expect("key file");
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("protocol versions")
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .expect("server certificate and key"),
        );
        let handshakes = Arc::new(AtomicUsize::new(0));
        let completed = Arc::new(AtomicUsize::new(0));
        let server_names = Arc::new(std::sync::Mutex::new(Vec::new()));
        let runner = {
            let (handshakes, completed) = (Arc::clone(&handshakes), Arc::clone(&completed));
            let names = Arc::clone(&server_names);
            Runner::start(move |stream, tracker| {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                // The handshake goes out in several small writes: without
                // this, Nagle and the client's delayed ACK add ~40 ms to
                // each connection, which the bench would count as ours.
                let _ = stream.set_nodelay(true);
                handshakes.fetch_add(1, Ordering::SeqCst);
                let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&config)) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(connection, stream);
                // Reading the request completes the handshake; a client that
                // refuses our certificate ends here.
                let mut reader = BufReader::new(&mut tls);
                let Some((lines, body)) = read_request(&mut reader) else {
                    return;
                };
                drop(reader);
                names
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(tls.conn.server_name().map(str::to_string));
                completed.fetch_add(1, Ordering::SeqCst);
                let Ok(mut plain) = TcpStream::connect(backend) else {
                    return;
                };
                tracker.track(&plain);
                // One request per connection: the backend closes after it.
                let mut lines = lines;
                lines.retain(|l| !l.to_ascii_lowercase().starts_with("connection:"));
                lines.push("Connection: close".to_string());
                let mut request = head_bytes(&lines);
                request.extend_from_slice(&body);
                if plain.write_all(&request).is_err() {
                    return;
                }
                let mut answer = Vec::new();
                let _ = plain.read_to_end(&mut answer);
                let _ = tls.write_all(&answer);
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            })
        };
        TlsFront {
            runner,
            handshakes,
            completed,
            server_names,
        }
    }

    /// The TLS server name (SNI) of each completed handshake.
    pub fn server_names(&self) -> Vec<Option<String>> {
        self.server_names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.runner.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.runner.addr
    }

    /// TLS connections accepted, whether or not the handshake succeeded.
    pub fn connections(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }

    /// Requests that arrived over a completed handshake.
    pub fn requests(&self) -> usize {
        self.completed.load(Ordering::SeqCst)
    }
}

/// What a proxy was asked to reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `CONNECT host:port`: a tunnel, for https:// URLs.
    Tunnel(String),
    /// An absolute-form request, for http:// URLs: `POST http://host:port/path`.
    Forward(String),
}

/// A forward proxy on loopback.
pub struct Proxy {
    runner: Runner,
    targets: Arc<Mutex<Vec<Target>>>,
    authorizations: Arc<Mutex<Vec<Option<String>>>>,
}

impl Proxy {
    pub fn start() -> Proxy {
        Proxy::start_inner(None)
    }

    /// A proxy answering 407 unless the request carries these Basic
    /// credentials in `Proxy-Authorization`.
    pub fn start_with_credentials(user: &str, password: &str) -> Proxy {
        let expected =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        Proxy::start_inner(Some(format!("Basic {expected}")))
    }

    fn start_inner(required: Option<String>) -> Proxy {
        let targets = Arc::new(Mutex::new(Vec::new()));
        let authorizations = Arc::new(Mutex::new(Vec::new()));
        let runner = {
            let (targets, authorizations) = (Arc::clone(&targets), Arc::clone(&authorizations));
            Runner::start(move |stream, tracker| {
                let Ok(clone) = stream.try_clone() else {
                    return;
                };
                let mut reader = BufReader::new(clone);
                let Some((mut lines, body)) = read_request(&mut reader) else {
                    return;
                };
                let mut stream = stream;
                let request_line = lines.first().cloned().unwrap_or_default();
                let mut parts = request_line.split(' ');
                let (method, target) = (
                    parts.next().unwrap_or_default().to_string(),
                    parts.next().unwrap_or_default().to_string(),
                );
                let authorization = lines.iter().find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("proxy-authorization")
                        .then(|| value.trim().to_string())
                });
                authorizations.lock().unwrap().push(authorization.clone());
                if required.is_some() && authorization != required {
                    let _ = stream.write_all(
                        b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    return;
                }
                if method == "CONNECT" {
                    targets.lock().unwrap().push(Target::Tunnel(target.clone()));
                    let Ok(upstream) = TcpStream::connect(&target) else {
                        let _ = stream
                            .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
                        return;
                    };
                    tracker.track(&upstream);
                    if stream
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .is_err()
                    {
                        return;
                    }
                    pipe(stream, upstream);
                    return;
                }
                targets
                    .lock()
                    .unwrap()
                    .push(Target::Forward(target.clone()));
                // http://host:port/path: connect to host:port, send the
                // request in origin form, without the proxy's own header.
                let Some(rest) = target.strip_prefix("http://") else {
                    let _ =
                        stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
                    return;
                };
                let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let Ok(mut upstream) = TcpStream::connect(authority) else {
                    let _ =
                        stream.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
                    return;
                };
                tracker.track(&upstream);
                let path = if path.is_empty() { "/" } else { path };
                lines[0] = request_line.replacen(&target, path, 1);
                lines.retain(|l| !l.to_ascii_lowercase().starts_with("proxy-"));
                let mut request = head_bytes(&lines);
                request.extend_from_slice(&body);
                if upstream.write_all(&request).is_err() {
                    return;
                }
                let mut answer = Vec::new();
                let _ = upstream.read_to_end(&mut answer);
                let _ = stream.write_all(&answer);
                let _ = stream.shutdown(Shutdown::Write);
            })
        };
        Proxy {
            runner,
            targets,
            authorizations,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.runner.addr)
    }

    pub fn port(&self) -> u16 {
        self.runner.addr.port()
    }

    pub fn targets(&self) -> Vec<Target> {
        self.targets.lock().unwrap().clone()
    }

    /// The `Proxy-Authorization` of each request, in order.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.authorizations.lock().unwrap().clone()
    }
}

/// What a [`RawServer`] does with one request.
#[derive(Clone, Debug)]
pub enum Raw {
    /// Writes these bytes, then closes.
    Send(Vec<u8>),
    /// Writes these bytes, then keeps the connection open without a word
    /// until the server is dropped.
    SendThenStall(Vec<u8>),
}

/// A server answering each request with the next scripted [`Raw`] (the
/// last one repeats), recording the requests' heads and bodies.
pub struct RawServer {
    runner: Runner,
    requests: Arc<Mutex<Vec<RawRequest>>>,
}

impl RawServer {
    pub fn start(script: Vec<Raw>) -> RawServer {
        assert!(!script.is_empty());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let next = Arc::new(AtomicUsize::new(0));
        let runner = {
            let requests = Arc::clone(&requests);
            Runner::start(move |stream, _| {
                let Ok(clone) = stream.try_clone() else {
                    return;
                };
                let mut reader = BufReader::new(clone);
                let Some(request) = read_request(&mut reader) else {
                    return;
                };
                requests.lock().unwrap().push(request);
                let i = next.fetch_add(1, Ordering::SeqCst).min(script.len() - 1);
                let mut stream = stream;
                match &script[i] {
                    Raw::Send(bytes) => {
                        let _ = stream.write_all(bytes);
                        let _ = stream.shutdown(Shutdown::Both);
                    }
                    Raw::SendThenStall(bytes) => {
                        let _ = stream.write_all(bytes);
                        // Blocks until the client closes or Drop shuts the
                        // socket down.
                        let mut sink = [0u8; 1024];
                        while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
                    }
                }
            })
        };
        RawServer { runner, requests }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.runner.addr)
    }

    pub fn request_count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    /// The form body of each request, decoded.
    pub fn forms(&self) -> Vec<std::collections::BTreeMap<String, String>> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .map(|(_, body)| {
                super::http_server::form_urlencoded_pairs(&String::from_utf8_lossy(body))
                    .into_iter()
                    .collect()
            })
            .collect()
    }
}

/// A relay in front of a real HTTP backend: scripted answers first (after
/// recording the request), then each request forwarded as sent, with the
/// backend's answer relayed and kept.
pub struct Relay {
    pub server: super::http_server::TestServer,
    script: Arc<Mutex<std::collections::VecDeque<super::http_server::Response>>>,
    answers: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Relay {
    pub fn start(backend: SocketAddr) -> Relay {
        use super::http_server::{Response, TestServer};
        let script: Arc<Mutex<std::collections::VecDeque<Response>>> = Arc::default();
        let answers: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let server = {
            let (script, answers) = (Arc::clone(&script), Arc::clone(&answers));
            TestServer::start(move |req| {
                if let Some(canned) = script.lock().unwrap().pop_front() {
                    return canned;
                }
                let (status, headers, body) = forward(backend, req);
                answers.lock().unwrap().push(body.clone());
                let mut response = Response::text(status, "");
                response.headers = headers;
                response.body = body;
                response
            })
        };
        Relay {
            server,
            script,
            answers,
        }
    }

    pub fn script(&self, responses: impl IntoIterator<Item = super::http_server::Response>) {
        self.script.lock().unwrap().extend(responses);
    }

    /// The bodies of the backend's answers relayed so far.
    pub fn answers(&self) -> Vec<String> {
        self.answers
            .lock()
            .unwrap()
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }
}

/// Sends `req` to `backend` on a fresh connection and reads the whole
/// answer: status, headers (without the framing ones) and body.
fn forward(
    backend: SocketAddr,
    req: &super::http_server::Request,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut stream = TcpStream::connect(backend).expect("connect to the relay's backend");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let target = if req.query.is_empty() {
        req.path.clone()
    } else {
        format!("{}?{}", req.path, req.query)
    };
    let mut head = format!("{} {target} HTTP/1.1\r\n", req.method);
    for (name, value) in &req.headers {
        let lower = name.to_ascii_lowercase();
        if !["connection", "content-length", "transfer-encoding"].contains(&lower.as_str()) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        req.body.len()
    ));
    stream.write_all(head.as_bytes()).expect("write to backend");
    stream.write_all(&req.body).expect("write to backend");
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code from the backend");
    let mut headers = Vec::new();
    let mut chunked = false;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let lower = name.to_ascii_lowercase();
            if lower == "transfer-encoding" {
                chunked = value.to_ascii_lowercase().contains("chunked");
            } else if !["connection", "content-length"].contains(&lower.as_str()) {
                headers.push((name.trim().to_string(), value.trim().to_string()));
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).expect("chunk size");
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .expect("chunk size");
            if size == 0 {
                break;
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).expect("chunk");
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        let _ = reader.read_to_end(&mut body);
    }
    (status, headers, body)
}
