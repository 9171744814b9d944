//! Image references and registry hosts.
//!
//! The kubelet sends the normalized repository without tag or digest
//! (`docker.io/library/nginx`), but an admin running the binary by hand, or a
//! future kubelet, may send `nginx:1.25`, `reg.io:5000/a/b@sha256:...` or a
//! Docker Hub short name. All of them resolve to the same registry host the
//! kubelet will look our `auth` key up under.

use std::fmt;

use wicp_base::error::{Error, Result, quote};

/// The longest reference we accept; Docker's own limit on a repository name
/// is 255 characters, tags and digests add less than 200 more.
const MAX_REFERENCE_LEN: usize = 1024;

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host, lowercased only where Docker does (it does not): kept
    /// as written, with the port if any.
    registry: String,
    /// Repository path below the host, without tag or digest.
    repository: String,
}

impl ImageRef {
    /// Parses an image reference, normalising Docker Hub short names.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::request(format!("invalid image reference {}: {why}", quote(text)))
                .fix("the kubelet sends the image from the pod spec; check the pod's image field")
        };
        if text.is_empty() {
            return Err(bad("it is empty"));
        }
        if text.len() > MAX_REFERENCE_LEN {
            return Err(bad("it is too long"));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("it contains whitespace or control characters"));
        }
        // Digest first: "name@sha256:hex".
        let (name, digest) = match text.split_once('@') {
            Some((name, digest)) => (name, Some(digest)),
            None => (text, None),
        };
        if let Some(digest) = digest {
            let valid = digest.split_once(':').is_some_and(|(alg, hex)| {
                !alg.is_empty()
                    && alg
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+._-".contains(c))
                    && hex.len() >= 32
                    && hex.chars().all(|c| c.is_ascii_hexdigit())
            });
            if !valid {
                return Err(bad("the digest after '@' is not algorithm:hex"));
            }
        }
        // A tag is a ':' after the last '/'.
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name.get(last_slash..).and_then(|tail| tail.rfind(':')) {
            Some(i) => {
                let at = last_slash + i;
                (name.get(..at).unwrap_or(name), name.get(at + 1..))
            }
            None => (name, None),
        };
        if let Some(tag) = tag {
            let valid = !tag.is_empty()
                && tag.len() <= 128
                && tag
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
                && !tag.starts_with(['.', '-']);
            if !valid {
                return Err(bad("the tag is not valid"));
            }
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
                (first.to_string(), rest.to_string())
            }
            Some(_) => ("docker.io".to_string(), name.to_string()),
            None => ("docker.io".to_string(), format!("library/{name}")),
        };
        let registry = if registry == "index.docker.io" {
            "docker.io".to_string()
        } else {
            registry
        };
        validate_registry(&registry).map_err(|why| bad(&why))?;
        validate_repository(&repository).map_err(|why| bad(&why))?;
        // Normalizing adds up to `docker.io/library/`: the normalized name
        // must fit the bound too, or it would not parse again (found by
        // fuzzing).
        if registry.len().saturating_add(repository.len()) >= MAX_REFERENCE_LEN {
            return Err(bad("it is too long"));
        }
        Ok(ImageRef {
            registry,
            repository,
        })
    }

    /// The registry host with its port, as the kubelet keys credentials
    /// (`parseRegistry`: everything before the first `/`).
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The host without port.
    pub fn hostname(&self) -> &str {
        split_port(&self.registry).0
    }

    /// The repository path after the registry (a mirror rule keeps it).
    pub fn repository(&self) -> &str {
        &self.repository
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)
    }
}

/// Splits `host[:port]`, keeping bracketed IPv6 literals whole.
pub fn split_port(registry: &str) -> (&str, Option<&str>) {
    if registry.starts_with('[') {
        return match registry.find(']') {
            Some(end) => {
                let host = registry.get(..=end).unwrap_or(registry);
                let port = registry.get(end + 1..).and_then(|r| r.strip_prefix(':'));
                (host, port)
            }
            None => (registry, None),
        };
    }
    match registry.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (registry, None),
    }
}

