//! A tiny blocking HTTP/1.1 server for integration tests.
//!
//! It stands in for the STS / token / metadata endpoints the plugin talks to. It is built on
//! `std::net` and plain threads so tests need no async runtime, and it binds `127.0.0.1:0` so
//! tests running in parallel never fight over a port.
//!
//! Every response carries `Content-Length` and `Connection: close`, and the connection is closed
//! after it. That is valid HTTP/1.1, and keep-alive clients (reqwest/hyper, Go's `net/http`)
//! honour it by opening a new connection for the next request, so the server never has to track
//! idle connections.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

/// Upper bound for the request line plus headers: a runaway client fails fast instead of
/// growing memory.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Upper bound for a request body.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// One HTTP request as the server received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Method as sent, e.g. `POST`.
    pub method: String,
    /// Path without the query string, still percent-encoded, e.g. `/v1/token`.
    pub path: String,
    /// Raw query string without the `?` (empty if there was none).
    pub query: String,
    /// Headers in the order received, names as sent (use [`Request::header`] to look up).
    pub headers: Vec<(String, String)>,
    /// Body bytes (de-chunked if the client used `Transfer-Encoding: chunked`).
    pub body: Vec<u8>,
}

impl Request {
    /// First value of the header `name`, compared case-insensitively as HTTP requires.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body decoded as `application/x-www-form-urlencoded` (`+` is a space, `%XX` a byte).
    /// A repeated key keeps its last value; call [`form_urlencoded_pairs`] on the body when
    /// repeats matter.
    pub fn form(&self) -> BTreeMap<String, String> {
        form_urlencoded_pairs(&String::from_utf8_lossy(&self.body))
            .into_iter()
            .collect()
    }

    /// The query string decoded into `(key, value)` pairs, in order and with repeats kept
    /// (the registry token protocol sends several `scope=` parameters).
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        form_urlencoded_pairs(&self.query)
    }

    /// All decoded values of the query parameter `key`, in order.
    pub fn query_values(&self, key: &str) -> Vec<String> {
        self.query_pairs()
            .into_iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v)
            .collect()
    }

    /// The body parsed as JSON.
    ///
    /// # Panics
    /// If the body is not JSON: a test asserting on a JSON body wants to fail loudly then.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "request body of {} {} is not JSON ({e}): {:?}",
                self.method,
                self.path,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Credentials from `Authorization: Basic ...`, if present and well-formed.
    pub fn basic_auth(&self) -> Option<(String, String)> {
        let encoded = auth_param(self.header("authorization")?, "basic")?;
        let decoded = String::from_utf8(BASE64.decode(encoded).ok()?).ok()?;
        let (user, pass) = decoded.split_once(':')?;
        Some((user.to_owned(), pass.to_owned()))
    }

    /// Token from `Authorization: Bearer ...`, if present.
    pub fn bearer(&self) -> Option<String> {
        auth_param(self.header("authorization")?, "bearer").map(str::to_owned)
    }
}

/// Requests a fake recorded as ones the real service would refuse; dropping
/// the fake with any recorded fails the test ([`Violations::check`]).
#[derive(Default)]
pub struct Violations(Mutex<Vec<String>>);

impl Violations {
    pub fn add(&self, what: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(what);
    }

    /// Panics (unless already panicking) when anything was recorded.
    pub fn check(&self, name: &str) {
        let v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !v.is_empty() && !std::thread::panicking() {
            panic!("the plugin sent requests the real {name} would refuse: {v:#?}");
        }
    }
}

/// What every fake upstream keeps besides its own state: the answers a
/// test scripted, the credentials it issued, and the requests the real
/// service would refuse. A [`Fake`] holds it with the fake's server and
/// fails the test when dropped with anything refused.
#[derive(Default)]
pub struct Ledger {
    script: Mutex<VecDeque<Response>>,
    issued: Mutex<Vec<String>>,
    pub violations: Violations,
}

impl Ledger {
    /// Answers the next checked requests with `responses`, in order,
    /// instead of the normal answer.
    pub fn script(&self, responses: impl IntoIterator<Item = Response>) {
        lock(&self.script).extend(responses);
    }

    /// The next scripted answer, if any.
    pub fn scripted(&self) -> Option<Response> {
        lock(&self.script).pop_front()
    }

    /// Records `credential` as one this fake issued.
    pub fn issue(&self, credential: &str) {
        lock(&self.issued).push(credential.to_string());
    }

    /// Every credential issued so far, in order.
    pub fn issued(&self) -> Vec<String> {
        lock(&self.issued).clone()
    }

    /// Whether this fake issued `credential`.
    pub fn has_issued(&self, credential: &str) -> bool {
        lock(&self.issued).iter().any(|c| c == credential)
    }

