//! wi-credential-provider: a kubelet image credential provider that pulls
//! images with each pod's own service account identity (KEP-4412).
//!
//! This crate is the top layer: the binary's [`run`] (one dispatcher,
//! `invocation`), the command line parsed once ([`options`]), the serving
//! pipeline ([`serve`]: the request read within its deadline -> the SPIFFE
//! identity its token selects, or the token itself -> route and plan ->
//! cache -> response) and the admin [`commands`]. The layers below are
//! crates, so none of them can reach up: `wicp_providers` (the providers,
//! SPIFFE, the cache), `wicp_net` (HTTP, TLS trust, proxies, metadata, and
//! what an invocation records), `wicp_kubelet` (the request and the
//! kubelet's configuration) and `wicp_base` (errors, secrets and redaction,
//! the log, durations and deadlines, files, locks and YAML, and the
//! platform layer, where Linux and Windows differ).

#![forbid(unsafe_code)]
// The docs are read with `--document-private-items` (`make lint`): a public
// item may link the private ones it explains.
#![allow(rustdoc::private_intra_doc_links)]
#![warn(unreachable_pub)]

pub mod commands;
mod invocation;
pub mod options;
pub mod serve;
mod version;

pub use invocation::run;
