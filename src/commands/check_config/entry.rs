//! Which provider a provider entry reaches, found the way the binary finds
//! it: the entry's `args` and `env` go through the binary's own serving
//! command line ([`options::parse_as`]), its name through
//! [`options::provider_from_program_name`], and a provider is built by its
//! own declaration. Nothing here re-implements a flag.
//!
//! The kubelet runs `<bin-dir>/<name> <args...>` with its own environment
//! plus the entry's `env` (the entry wins). The `WICP_*` variables come from
//! the entry alone: the kubelet's own environment is not visible here, and
//! rarely carries them. For the cloud SDKs' standard variables (`AZURE_*`,
//! `AWS_*`) the entry's values win and this process's fill the gaps, the
//! closest stand-in for the kubelet's environment when run on the node.

use std::collections::BTreeSet;

use crate::commands;
use crate::options::{self, CommandLine};
use wicp_base::error::{Error, Result};
use wicp_net::inputs::{Env, Inputs};
use wicp_providers::{Exchanger, Provider};

/// A provider entry as the binary would see it: its command line, parsed
/// as the binary parses its own, and the inputs of the process the kubelet
/// would start.
pub(crate) struct Routing {
    pub(crate) line: CommandLine,
    inputs: Inputs,
}

impl Routing {
    /// Builds `provider` as the binary run by this entry would.
    pub(crate) fn build(&self, provider: &'static Provider) -> Result<Box<dyn Exchanger>> {
        self.line.build(provider, &self.inputs).map_err(|e| {
            e.context(format!(
                "the {provider} provider would refuse these args/env"
            ))
        })
    }
}

/// The `WICP_*` variables the binary reads.
pub(crate) fn known_env_names() -> BTreeSet<String> {
    options::env_names().into_iter().collect()
}

/// Parses `args` and `env` with the binary's command line, as if it were
/// run as `name` by a kubelet whose environment is `process` (this
/// process's, read once by the caller).
pub(crate) fn route(
    name: &str,
    args: &[String],
    env: &[(String, String)],
    process: &Env,
) -> Result<Routing> {
    let fix = "fix the entry's args and env; run `wi-credential-provider --help` for the flags";
    if let Some(first) = args.first()
        && commands::names().iter().any(|c| c == first)
    {
        return Err(Error::config(format!(
            "the args start a subcommand ({first}), so the binary would not answer the kubelet"
        ))
        .fix("remove the subcommand from the entry's args"));
    }
    let line =
        options::parse_as(name, args, &Env::from_pairs(env.iter().cloned())).map_err(|e| {
            Error::config(format!("the binary would refuse these args/env: {e}")).fix(fix)
        })?;
    let inputs = Inputs::new(process.overlaid(env), line.options.ca_file.clone(), None);
    Ok(Routing { line, inputs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_name_picks_the_provider() {
        let r = route(
            "wi-credential-provider-passthrough",
            &[],
            &[],
            &Env::default(),
        )
        .unwrap();
        let passthrough = Provider::find("passthrough");
        assert_eq!(r.line.named, passthrough);
        assert_eq!(r.line.choice, passthrough);
        assert_eq!(
            r.build(r.line.choice.unwrap()).unwrap().provider().name,
            "passthrough"
        );
        let r = route("wi-credential-provider", &[], &[], &Env::default()).unwrap();
        assert_eq!((r.line.named, r.line.choice), (None, None));
    }

    #[test]
    fn env_values_act_as_the_binary_reads_them() {
        let r = route(
            "wi-credential-provider",
            &[],
            &env(&[
                ("WICP_PROVIDER", "passthrough"),
                ("WICP_REGISTRY", "a.io,b.io"),
                ("WICP_MAX_CACHE_DURATION", "10m"),
            ]),
            &Env::default(),
        )
        .unwrap();
        assert_eq!(r.line.choice, Provider::find("passthrough"));
        assert_eq!(r.line.options.registries.registries, ["a.io", "b.io"]);
        assert_eq!(
            r.line.options.max_cache_duration(),
            Duration::from_secs(600)
        );
    }

    #[test]
    fn flags_win_over_env() {
        let r = route(
            "wi-credential-provider-passthrough",
            &args(&["--provider", "auto", "--max-cache-duration=5m"]),
            &env(&[
                ("WICP_PROVIDER", "passthrough"),
                ("WICP_MAX_CACHE_DURATION", "10m"),
            ]),
            &Env::default(),
        )
        .unwrap();
        assert_eq!(r.line.choice, None);
        assert_eq!(r.line.named, Provider::find("passthrough"));
        assert_eq!(
            r.line.options.max_cache_duration(),
            Duration::from_secs(300)
        );
    }

    #[test]
    fn the_process_environment_is_ignored() {
        // Whatever WICP_* the developer has set, an entry without env parses
        // to the defaults.
        let r = route(
            "wi-credential-provider",
            &[],
            &[],
            &Env::from_os(std::env::vars_os()),
        )
        .unwrap();
        assert_eq!(
            r.line.options.max_cache_duration(),
            Duration::from_secs(3600)
        );
        assert!(r.line.options.registries.registries.is_empty());
    }

    #[test]
    fn refusals_are_explained() {
        for (a, e, needle) in [
            (args(&["--nope"]), env(&[]), "unexpected argument"),
            (args(&[]), env(&[("WICP_TIMEOUT", "90s")]), "60s"),
            (args(&["--provider", "ecr"]), env(&[]), "invalid value"),
            (args(&["check-config", "x"]), env(&[]), "subcommand"),
            (
                args(&["--registry", "[bad"]),
                env(&[]),
                "not a valid pattern",
            ),
        ] {
            // A refusal either of the command line or of the provider the
            // entry is named after, as the binary would refuse it.
            let err = route(
                "wi-credential-provider-passthrough",
                &a,
                &e,
                &Env::default(),
            )
            .and_then(|r| r.build(r.line.named.unwrap()).map(|_| ()))
            .err()
            .unwrap()
            .to_string();
            assert!(err.contains(needle), "{a:?} {e:?}: {err}");
        }
    }

    #[test]
    fn only_the_routed_provider_is_built() {
        // A half-set GCP flag breaks the gcp provider, not the others.
        let r = route(
            "wi-credential-provider-aws",
            &[],
            &env(&[("WICP_GCP_CLUSTER", "projects/p/locations/l/clusters/c")]),
            &Env::default(),
        )
        .unwrap();
        assert!(r.build(Provider::find("aws").unwrap()).is_ok());
        let e = r.build(Provider::find("gcp").unwrap()).err().unwrap();
        assert_eq!(e.kind(), wicp_base::error::Kind::Config);
        assert!(e.to_string().contains("gcp"), "{e}");
    }

    #[test]
    fn knows_the_env_names() {
        let names = known_env_names();
        assert!(names.contains("WICP_PROVIDER"));
        assert!(names.contains("WICP_REGISTRY"));
    }
}
