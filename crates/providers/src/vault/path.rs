//! Names that end up in a Vault URL: mounts, namespaces, roles and secret
//! paths. Each is checked here, once, by an anchored rule, so that nothing a
//! tenant writes in an annotation can reach another endpoint of the
//! configured Vault (`sys/`, `auth/token/create`, another mount) or change
//! how the URL is parsed (`?`, `#`, `%`, `..`).

use super::{VAULT_SECRET_PATH, VAULT_SECRET_PREFIX};
use wicp_base::error::{Error, Result, quote};
use wicp_base::flags::FlagSpec;

/// Longest role name accepted; Vault stores roles under a path segment.
const MAX_ROLE_CHARS: usize = 128;

/// Longest secret path accepted (after the prefix or template).
const MAX_PATH_CHARS: usize = 512;

/// A role name as Vault's auth plugins route it: `role/<name>` uses the SDK's
/// `framework.GenericNameRegex`, `\w(([\w-.]+)?\w)?` (an ASCII word
/// character at both ends, `-` and `.` inside).
pub(crate) fn is_role(role: &str) -> bool {
    let bytes = role.as_bytes();
    let word = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    !bytes.is_empty()
        && bytes.len() <= MAX_ROLE_CHARS
        && bytes.first().is_some_and(word)
        && bytes.last().is_some_and(word)
        && bytes.iter().all(|b| word(b) || *b == b'-' || *b == b'.')
}

/// One path segment: letters, digits, `_`, `-` and `.`, and not `.` or `..`
/// (which an HTTP stack or proxy may resolve, leaving the prefix).
fn is_segment(segment: &str) -> bool {
    !segment.is_empty()
        && segment != "."
        && segment != ".."
        && segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// A relative path of checked segments: no leading or trailing `/`, no empty
/// segment, nothing but the characters `is_segment` allows.
fn is_relative_path(path: &str) -> bool {
    !path.is_empty() && path.len() <= MAX_PATH_CHARS && path.split('/').all(is_segment)
}

/// A mount or namespace flag: a relative path, given with or without
/// surrounding slashes (`secret`, `/secret/`, `team/kv`). Returned without them.
pub fn mount(flag: &'static FlagSpec, value: &str) -> Result<String> {
    let trimmed = value.trim().trim_matches('/');
    if !is_relative_path(trimmed) {
        return Err(Error::flag(flag, format!("{} is not a Vault path", quote(value)))
            .fix("write it as one or more segments of letters, digits, _, - and . separated by /, e.g. secret or team/kv"));
    }
    Ok(trimmed.to_string())
}

/// A secret path prefix (`--vault-secret-prefix`): a relative path, kept
/// without surrounding slashes.
pub fn prefix(value: &str) -> Result<String> {
    mount(&VAULT_SECRET_PREFIX, value)
}

/// A secret path template over the service account (`registry/{namespace}/{name}`).
#[derive(Clone, Debug)]
pub(crate) struct Template(String);

impl Template {
    /// Checks the template as the path it becomes for a typical service
    /// account: only the two placeholders, every literal part a path segment.
    pub(crate) fn parse(value: &str) -> Result<Self> {
        let trimmed = value.trim().trim_matches('/');
        let sample = trimmed.replace("{namespace}", "ns").replace("{name}", "sa");
        if !is_relative_path(&sample) {
            return Err(Error::flag(
                &VAULT_SECRET_PATH,
                format!("{} is not a Vault secret path template", quote(value)),
            )
            .fix("write segments of letters, digits, _, - and . separated by /, with {namespace} and {name} as the only placeholders, e.g. registry/{namespace}/{name}"));
        }
        Ok(Template(trimmed.to_string()))
    }

    /// The path for one service account. Kubernetes namespaces and service
    /// account names are DNS labels and subdomains, which are path segments;
    /// the result is checked anyway, as the token's claims are its input.
    pub(crate) fn render(&self, namespace: &str, name: &str) -> Result<String> {
        let path = self
            .0
            .replace("{namespace}", namespace)
            .replace("{name}", name);
        if !is_segment(namespace) || !is_segment(name) || !is_relative_path(&path) {
            return Err(Error::token(format!(
                "the secret path {} from --vault-secret-path is not a Vault path for service account {namespace}/{name}",
                quote(&path)
            ))
            .fix("the token's namespace or name is not a Kubernetes name; check the token's issuer"));
        }
        Ok(path)
    }
}

/// A secret named by an annotation, under the admin's prefix: `rest` is
/// what follows the prefix, checked as a relative path.
pub(crate) fn under_prefix(annotation: &str, prefix: &str, rest: &str) -> Result<String> {
    if !is_relative_path(rest) {
        return Err(Error::annotation_key(annotation, format!(
            "annotation {annotation} {} is not a secret path under the prefix {prefix}/",
            quote(rest)
        ))
        .fix(format!(
            "write a relative path of letters, digits, _, - and . segments separated by / (no leading /, no . or .. segments, no ?, # or %); it is read under {prefix}/"
        )));
    }
    Ok(format!("{prefix}/{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles() {
        for ok in ["app", "team-a.puller", "a", "A_1", "x.y-z_9"] {
            assert!(is_role(ok), "{ok}");
        }
        for bad in [
            "", "-a", "a-", ".a", "a.", "a/b", "../x", "a b", "a?b", "a#b", "a%2f", "é", "a\nb",
        ] {
            assert!(!is_role(bad), "{bad:?}");
        }
        assert!(!is_role(&"a".repeat(129)));
    }

    #[test]
    fn relative_paths() {
        for ok in ["a", "team/app", "registry/docker.io/ci", "a_b-c.d/e"] {
            assert!(is_relative_path(ok), "{ok}");
        }
        for bad in [
            "", "/a", "a/", "a//b", "../a", "a/../b", "a/./b", ".", "..", "a?b", "a#b", "%2e%2e/a",
            "a b", "a\nb", "a\\b", "a:b", "a@b",
        ] {
            assert!(!is_relative_path(bad), "{bad:?}");
        }
    }

    #[test]
    fn mounts_and_prefixes() {
        static M: FlagSpec = FlagSpec {
            long: "m",
            env: "WICP_M",
            takes: wicp_base::flags::Takes::One,
            value: "VALUE",
            default: "",
            help: "",
        };
        assert_eq!(mount(&M, "/secret/").unwrap(), "secret");
        assert_eq!(mount(&M, "team/kv").unwrap(), "team/kv");
        for bad in ["", "/", "a/../b", "a?x", "sys/../auth"] {
            assert!(mount(&M, bad).is_err(), "{bad}");
        }
        assert_eq!(prefix("registry/").unwrap(), "registry");
    }

    #[test]
    fn templates() {
        let t = Template::parse("registry/{namespace}/{name}").unwrap();
        assert_eq!(t.render("team", "puller").unwrap(), "registry/team/puller");
        assert!(t.render("..", "x").is_err());
        assert!(t.render("a/b", "x").is_err());
        for bad in [
            "registry/{pod}",
            "{namespace}/../x",
            "a?{name}",
            "",
            "a//{name}",
        ] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn annotation_paths() {
        assert_eq!(
            under_prefix("k", "registry", "team/app").unwrap(),
            "registry/team/app"
        );
        for bad in ["../x", "/abs", "a?b", "a#b", "%2e%2e/x", "a\nb", "", "a/"] {
            assert!(under_prefix("k", "registry", bad).is_err(), "{bad:?}");
        }
    }
}
