//! Admin commands that are not the kubelet's request/response cycle.

pub mod node;
