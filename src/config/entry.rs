//! Which exchanger a provider entry reaches, found the way the binary finds
//! it: the entry's `args` and `env` go through the binary's own [`Cli`], its
//! name through [`provider_from_program_name`], and the exchangers are built
//! by [`exchangers`]. Nothing here re-implements a flag.
//!
//! The kubelet runs `<bin-dir>/<name> <args...>` with its own environment
//! plus the entry's `env` (the entry wins). clap reads environment variables
//! from the process, so to parse an entry without touching the process
//! environment, each flag's `WICP_*` variable is detached from the process
//! and the entry's value, if any, becomes that flag's default: clap then
//! gives it exactly the precedence and parsing an environment value has
//! (the flag wins, the value goes through the same parser and delimiter).
//! The kubelet's own environment is not visible here; it rarely carries
//! `WICP_*` variables. For the cloud SDKs' standard variables (`AZURE_*`,
//! `AWS_*`) the entry's values win and this process's fill the gaps, the
//! closest stand-in for the kubelet's environment when run on the node.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches};

use crate::cli::{self, Cli, provider_choice, provider_from_program_name};
use crate::error::{Error, Result};
use crate::exchange::{Exchanger, Provider, aws};
use crate::net;

/// A provider entry as the binary would see it.
pub struct Routing {
    pub cli: Cli,
    /// The provider the entry's name implies (`wi-credential-provider-aws`).
    pub named: Option<Provider>,
    /// The provider the binary uses: `--provider`/`WICP_PROVIDER`, else the
    /// name's; `None` is `auto` (by registry host, never passthrough).
    pub choice: Option<Provider>,
    pub exchangers: Vec<Box<dyn Exchanger>>,
}

impl Routing {
    /// The exchanger the entry is pinned to, when it is pinned.
    pub fn exchanger(&self) -> Option<&dyn Exchanger> {
        let choice = self.choice?;
        self.exchangers
            .iter()
            .find(|e| e.provider() == choice)
            .map(|e| e.as_ref())
    }
}

/// The `WICP_*` variables the binary reads.
pub fn known_env_names() -> BTreeSet<String> {
    Cli::command()
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|name| name.to_string_lossy().into_owned())
        .collect()
}

/// Parses `args` and `env` with the binary's command line, as if it were
/// run as `name`, and builds its exchangers.
pub fn route(name: &str, args: &[String], env: &[(String, String)]) -> Result<Routing> {
    let command = Cli::command().mut_args(|arg| {
        let value = arg
            .get_env()
            .and_then(|var| env.iter().rev().find(|(k, _)| var == k.as_str()))
            .map(|(_, v)| v.clone());
        let arg = arg.env(None);
        match value {
            Some(value) => arg.default_value(value),
            None => arg,
        }
    });
    let argv = std::iter::once(OsString::from(name)).chain(args.iter().map(OsString::from));
    let matches = command.try_get_matches_from(argv).map_err(|e| {
        let rendered = e.render().to_string();
        let first = rendered
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("invalid arguments")
            .trim_start_matches("error: ")
            .to_string();
        Error::new(format!("the binary would refuse these args/env: {first}"))
            .fix("fix the entry's args and env; run `wi-credential-provider --help` for the flags")
    })?;
    let cli = Cli::from_arg_matches(&matches)
        .map_err(|e| Error::new(format!("the binary would refuse these args/env: {e}")))?;
    if cli.command.is_some() {
        return Err(Error::new(
            "the args start a subcommand, so the binary would not answer the kubelet",
        )
        .fix("remove the subcommand from the entry's args"));
    }
    // Exchangers that also read their SDK's standard variables (AZURE_*,
    // AWS_*) get the entry's values first, as the kubelet would pass them.
    let standard = |var: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == var)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(var).ok())
    };
    let mut cli = cli;
    cli.azure = cli.azure.clone().with_standard_env(standard);
    let named = provider_from_program_name(&OsString::from(name));
    let choice = provider_choice(&cli, named);
    let net = Arc::new(net::Settings::from_lookup(standard, cli.ca_file.clone()));
    let mut exchangers = cli::exchangers(&cli, &net)
        .map_err(|e| e.context("the binary would fail to start with these args/env"))?;
    for exchanger in exchangers.iter_mut() {
        if exchanger.provider() == Provider::Aws {
            *exchanger = Box::new(aws::Aws::with_environment(
                &cli.aws,
                aws::endpoints::Environment::from_lookup(standard),
                Arc::clone(&net),
            ));
        }
    }
    Ok(Routing {
        cli,
        named,
        choice,
        exchangers,
    })
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
        let r = route("wi-credential-provider-passthrough", &[], &[]).unwrap();
        assert_eq!(r.named, Some(Provider::Passthrough));
        assert_eq!(r.choice, Some(Provider::Passthrough));
        assert_eq!(r.exchanger().unwrap().provider(), Provider::Passthrough);
        let r = route("wi-credential-provider", &[], &[]).unwrap();
        assert_eq!((r.named, r.choice), (None, None));
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
        )
        .unwrap();
        assert_eq!(r.choice, Some(Provider::Passthrough));
        assert_eq!(r.cli.passthrough.registries, ["a.io", "b.io"]);
        assert_eq!(r.cli.max_cache_duration, Duration::from_secs(600));
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
        )
        .unwrap();
        assert_eq!(r.choice, None);
        assert_eq!(r.named, Some(Provider::Passthrough));
        assert_eq!(r.cli.max_cache_duration, Duration::from_secs(300));
    }

    #[test]
    fn the_process_environment_is_ignored() {
        // Whatever WICP_* the developer has set, an entry without env parses
        // to the defaults.
        let r = route("wi-credential-provider", &[], &[]).unwrap();
        assert_eq!(r.cli.max_cache_duration, Duration::from_secs(3600));
        assert!(r.cli.passthrough.registries.is_empty());
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
            let err = route("wi-credential-provider", &a, &e)
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains(needle), "{a:?} {e:?}: {err}");
        }
    }

    #[test]
    fn knows_the_env_names() {
        let names = known_env_names();
        assert!(names.contains("WICP_PROVIDER"));
        assert!(names.contains("WICP_REGISTRY"));
    }
}