    /// The answer to a request whose checks found `problems`: when there
    /// are any, they are recorded and `refusal` is what the real service
    /// says ([`Ledger::refused`]); else [`Ledger::scripted_or_issue`].
    pub fn answer(
        &self,
        problems: Vec<String>,
        refusal: impl FnOnce() -> Response,
        issue: impl FnOnce(usize) -> (String, Response),
    ) -> Response {
        self.refused(problems, refusal)
            .unwrap_or_else(|| self.scripted_or_issue(issue))
    }

    /// `refusal` when the request's checks found `problems`, which are
    /// recorded; `None` for a request the real service accepts.
    pub fn refused(
        &self,
        problems: Vec<String>,
        refusal: impl FnOnce() -> Response,
    ) -> Option<Response> {
        if problems.is_empty() {
            return None;
        }
        problems.into_iter().for_each(|p| self.violations.add(p));
        Some(refusal())
    }

    /// The next scripted answer; else the credential `issue` mints (given
    /// how many were issued before, so each is new), recorded and answered
    /// as `issue` says.
    pub fn scripted_or_issue(&self, issue: impl FnOnce(usize) -> (String, Response)) -> Response {
        if let Some(scripted) = self.scripted() {
            return scripted;
        }
        let mut issued = lock(&self.issued);
        let (credential, response) = issue(issued.len());
        issued.push(credential);
        response
    }
}

/// A fake upstream's server and its [`Ledger`]: what the fake's tests
/// reach it by (it derefs to its [`TestServer`]), and what fails the test
/// when it is dropped with a request the real service would refuse.
pub struct Fake {
    server: TestServer,
    ledger: Arc<Ledger>,
    /// The real service, for the failure message ("Google STS").
    name: &'static str,
}

impl Fake {
    /// Starts `name`'s fake, whose `handler` answers each request with its
    /// ledger.
    pub fn start(
        name: &'static str,
        handler: impl Fn(&Ledger, &Request) -> Response + Send + Sync + 'static,
    ) -> Fake {
        let ledger = Arc::new(Ledger::default());
        let handler_ledger = Arc::clone(&ledger);
        Fake::with_ledger(name, ledger, move |req| handler(&handler_ledger, req))
    }

    /// Starts `name`'s fake with a `ledger` its `handler` already holds
    /// (in the fake's own state).
    pub fn with_ledger(
        name: &'static str,
        ledger: Arc<Ledger>,
        handler: impl Fn(&Request) -> Response + Send + Sync + 'static,
    ) -> Fake {
        Fake {
            server: TestServer::start(handler),
            ledger,
            name,
        }
    }

    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }
}

impl std::ops::Deref for Fake {
    type Target = TestServer;

    fn deref(&self) -> &TestServer {
        &self.server
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.ledger.violations.check(self.name);
    }
}

/// What the handler wants sent back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code, e.g. 200.
    pub status: u16,
    /// Extra headers. `Content-Length` and `Connection` are always set by the server.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
    /// Never answer; see [`Response::hang`].
    hang: bool,
}

impl Response {
    /// A JSON response with `Content-Type: application/json`.
    pub fn json(status: u16, value: serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: value.to_string().into_bytes(),
            hang: false,
        }
    }

    /// A plain-text response with `Content-Type: text/plain; charset=utf-8`.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            headers: vec![("Content-Type".into(), "text/plain; charset=utf-8".into())],
            body: body.into().into_bytes(),
            hang: false,
        }
    }

    /// Keep the connection open and never answer until the [`TestServer`] is dropped: lets
    /// tests prove that the client enforces its deadline instead of waiting forever.
    pub fn hang() -> Self {
        Self {
            status: 0,
            headers: Vec::new(),
            body: Vec::new(),
            hang: true,
        }
    }

    /// Adds a header (builder style). Replaces a previous header of the same name, so it can
    /// override the default `Content-Type`.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(&name));
        self.headers.push((name, value.into()));
        self
    }
}

