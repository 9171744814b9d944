//! wi-credential-provider: a kubelet image credential provider that pulls
//! images with each pod's own service account identity (KEP-4412).
//!
//! The data flows one way, and the modules say so:
//! process inputs ([`options`], [`inputs`]) -> request ([`stdin`], [`protocol`]) ->
//! token claims ([`token`]) -> route and plan ([`providers`]) -> cache
//! ([`cache`]) -> response ([`protocol`]), driven by [`serve`]. The admin
//! [`commands`] reuse those parts. Below them sit the shared pieces: the
//! network ([`net`]), [`error`], [`secret`], [`redact`],
//! [`log`], [`duration`], [`deadline`]. What an invocation did is recorded
//! for the fleet by [`observe`] (metrics, audit log).

#![forbid(unsafe_code)]

pub mod log;

pub mod cache;
pub mod commands;
pub mod deadline;
pub mod duration;
pub mod error;
pub mod file;
pub mod image;
pub mod inputs;
pub mod lock;
pub mod matching;
pub mod net;
pub mod observe;
pub mod options;
pub mod protocol;
pub mod providers;
pub mod redact;
pub mod secret;
pub mod serve;
pub mod stdin;
pub mod token;
pub mod version;
pub mod yaml;
