//! The kubelet's own configuration, modelled and read as the kubelet reads
//! it: the `CredentialProviderConfig` ([`provider_config`], decoded and
//! [`validate`]d by the rules of the kubelet's `plugin/config.go`), the
//! `KubeletConfiguration` facts that change what a provider entry does
//! ([`configuration`]), the `matchImages` rules ([`matching`]), and our
//! entries merged into an existing file in its own format ([`merge`]). Files
//! are read through the one bounded reader, [`wicp_base::yaml`] (or, on a node,
//! `Host` with the same limit). `check-config`, `explain` and `node` judge
//! and write configurations with these; a problem is a [`Finding`].

pub mod configuration;
mod finding;
pub mod matching;
pub mod merge;
pub mod provider_config;
pub mod validate;

pub use finding::Rule;
pub use finding::{Finding, Severity};
