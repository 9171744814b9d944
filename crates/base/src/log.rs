//! Logging to stderr, and only to stderr: stdout belongs to the kubelet
//! protocol. The kubelet shows our stderr only when we fail, so on success we
//! write at most one `info` line, and `debug` is for an admin running the
//! binary by hand.
//!
//! Every line goes through [`crate::redact::redact`] here, the one place
//! stderr is written: whatever a message quotes (an upstream's error text,
//! a value from the request), no registered secret and no token shape
//! reaches the kubelet's log, and no control character from a value
//! (an upstream's username, an annotation) reaches it unescaped.
//!
//! With `--log-format json` each line is one JSON object with stable field
//! names ([`Fields`]); the same masking runs on every value and again on the
//! whole line once it is formatted, so no encoding JSON adds can carry a
//! secret past it.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use serde_json::{Map, Value, json};

/// How stderr lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// `wi-credential-provider: <level>: <message>`, for people.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

static FORMAT: AtomicU8 = AtomicU8::new(0);

pub fn set_format(format: Format) {
    FORMAT.store(format as u8, Ordering::Relaxed);
}

/// Whether lines are written as JSON.
pub fn is_json() -> bool {
    format() == Format::Json
}

fn format() -> Format {
    if FORMAT.load(Ordering::Relaxed) == Format::Json as u8 {
        Format::Json
    } else {
        Format::Text
    }
}

/// What every JSON line of this invocation says about its subject, as the
/// serving path learns it.
#[derive(Clone, Debug, Default)]
pub struct Subject {
    pub provider: Option<&'static str>,
    pub registry: Option<String>,
    pub service_account: Option<String>,
}

static SUBJECT: Mutex<Option<Subject>> = Mutex::new(None);

/// Sets the subject the following JSON lines carry.
pub fn set_subject(subject: Subject) {
    *SUBJECT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(subject);
}

/// The fields of one line besides time, level and message; `None` fields
/// are left out.
#[derive(Clone, Debug, Default)]
pub struct Fields<'a> {
    pub outcome: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub cache: Option<&'a str>,
    pub duration: Option<std::time::Duration>,
    pub upstream_status: Option<u16>,
    pub fix: Option<&'a str>,
    /// The failure's facts ([`crate::error::Fact`]), as one object.
    pub facts: &'a [crate::error::Fact],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

impl crate::flags::Choice for Level {
    const CHOICES: &'static [(&'static str, Self)] = &[
        ("error", Level::Error),
        ("warn", Level::Warn),
        ("info", Level::Info),
        ("debug", Level::Debug),
    ];
}

impl crate::flags::Choice for Format {
    const CHOICES: &'static [(&'static str, Self)] =
        &[("text", Format::Text), ("json", Format::Json)];
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

