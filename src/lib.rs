//! wi-credential-provider: a kubelet image credential provider that pulls
//! images with each pod's own service account identity (KEP-4412).
//!
//! The data flows one way:
//! request ([`protocol`]) -> token claims ([`token`]) -> route and plan
//! ([`exchange`]) -> exchange -> response ([`protocol`]).

#![forbid(unsafe_code)]

pub mod log;

pub mod build_info;
pub mod cache;
pub mod cli;
pub mod config;
pub mod deadline;
pub mod duration;
pub mod error;
pub mod exchange;
pub mod explain;
pub mod http;
pub mod image;
pub mod matching;
pub mod protocol;
pub mod secret;
pub mod token;
pub mod trust;
pub mod upstream;
pub mod yaml;
