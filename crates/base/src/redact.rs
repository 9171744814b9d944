//! What reaches stderr: [`redact`] masks every secret of the invocation
//! (registered by `Secret::new`) and every token shape in each line
//! `log` writes; [`clean`] does the same to an upstream's error text
//! before it is cut. And what we may repeat from an upstream answer, for
//! every exchanger.
//!
//! Error bodies go into the one error line the kubelet logs. Entra ID and ACR
//! put a code and a human description in theirs, which is what the admin
//! needs (Google STS and IAM do the same); a proxy's HTML page or a half-written success body could carry
//! anything, tokens included. So we repeat only named fields, cleaned, and
//! for anything else describe the body's shape, never its text.

/// A field from an error body, fit for one log line: secrets and token
/// shapes are masked first (see [`redact`]; before any cut, so a cut can
/// never leave most of a token behind), control characters become spaces,
/// Entra's trailing `Trace ID: ... Timestamp: ...` block is cut (the
/// correlation ID is shown separately), and the text is cut to `max`
/// characters.
pub fn clean(text: &str, max: usize) -> String {
    let text = match text.find(" Trace ID:") {
        Some(at) => text.get(..at).unwrap_or(text),
        None => text,
    };
    let text = crate::secret::mask_known(&mask_shapes(text, Shapes::Upstream));
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect();
    let joined = words.join(" ");
    let mut shown: String = joined.chars().take(max).collect();
    if joined.chars().count() > max {
        shown.push('…');
    }
    shown
}

/// What the plugin writes to stderr, made safe: every secret obtained
/// during this invocation (registered when its `Secret` was made: the
/// service account token, cloud access tokens, refresh tokens, AWS keys,
/// registry passwords), whole or any 16-byte run of it, becomes
/// `<redacted>`, and opaque token shapes no one registered become
/// `<token>`: JWTs, Google `ya29.` access tokens and `1//` refresh tokens,
/// and base64 runs mixing upper case, lower case and digits. Ordinary
/// words, hosts, ARNs, UUIDs, paths and error codes stay readable. Runs on
/// every line [`crate::log`] writes.
pub fn redact(text: &str) -> String {
    // Shapes first, so a token is replaced whole by `<token>` before the
    // runs it shares with a registered secret (a JWT header) cut it up.
    crate::secret::mask_known(&mask_shapes(text, Shapes::Line))
}

/// `text` with every character that changes how a terminal or a log
/// viewer shows it written as an escape instead (`\n`, `\r`, `\t`,
/// `\u{1b}`): controls (C0, DEL, C1 such as U+0085), the line and
/// paragraph separators, and the bidirectional formatting characters
/// ([`is_hidden`]). A value from an upstream or
/// an annotation cannot end a line early, forge one, recolour the
/// terminal or read backwards; runs on every line [`crate::log`] writes.
pub fn escape_hidden(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_hidden(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Characters that never belong in a name and change how text reads:
/// Unicode controls (C0, DEL, C1 such as U+0085), the line and paragraph
/// separators, and the bidirectional formatting characters.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}'
                | '\u{2029}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{061c}'
        )
}

/// Which shapes to mask: upstream text also loses long hex runs, which in
/// our own lines are image digests and cache keys.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shapes {
    Line,
    Upstream,
}

/// The characters of a token: base64, base64url and the dots of a JWT or a
/// Google token.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-' | '.' | '~')
}

fn mask_shapes(text: &str, shapes: Shapes) -> String {
    if !has_shapes(text) {
        return text.to_string();
    }
    mask_runs(text, shapes)
}

/// [`mask_shapes`] run by run.
fn mask_runs(text: &str, shapes: Shapes) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run_start: Option<usize> = None;
    for (at, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (is_token_char(c) && at < text.len(), run_start) {
            (true, None) => run_start = Some(at),
            (true, Some(_)) => {}
            (false, started) => {
                if let Some(start) = started {
                    out.push_str(&mask_run(text.get(start..at).unwrap_or_default(), shapes));
                    run_start = None;
                }
                if at < text.len() {
                    out.push(c);
                }
            }
        }
    }
    out
}

/// Whether [`mask_shapes`] could change anything in `text`: a JWT header
/// (`eyJ`), a Google token (`ya29.`, `1//`), a piece of 16 or more letters
/// and digits, or a dot-separated segment of 40 or more token characters;
/// every shape [`mask_run`] masks has one of those. Most lines have none
/// (a cache hit's line names hosts and paths), and skip the run-by-run
/// copy: a tenth of a hit's instructions (issue 47).
fn has_shapes(text: &str) -> bool {
    if ["eyJ", "ya29.", "1//"]
        .iter()
        .any(|marker| text.contains(marker))
    {
        return true;
    }
    let (mut piece, mut segment) = (0usize, 0usize);
    for c in text.chars() {
        piece = if c.is_ascii_alphanumeric() {
            piece + 1
        } else {
            0
        };
        segment = if is_token_char(c) && c != '.' {
            segment + 1
        } else {
            0
        };
        if piece >= 16 || segment >= 40 {
            return true;
        }
    }
    false
}

