//! Support code shared by the integration tests. Each test binary uses a
//! different subset, hence the allow.
#![allow(dead_code)]

pub mod azure;
pub mod containerd;
pub mod google;
pub mod http_server;
pub mod moto;
pub mod net;
pub mod plugin;
pub mod registry;
pub mod token;
pub mod vault;
