//! One finding of `node doctor`: a verdict, the check's name, what it
//! saw and the fix. Its own module so that the checks of other modules
//! (`observed`, `mirrors`) and the doctor that gathers them depend on it,
//! not on each other.

use serde::Serialize;

/// How a check came out; any `Fail` makes `node doctor` exit 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// One line of the doctor's report (and one object of its JSON).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Check {
    pub(crate) verdict: Verdict,
    pub(crate) check: String,
    pub(crate) message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fix: Option<String>,
}

/// A check, its message and fix made safe to print.
pub(super) fn check(
    verdict: Verdict,
    name: &str,
    message: impl Into<String>,
    fix: Option<String>,
) -> Check {
    // Messages quote what the node's files say (an audit record, a unit's
    // flags): control characters are shown escaped, in text and JSON alike,
    // never written raw to the admin's terminal.
    let escape = |text: String| crate::base::redact::escape_hidden(&text).into_owned();
    Check {
        verdict,
        check: name.to_string(),
        message: escape(message.into()),
        fix: fix.map(escape),
    }
}
