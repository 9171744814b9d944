//! What the kubelet says to a credential provider plugin, and how the
//! kubelet is configured to run one: the request a pull brings on stdin
//! ([`request`]: the protocol, the image, the service account token) and
//! the kubelet's own configuration files ([`config`]: the
//! CredentialProviderConfig, the KubeletConfiguration, and the rules
//! `check-config` holds them to). It stands on `wicp_base` only.

#![forbid(unsafe_code)]
// The docs are read with `--document-private-items` (`make lint`): a public
// item may link the private ones it explains.
#![allow(rustdoc::private_intra_doc_links)]
#![warn(unreachable_pub)]

pub mod config;
pub mod request;
