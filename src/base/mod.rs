//! The shared base every other module stands on, and which uses none of
//! them: the one error type ([`error`]), secrets and their masking
//! ([`secret`], [`redact`]), the log ([`log`]), durations and deadlines
//! ([`duration`], [`deadline`]), files written safely and locks
//! ([`file`](mod@file), [`lock`]), the YAML subset we read ([`yaml`]), hex
//! ([`hex`]), and the one place where Linux and Windows differ
//! ([`platform`]). tests/architecture.rs holds that nothing here reaches
//! up.

pub(crate) mod deadline;
pub(crate) mod duration;
pub(crate) mod error;
pub(crate) mod file;
pub(crate) mod hex;
pub(crate) mod lock;
pub(crate) mod log;
pub(crate) mod platform;
pub(crate) mod redact;
pub(crate) mod secret;
pub(crate) mod yaml;
