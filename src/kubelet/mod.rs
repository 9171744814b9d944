//! The kubelet's own configuration, modelled and read as the kubelet reads
//! it: the `CredentialProviderConfig` ([`provider_config`], decoded and
//! [`validate`]d by the rules of the kubelet's `plugin/config.go`), the
//! `KubeletConfiguration` facts that change what a provider entry does
//! ([`configuration`]), and the `matchImages` rules ([`matching`]). Files
//! are read through the one bounded reader, [`crate::base::yaml`] (or, on a node,
//! `Host` with the same limit). `check-config`, `explain` and `node` judge
//! and write configurations with these; a problem is a [`Finding`].

pub(crate) mod configuration;
mod finding;
pub(crate) mod matching;
pub(crate) mod provider_config;
pub(crate) mod validate;

pub use finding::Rule;
pub(crate) use finding::{Finding, Severity};