impl Level {
    fn tag(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warning",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

/// Writes one line. A closed or full stderr must not turn a successful pull
/// into a failure, so write errors are ignored.
pub fn write(level: Level, args: std::fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    match format() {
        Format::Text => write_text(level, &args.to_string()),
        Format::Json => write_json(level, &args.to_string(), &Fields::default()),
    }
}

/// Writes the line that ends an invocation: `text` in the text format
/// (unchanged from what it always was), `message` with `fields` in JSON.
pub fn write_event(level: Level, text: &str, message: &str, fields: &Fields<'_>) {
    if !enabled(level) {
        return;
    }
    match format() {
        Format::Text => write_text(level, text),
        Format::Json => write_json(level, message, fields),
    }
}

/// Writes `error` as the line that ends a failed admin command: its words
/// and fix in the text format, and in JSON its message with `kind`, `fix`
/// and `facts` as fields, as the serving pipeline's last line has them, so
/// a script reads what failed without parsing words.
pub fn error(error: &crate::error::Error) {
    write_event(
        Level::Error,
        &error.to_string(),
        error.what(),
        &Fields {
            kind: Some(error.kind().name()),
            fix: error.remedy(),
            facts: error.facts(),
            ..Fields::default()
        },
    );
}

fn write_text(level: Level, message: &str) {
    // One write(2) per line, so lines of concurrent plugin processes
    // sharing a stderr never interleave mid-line.
    let text = crate::redact::redact(message);
    let text = crate::redact::escape_hidden(&text);
    let line = format!("wi-credential-provider: {}: {text}\n", level.tag());
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

fn write_json(level: Level, message: &str, fields: &Fields<'_>) {
    let mut object = Map::new();
    object.insert(
        "time".into(),
        json!(crate::duration::format_unix(crate::duration::unix_now())),
    );
    object.insert("level".into(), json!(level.tag()));
    object.insert("message".into(), json!(message));
    let subject = SUBJECT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
        .unwrap_or_default();
    let mut put = |name: &str, value: Option<Value>| {
        if let Some(value) = value {
            object.insert(name.to_string(), value);
        }
    };
    put("provider", subject.provider.map(Value::from));
    put("registry", subject.registry.map(Value::from));
    put("service_account", subject.service_account.map(Value::from));
    put("outcome", fields.outcome.map(Value::from));
    put("kind", fields.kind.map(Value::from));
    put("cache", fields.cache.map(Value::from));
    put(
        "duration_seconds",
        fields
            .duration
            .map(|d| json!((d.as_secs_f64() * 1000.0).round() / 1000.0)),
    );
    put("upstream_status", fields.upstream_status.map(Value::from));
    put("fix", fields.fix.map(Value::from));
    if !fields.facts.is_empty() {
        let facts: Map<String, Value> = fields
            .facts
            .iter()
            .map(|fact| (fact.name().to_string(), Value::from(fact.value())))
            .collect();
        object.insert("facts".into(), Value::Object(facts));
    }
    let mut line = json_line(Value::Object(object));
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `value` as one line of JSON with every secret masked: each string is
/// redacted and its hidden characters escaped before serialising, then the
/// serialised line is redacted again, which catches a secret in the
/// escapes JSON adds. Should that second pass ever leave something that is
/// not JSON, the line says so instead of carrying it.
pub fn json_line(value: Value) -> String {
    let cleaned = clean_strings(value);
    let text = serde_json::to_string(&cleaned).unwrap_or_default();
    let masked = crate::redact::redact(&text);
    if masked == text || serde_json::from_str::<Value>(&masked).is_ok() {
        return masked;
    }
    json!({
        "time": cleaned.get("time"),
        "level": cleaned.get("level"),
        "message": "<redacted: this line held a secret that could not be masked inside its JSON>",
    })
    .to_string()
}

/// `text` with the hidden characters JSON does not escape itself (DEL, C1
/// controls, separators, bidi controls) escaped as a text line escapes
/// them; the C0 controls, newlines included, JSON escapes on its own.
fn escape_for_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c >= ' ' && crate::redact::is_hidden(c) {
            out.push_str(&crate::redact::escape_hidden(c.encode_utf8(&mut [0; 4])));
        } else {
            out.push(c);
        }
    }
    out
}

fn clean_strings(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(escape_for_json(&crate::redact::redact(&s))),
        Value::Array(items) => Value::Array(items.into_iter().map(clean_strings).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (crate::redact::redact(&k), clean_strings(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Sends panic messages through [`write()`] too, so a panic quoting a value
/// is redacted like every other line.
pub fn redact_panics() {
    std::panic::set_hook(Box::new(|info| {
        write(
            Level::Error,
            format_args!("internal error (please report it): {info}"),
        );
    }));
}

// The log macros. Their arguments are evaluated only when the level is
// on: a `debug!` that renders a cache key's text costs a hit nothing at the
// default level. Used as `wicp_base::log::warning!` and `wicp_base::log::debug!`
// (exported at the crate root, as `macro_rules!` must be to cross a crate).
#[macro_export]
#[doc(hidden)]
macro_rules! log_warning {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::Level::Warn) {
            $crate::log::write($crate::log::Level::Warn, format_args!($($arg)*))
        }
    };
}

#[macro_export]
#[doc(hidden)]
macro_rules! log_debug {
    ($($arg:tt)*) => {
        if $crate::log::enabled($crate::log::Level::Debug) {
            $crate::log::write($crate::log::Level::Debug, format_args!($($arg)*))
        }
    };
}

pub use crate::{log_debug as debug, log_warning as warning};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_mask_secrets_in_values_keys_and_escapes() {
        let secret = crate::secret::Secret::new("s3cr3t-Value-0123456789abcdef");
        let quoted = format!("upstream said \"{}\"", secret.expose());
        let line = json_line(json!({
            "message": quoted,
            "nested": [secret.expose(), {"k": format!("a\u{202e}b {}", secret.expose())}],
        }));
        assert!(!line.contains(secret.expose()), "{line}");
        let back: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["message"], "upstream said \"<redacted>\"");
        assert_eq!(back["nested"][1]["k"], "a\\u{202e}b <redacted>");
        assert!(!line.contains('\n'));
        let line = json_line(json!({"message": "two\nlines\u{1b}[31m\u{85}\u{2028}"}));
        assert!(!line.contains('\n') && !line.contains('\u{1b}') && !line.contains('\u{2028}'));
        let back: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["message"], "two\nlines\u{1b}[31m\\u{85}\\u{2028}");
    }
}
