//! The kubelet's `CredentialProviderConfig`, checked the way the kubelet
//! reads it and then for what it accepts but never works.
//!
//! A wrong config costs a lot to find: the kubelet refuses to start on a
//! validation error, and silently pulls without credentials on the subtler
//! mistakes (a `matchImages` path glob, an audience nobody trusts, an
//! annotation key it never passes). So [`wicp_kubelet::config`] reproduces the
//! kubelet's own decoding and validation rules (`plugin/config.go`), and
//! [`lint`] adds the rules that need to know what this plugin will do
//! with each entry, which [`entry`] finds out by parsing the entry's `args`
//! and `env` with the binary's own command line.

pub(crate) mod check;
pub(crate) mod entry;
pub(crate) mod isolation;
pub(crate) mod lint;
