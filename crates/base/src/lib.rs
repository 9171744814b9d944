//! The shared base every other crate stands on, and which uses none of
//! them: the one error type ([`error`]), secrets and their masking
//! ([`secret`], [`redact`]), the log ([`log`]), durations and deadlines
//! ([`duration`], [`deadline`]), files written safely and locks
//! ([`file`](mod@file), [`lock`]), the YAML subset we read ([`yaml`]), hex
//! ([`hex`]), and the one place where Linux and Windows differ
//! ([`platform`]). It depends on no other crate of the workspace, and is
//! the only one that binds the operating system or may use `unsafe`.

// The docs are read with `--document-private-items` (`make lint`): a public
// item may link the private ones it explains.
#![allow(rustdoc::private_intra_doc_links)]
#![warn(unreachable_pub)]

pub mod deadline;
pub mod duration;
pub mod error;
pub mod file;
pub mod flags;
pub mod hex;
pub mod lock;
pub mod log;
pub mod platform;
pub mod redact;
pub mod secret;
pub mod yaml;