/// A running server. Dropping it closes the listening socket, unblocks hung and in-flight
/// connections, and joins every thread it started.
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Starts serving on `127.0.0.1` with an OS-assigned port. `handler` runs on one thread per
    /// connection, so it must be `Sync`; keep its state in atomics or a `Mutex`.
    ///
    /// A handler that panics produces a `500` whose body carries the panic message, so the
    /// client sees an error rather than a silently dropped connection.
    pub fn start(handler: impl Fn(&Request) -> Response + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("local_addr of a bound listener");
        let shared = Arc::new(Shared {
            handler: Box::new(handler),
            requests: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            stopped: Condvar::new(),
            stop_lock: Mutex::new(()),
            connections: Mutex::new(Vec::new()),
        });
        let accept_shared = Arc::clone(&shared);
        let accept_thread = thread::Builder::new()
            .name(format!("test-http-accept-{}", addr.port()))
            .spawn(move || accept_loop(&listener, &accept_shared))
            .expect("spawn accept thread");
        Self {
            addr,
            shared,
            accept_thread: Some(accept_thread),
        }
    }

    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Port the server listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request received so far, in arrival order (including ones answered with
    /// [`Response::hang`]).
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.shared.requests).clone()
    }

    /// Number of requests received so far.
    pub fn request_count(&self) -> usize {
        lock(&self.shared.requests).len()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        {
            // Taking `stop_lock` orders the flag store before any hung thread's re-check, so
            // the notification cannot be missed.
            let _guard = lock(&self.shared.stop_lock);
            self.shared.stopping.store(true, Ordering::SeqCst);
            self.shared.stopped.notify_all();
        }
        // `accept()` has no timeout: a throwaway connection wakes it so it can see the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.accept_thread.take() {
            let _ = thread.join();
        }
        // The listener is closed now. Shutting the sockets down unblocks threads still reading
        // a request from a client that went quiet.
        let connections = std::mem::take(&mut *lock(&self.shared.connections));
        for (stream, _) in &connections {
            let _ = stream.shutdown(Shutdown::Both);
        }
        for (_, thread) in connections {
            let _ = thread.join();
        }
    }
}

/// Decodes `application/x-www-form-urlencoded` text into ordered pairs (`+` is a space, `%XX`
/// a byte; invalid escapes are kept literally, invalid UTF-8 is replaced).
pub fn form_urlencoded_pairs(input: &str) -> Vec<(String, String)> {
    input
        .split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// Percent-encodes everything except RFC 3986 unreserved characters; handy for building query
/// strings and form bodies in tests.
pub fn percent_encode(input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    for b in input.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

type Handler = Box<dyn Fn(&Request) -> Response + Send + Sync>;

/// State shared by the accept thread, the connection threads and the owner.
struct Shared {
    handler: Handler,
    requests: Mutex<Vec<Request>>,
    stopping: AtomicBool,
    /// Wakes connections parked by [`Response::hang`] when the server is dropped.
    stopped: Condvar,
    stop_lock: Mutex<()>,
    /// A clone of each connection's socket (so `Drop` can shut it down) and its thread.
    connections: Mutex<Vec<(TcpStream, JoinHandle<()>)>>,
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let Ok(handle) = stream.try_clone() else {
            continue;
        };
        let conn_shared = Arc::clone(shared);
        let Ok(thread) = thread::Builder::new()
            .name("test-http-conn".into())
            .spawn(move || serve_connection(&stream, &conn_shared))
        else {
            continue;
        };
        let mut connections = lock(&shared.connections);
        // Forget finished connections so a long test does not accumulate sockets.
        connections.retain(|(_, t)| !t.is_finished());
        connections.push((handle, thread));
    }
}

fn serve_connection(stream: &TcpStream, shared: &Shared) {
    let mut reader = BufReader::new(stream);
    let mut writer = stream;
    let request = match read_request(&mut reader, &mut writer) {
        Ok(Some(request)) => request,
        // The client closed without sending anything (e.g. the wake-up connect in `Drop`).
        Ok(None) => return,
        Err(message) => {
            let _ = write_response(&mut writer, &Response::text(400, message));
            return;
        }
    };
    lock(&shared.requests).push(request.clone());
    let response =
        catch_unwind(AssertUnwindSafe(|| (shared.handler)(&request))).unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("non-string panic payload");
            Response::text(500, format!("test handler panicked: {message}"))
        });
    if response.hang {
        let mut guard = lock(&shared.stop_lock);
        while !shared.stopping.load(Ordering::SeqCst) {
            guard = shared
                .stopped
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
        return;
    }
    let _ = write_response(&mut writer, &response);
    let _ = stream.shutdown(Shutdown::Write);
}

/// Reads one request. `Ok(None)` means the client closed before sending a request line.
fn read_request(
    reader: &mut impl BufRead,
    writer: &mut impl Write,
) -> Result<Option<Request>, String> {
    let mut budget = MAX_HEAD_BYTES;
    let request_line = read_head_line(reader, &mut budget)?;
    if request_line.is_empty() {
        return Ok(None);
    }
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("malformed request line {request_line:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("unsupported HTTP version {version:?}"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));

    let mut headers = Vec::new();
    loop {
        let line = read_head_line(reader, &mut budget)?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("malformed header line {line:?}"))?;
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }

    let mut request = Request {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        headers,
        body: Vec::new(),
    };
    // curl sends this for larger bodies and waits (briefly) for the go-ahead.
    if request
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        writer
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .map_err(|e| format!("writing 100 Continue: {e}"))?;
    }
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    request.body = if chunked {
        read_chunked_body(reader)?
    } else {
        let len = match request.header("content-length") {
            None => 0,
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| format!("invalid Content-Length {v:?}"))?,
        };
        if len > MAX_BODY_BYTES {
            return Err(format!("body of {len} bytes is too large"));
        }
        let mut body = vec![0; len];
        reader
            .read_exact(&mut body)
            .map_err(|e| format!("reading {len}-byte body: {e}"))?;
        body
    };
    Ok(Some(request))
}

