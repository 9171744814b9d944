//! The request side: what the kubelet sends, in the order it is read.
//! [`stdin`] reads it within the deadline and a size bound, [`protocol`]
//! decodes the `CredentialProviderRequest` (and writes the response),
//! [`image`] parses the image it names, and [`token`] reads the claims of
//! the service account token it carries.

pub mod image;
pub mod protocol;
pub mod stdin;
pub mod token;