/// One run of token characters, masked whole (a JWT, a Google token) or by
/// its dot-separated segments (so `host.example.com` keeps its labels).
fn mask_run(run: &str, shapes: Shapes) -> String {
    if looks_like_jwt(run) || run.contains("ya29.") || run.starts_with("1//") {
        return "<token>".to_string();
    }
    run.split('.')
        .map(|segment| {
            if is_opaque(segment, shapes) {
                "<token>"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// A segment that reads as random bytes rather than as words: a piece of
/// 16 or more characters, or a whole segment of 40 or more, that mixes
/// upper case, lower case and digits and switches between them as often
/// as random base64 does (about two characters in three; CamelCase names
/// such as `AmazonEC2ContainerRegistryReadOnly` switch far less), or (in
/// upstream text) 32 or more hex digits.
fn is_opaque(segment: &str, shapes: Shapes) -> bool {
    fn random(s: &str) -> bool {
        let class = |b: u8| match b {
            b'A'..=b'Z' => 0,
            b'a'..=b'z' => 1,
            b'0'..=b'9' => 2,
            _ => 3,
        };
        let classes: Vec<u8> = s.bytes().map(class).collect();
        let mixed = [0, 1, 2].iter().all(|c| classes.contains(c));
        let switches = classes.windows(2).filter(|w| w.first() != w.get(1)).count();
        mixed && switches * 20 >= classes.len().saturating_sub(1) * 9
    }
    if segment.len() >= 40 && random(segment) {
        return true;
    }
    if segment
        .split(['/', '-', '_', '+', '='])
        .any(|piece| piece.len() >= 16 && random(piece))
    {
        return true;
    }
    shapes == Shapes::Upstream
        && segment.len() >= 32
        && segment.bytes().all(|b| b.is_ascii_hexdigit())
        && segment.bytes().any(|b| b.is_ascii_digit())
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
    #[test]
    fn hidden_characters_are_escaped() {
        assert!(matches!(
            escape_hidden("plain text, é"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            escape_hidden("a\u{1b}[31m\u{7}\u{0}\u{85}\u{2028}\u{202e}b\r\nc\t"),
            "a\\u{1b}[31m\\u{7}\\u{0}\\u{85}\\u{2028}\\u{202e}b\\r\\nc\\t"
        );
    }

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
    fn token_shapes_are_masked_and_words_kept() {
        for (text, shown) in [
            (
                "Caller Bearer ya29.c.c0ASRK0GZ-abc_def lacks permission",
                "Caller Bearer <token> lacks permission",
            ),
            (
                "token 1//0gAbCdEfGh-iJ was revoked",
                "token <token> was revoked",
            ),
            (
                "secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Lk3Vn2Tw9 here",
                "secret <token> here",
            ),
            (
                "session FwoGZXIvYXdzEBYaDHqa0AP1/FQUpH5rCiKBAQ+9q8Ar end",
                "session <token> end",
            ),
            (
                "signature 'kd8Hd72Js9aXq0LmPz81QwErTy_5Ab-c' bad",
                "signature '<token>' bad",
            ),
        ] {
            // Shapes only: other tests of this process register secrets
            // (some of them ordinary words) in the same registry.
            assert_eq!(mask_shapes(text, Shapes::Line), shown, "{text}");
        }
        for kept in [
            "PERMISSION_DENIED: Permission 'iam.serviceAccounts.getAccessToken' denied on resource",
            "User: arn:aws:sts::123456789012:assumed-role/pull/team.puller is not authorized to perform: ecr:GetAuthorizationToken",
            "AADSTS700211: No matching federated identity record found for presented assertion issuer 'https://oidc.eks.us-west-2.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE'",
            "Application with identifier '0b6c8a1e-1f2d-4c3b-9a8e-7d6c5b4a3f2e' was not found",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com and myregistry2024.azurecr.io, AccessDeniedException",
            "attach AmazonEC2ContainerRegistryReadOnly or AmazonEC2ContainerRegistryPullOnly",
            "/v1/projects/-/serviceAccounts/puller@my-project.iam.gserviceaccount.com:generateAccessToken",
            "us-docker.pkg.dev/my-project/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(mask_shapes(kept, Shapes::Line), kept);
        }
        // Upstream text also loses hex runs.
        assert_eq!(
            clean("token 0123456789abcdef0123456789abcdef expired", 100),
            "token <token> expired"
        );
    }

    #[test]
    fn a_registered_secret_is_masked_before_the_cut() {
        // A signature alone, longer than the cut: nothing of it survives.
        let signature = "s".repeat(20) + &"q".repeat(400);
        let _secret = crate::secret::Secret::new(format!("aGVhZGVy.cGF5bG9hZA.{signature}"));
        let shown = clean(&format!("invalid signature {signature}"), 300);
        assert_eq!(shown, "invalid signature <redacted>");
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
