//! wi-credential-provider: a kubelet image credential provider that pulls
//! images with each pod's own service account identity (KEP-4412).
//!
//! The data flows one way, and the modules say so:
//! process inputs (`options`, `inputs`) -> the `request` (read from stdin
//! within its deadline, decoded, its image and its token's claims) -> or
//! the SPIFFE identity that token selects (`spiffe`) -> route and plan
//! (`providers`) -> cache (`cache`) -> response (`request::protocol`),
//! driven by `serve`. The admin `commands` reuse those parts, and the
//! kubelet's own configuration is read by `kubelet`. Below them all sit
//! the network (`net`) and the shared `base`: errors, secrets and
//! redaction, the log, durations and deadlines, files, locks and YAML, and
//! the `base::platform` layer, where Linux and Windows differ. What an
//! invocation did is recorded for the fleet by `observe` (metrics, audit
//! log).

// Only src/base/platform/windows/security.rs and service.rs may allow it
// (tests/architecture.rs).
#![deny(unsafe_code)]
#![warn(unreachable_pub)]
// The docs are read with `--document-private-items` (`make lint`): a public
// item may link the private ones it explains.
#![allow(rustdoc::private_intra_doc_links)]

mod base;
mod request;

mod cache;
mod commands;
mod inputs;
mod invocation;
mod kubelet;
mod net;
mod observe;
mod options;
mod providers;
mod serve;
mod spiffe;
mod version;

pub use invocation::run;

/// What the fuzz targets and the integration tests reach inside the crate:
/// the parsers they feed and the rules they check the binary against.
/// Not an API: it changes with the code.
#[doc(hidden)]
pub mod internal {
    pub use crate::base::secret::Secret;
    pub use crate::inputs::{Env, Inputs};
    pub use crate::request::image::ImageRef;
    pub use crate::request::token::{ServiceAccountToken, decode_claims, unverified_expiry};

    pub mod cache {
        pub use crate::cache::key::Key;
        pub use crate::cache::store::{Lookup, Store};
    }
    pub mod duration {
        pub use crate::base::duration::{cache_duration, format_go, format_unix, parse};
    }
    pub mod matching {
        pub use crate::kubelet::matching::{is_valid_pattern, matches, matches_auth_key};
    }
    pub mod net {
        pub mod http {
            pub use crate::net::http::{
                Reply, endpoint_host, endpoint_override, parse_http_date, parse_retry_after,
            };
        }
        pub mod proxy {
            pub use crate::net::proxy::{Proxies, hide_credentials};
        }
    }
    pub mod options {
        pub use crate::options::{BINARY, CommandLine, parse_as};
    }
    pub mod protocol {
        pub use crate::request::protocol::{CacheKeyType, request_from_bytes};
    }
    pub mod redact {
        pub use crate::base::redact::{body_shape, clean};
    }
    pub mod serve {
        pub use crate::serve::prepare;
    }
    pub mod providers {
        pub use crate::providers::ALL;
        pub mod oauth {
            pub use crate::providers::oauth::error_body;
        }
        pub mod route {
            pub use crate::providers::route::{choose, require_served};
        }
        pub mod mirror {
            pub use crate::providers::mirror::Rule;
        }
        pub mod aws {
            pub use crate::providers::aws::host;
        }
        pub mod azure {
            pub use crate::providers::azure::host;
        }
        pub mod gcp {
            pub use crate::providers::gcp::{iam, is_google_registry, sts};
        }
        pub mod chainguard {
            pub use crate::providers::chainguard::{Describe, interpret, is_identity_id};
        }
        pub mod token_exchange {
            pub use crate::providers::token_exchange::{Describe, Username, interpret};
        }
        pub mod vault {
            pub use crate::providers::vault::wire;
        }
    }
    pub mod commands {
        pub use crate::commands::node::merge;
        pub use crate::kubelet::Rule;
    }
}