fn validate_registry(registry: &str) -> std::result::Result<(), String> {
    let (host, port) = split_port(registry);
    if let Some(port) = port {
        let ok = !port.is_empty()
            && port.len() <= 5
            && port.chars().all(|c| c.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
        if !ok {
            return Err(format!(
                "the registry port {} is not a number from 1 to 65535",
                quote(port)
            ));
        }
    }
    if host.starts_with('[') {
        // Nothing may follow the closing bracket but ":port".
        let rebuilt = match port {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        // Exactly one bracket pair around an address std accepts as IPv6.
        let is_ipv6 = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(|inner| inner.parse::<std::net::Ipv6Addr>().is_ok());
        if rebuilt != registry || !is_ipv6 {
            return Err("the registry host is not a valid IPv6 literal".into());
        }
        return Ok(());
    }
    if host.is_empty() || host.len() > 253 {
        return Err("the registry host is empty or too long".into());
    }
    for label in host.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!(
                "the registry host {} has an invalid label",
                quote(host)
            ));
        }
    }
    Ok(())
}

/// Docker's path component grammar: lowercase alphanumerics separated by
/// `.`, `_`, `__` or runs of `-`.
fn validate_repository(repository: &str) -> std::result::Result<(), String> {
    if repository.is_empty() {
        return Err("the repository path is empty".into());
    }
    for component in repository.split('/') {
        let bytes = component.as_bytes();
        let ends_ok = matches!(bytes.first(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
            && matches!(bytes.last(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit());
        let chars_ok = component
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
        let separators_ok = !component.contains("..")
            && !component.contains("___")
            && !component.contains("._")
            && !component.contains("_.")
            && !component.contains(".-")
            && !component.contains("-.")
            && !component.contains("_-")
            && !component.contains("-_");
        if !(ends_ok && chars_ok && separators_ok) {
            return Err(format!(
                "the repository path component {} must be lowercase letters and digits separated by '.', '_', '__' or '-'",
                quote(component)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_the_kubelet_and_admins_use() {
        for (text, registry, repository) in [
            ("docker.io/library/nginx", "docker.io", "library/nginx"),
            ("nginx", "docker.io", "library/nginx"),
            ("nginx:1.25", "docker.io", "library/nginx"),
            ("team/app", "docker.io", "team/app"),
            ("index.docker.io/team/app", "docker.io", "team/app"),
            ("localhost/app", "localhost", "app"),
            ("localhost:5000/app:v1", "localhost:5000", "app"),
            (
                "reg.io:5000/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "reg.io:5000",
                "a/b",
            ),
            (
                "reg.io/a/b:v1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "reg.io",
                "a/b",
            ),
            (
                "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
                "123456789012.dkr.ecr.us-east-1.amazonaws.com",
                "app",
            ),
            ("[::1]:5000/app", "[::1]:5000", "app"),
            ("Reg.IO/a", "Reg.IO", "a"),
            ("r.io/a__b/c-d/e.f", "r.io", "a__b/c-d/e.f"),
        ] {
            let image = ImageRef::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(image.registry(), registry, "{text}");
            assert_eq!(image.repository(), repository, "{text}");
        }
        let image = ImageRef::parse("reg.io:5000/a").unwrap();
        assert_eq!(
            (image.hostname(), image.registry()),
            ("reg.io", "reg.io:5000")
        );
    }

    #[test]
    fn refuses_malformed_references() {
        for text in [
            "",
            " nginx",
            "nginx\n",
            "reg.io/",
            "reg.io//a",
            "reg.io/A",
            "reg.io/a:",
            "reg.io/a:-x",
            "reg.io/a@sha256:zz",
            "reg.io/a@",
            "reg.io:0/a",
            "reg.io:99999/a",
            "reg.io:port/a",
            "-reg.io/a",
            "reg..io/a",
            "reg.io/a..b",
            "reg.io/-a",
            "[::1/a",
            "[b00b.b]]-./j",
            "[::1]x:5000/a",
            "[1.2]/a",
            "[[[[[[[[[.:]:4/9",
            "[[::1]]:5000/a",
            "[::g]/a",
        ] {
            assert!(ImageRef::parse(text).is_err(), "{text:?} should be refused");
        }
        assert!(ImageRef::parse(&"a".repeat(2000)).is_err());
        // Short enough as written, too long once normalized (fuzzing found it).
        for short in [
            format!("team/{}", "a".repeat(MAX_REFERENCE_LEN - 10)),
            "a".repeat(MAX_REFERENCE_LEN - 10),
        ] {
            assert!(ImageRef::parse(&short).is_err(), "{}", short.len());
        }
        let longest = format!("docker.io/team/{}", "a".repeat(MAX_REFERENCE_LEN - 15));
        let image = ImageRef::parse(&longest).unwrap();
        assert_eq!(ImageRef::parse(&image.to_string()).unwrap(), image);
    }
}
