//! One finding of `node doctor`: a verdict, the check's name, what it
//! saw and the fix; and the options our entries run the binary with, which
//! several checks read. Its own module so that the checks of other modules
//! (`observed`, `mirrors`) and the doctor that gathers them depend on it,
//! not on each other.

use serde::Serialize;

use crate::options::Options;
use wicp_kubelet::config::provider_config::Entry;
use wicp_net::inputs::Env;

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
    let escape = |text: String| wicp_base::redact::escape_hidden(&text).into_owned();
    Check {
        verdict,
        check: name.to_string(),
        message: escape(message.into()),
        fix: fix.map(escape),
    }
}

/// The options each of `entries` runs the binary with, parsed as the binary
/// parses its args and env (`env`: the environment the kubelet starts
/// plugins with), with the entry's name. An entry whose args the binary
/// refuses is left out: check-config already reports it.
pub(super) fn entry_options(entries: &[&Entry], env: &Env) -> Vec<(String, Options)> {
    entries
        .iter()
        .filter_map(|entry| {
            let routing = crate::commands::check_config::entry::route(
                entry.name(),
                entry.provider.args(),
                &entry.provider.env(),
                env,
            )
            .ok()?;
            Some((entry.name().to_string(), routing.line.options))
        })
        .collect()
}
