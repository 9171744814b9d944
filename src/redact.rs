//! What we may repeat from an upstream answer, for every exchanger.
//!
//! Error bodies go into the one error line the kubelet logs. Entra ID and ACR
//! put a code and a human description in theirs, which is what the admin
//! needs (Google STS and IAM do the same); a proxy's HTML page or a half-written success body could carry
//! anything, tokens included. So we repeat only named fields, cleaned, and
//! for anything else describe the body's shape, never its text.

/// A field from an error body, fit for one log line: control characters
/// become spaces, anything shaped like a JWT is replaced, Entra's trailing
/// `Trace ID: ... Timestamp: ...` block is cut (the correlation ID is shown
/// separately), and the text is cut to `max` characters.
pub fn clean(text: &str, max: usize) -> String {
    let text = match text.find(" Trace ID:") {
        Some(at) => text.get(..at).unwrap_or(text),
        None => text,
    };
    let words: Vec<String> = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .map(|w| {
            if looks_like_jwt(w) {
                "<token>".to_string()
            } else {
                w.to_string()
            }
        })
        .collect();
    let joined = words.join(" ");
    let mut shown: String = joined.chars().take(max).collect();
    if joined.chars().count() > max {
        shown.push('…');
    }
    shown
}

/// A word containing a base64url JWT header (`eyJ`) followed by two dots.
fn looks_like_jwt(word: &str) -> bool {
    word.find("eyJ")
        .and_then(|at| word.get(at..))
        .is_some_and(|rest| rest.matches('.').count() >= 2)
}

/// How to say an upstream did not give us what we asked for: a 4xx is a
/// decision about our request, a 5xx (or anything else) is the service failing.
pub fn verb(status: u16) -> &'static str {
    if (400..500).contains(&status) {
        "refused"
    } else {
        "failed"
    }
}

/// The shape of a body we will not repeat.
pub fn body_shape(body: &[u8]) -> String {
    let trimmed = body.trim_ascii_start();
    let kind = if trimmed.is_empty() {
        return "empty body".to_string();
    } else if trimmed.starts_with(b"<") {
        "HTML or XML"
    } else if serde_json::from_slice::<serde_json::Value>(body).is_ok() {
        "JSON without the expected fields"
    } else {
        "not JSON"
    };
    format!("{} bytes, {kind}", body.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_cuts_and_redacts() {
        assert_eq!(clean("a\nb\t c", 10), "a b c");
        assert_eq!(
            clean("bad token eyJhbGciOiJSUzI1NiJ9.eyJ4IjoxfQ.c2ln here", 100),
            "bad token <token> here"
        );
        assert_eq!(
            clean("AADSTS1: x. Trace ID: 1 Correlation ID: 2", 100),
            "AADSTS1: x."
        );
        assert_eq!(clean("abcdef", 3), "abc…");
    }

    #[test]
    fn shapes() {
        assert_eq!(body_shape(b""), "empty body");
        assert_eq!(body_shape(b"<html>x</html>"), "14 bytes, HTML or XML");
        assert_eq!(
            body_shape(b"{\"a\":1}"),
            "7 bytes, JSON without the expected fields"
        );
        assert_eq!(body_shape(b"{\"a\":"), "5 bytes, not JSON");
    }
}