/// Reads one CRLF-terminated line of the request head, charging it against `budget`.
fn read_head_line(reader: &mut impl BufRead, budget: &mut usize) -> Result<String, String> {
    let mut line = String::new();
    let n = reader
        .take(*budget as u64)
        .read_line(&mut line)
        .map_err(|e| format!("reading request head: {e}"))?;
    *budget -= n;
    if *budget == 0 {
        return Err("request head too large".into());
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

fn read_chunked_body(reader: &mut impl BufRead) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader
            .read_line(&mut size_line)
            .map_err(|e| format!("reading chunk size: {e}"))?;
        let size_hex = size_line.trim().split(';').next().unwrap_or_default();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("invalid chunk size {size_line:?}"))?;
        if body.len() + size > MAX_BODY_BYTES {
            return Err("chunked body too large".into());
        }
        if size == 0 {
            // Skip optional trailers up to the terminating empty line.
            loop {
                let mut trailer = String::new();
                let n = reader
                    .read_line(&mut trailer)
                    .map_err(|e| format!("reading chunk trailer: {e}"))?;
                if n == 0 || trailer.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader
            .read_exact(&mut body[start..])
            .map_err(|e| format!("reading chunk: {e}"))?;
        let mut crlf = [0; 2];
        reader
            .read_exact(&mut crlf)
            .map_err(|e| format!("reading chunk terminator: {e}"))?;
    }
}

fn write_response(writer: &mut impl Write, response: &Response) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        response.status,
        reason_phrase(response.status)
    );
    for (name, value) in &response.headers {
        if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("connection") {
            continue;
        }
        let _ = write!(head, "{name}: {value}\r\n");
    }
    let _ = write!(
        head,
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        response.body.len()
    );
    writer.write_all(head.as_bytes())?;
    writer.write_all(&response.body)?;
    writer.flush()
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// The credentials part of an `Authorization` value if its scheme (case-insensitive) matches.
fn auth_param<'a>(value: &'a str, scheme: &str) -> Option<&'a str> {
    let (got, param) = value.trim().split_once(' ')?;
    got.eq_ignore_ascii_case(scheme).then(|| param.trim())
}

fn percent_decode(input: &str) -> String {
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i + 1..i + 3)
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[i], escaped) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
                continue;
            }
            (b'+', _) => out.push(b' '),
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Locks `mutex`, ignoring poisoning: a panicking handler must not take the server down.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal() -> Response {
        Response::text(400, "refused")
    }

    fn mint(n: usize) -> (String, Response) {
        (
            format!("token-{n}"),
            Response::text(200, format!("token-{n}")),
        )
    }

    /// A refused request is recorded and answered as refused, and takes
    /// no scripted answer; then the script answers, then minting resumes
    /// with fresh, recorded credentials.
    #[test]
    fn a_ledger_refuses_then_scripts_then_issues() {
        let ledger = Ledger::default();
        ledger.script([Response::text(503, "busy")]);
        let refused = ledger.answer(vec!["GET /nope".into()], refusal, mint);
        assert_eq!(refused.status, 400);
        assert_eq!(ledger.answer(Vec::new(), refusal, mint).status, 503);
        assert_eq!(ledger.answer(Vec::new(), refusal, mint).body, b"token-0");
        assert_eq!(ledger.answer(Vec::new(), refusal, mint).body, b"token-1");
        assert_eq!(ledger.issued(), ["token-0", "token-1"]);
        assert!(ledger.has_issued("token-1") && !ledger.has_issued("token-2"));
        let recorded = ledger.violations.0.lock().unwrap().clone();
        assert_eq!(recorded, ["GET /nope"]);
    }

    #[test]
    #[should_panic(expected = "the plugin sent requests the real Google STS would refuse")]
    fn a_fake_dropped_with_a_refused_request_fails_the_test() {
        let fake = Fake::start("Google STS", |ledger, _| {
            ledger.answer(Vec::new(), refusal, mint)
        });
        let _ = fake
            .ledger()
            .refused(vec!["an Authorization header".into()], refusal);
        drop(fake);
    }
}
