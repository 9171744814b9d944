//! Support code shared by the integration tests. Each test binary uses a
//! different subset, hence the allow.
#![allow(dead_code)]

pub mod azure;
pub mod chainguard;
pub mod cloudsmith;
pub mod containerd;
pub mod google;
pub mod http_server;
pub mod jfrog;
pub mod metadata;
pub mod moto;
pub mod net;
pub mod plugin;
pub mod quay;
pub mod registry;
pub mod spire;
pub mod sts;
pub mod token;
pub mod token_service;
pub mod vault;
pub mod windows;
pub mod zot;
