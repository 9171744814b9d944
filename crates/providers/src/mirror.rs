//! Registry mirrors and pull-through caches: `--registry-mirror
//! SOURCE=TARGET` makes a pull of an image the pod names on SOURCE
//! (`docker.io/library/nginx`, what the kubelet asks about) use the
//! credential of TARGET, the registry the admin's containerd actually
//! pulls it from (an ECR pull-through cache
//! `<account>.dkr.ecr.<region>.amazonaws.com/docker-hub`, an ACR cache
//! rule, an Artifact Registry remote repository).
//!
//! The exchange is done for the image rewritten onto TARGET
//! (`TARGET/<prefix>/library/nginx`): routed, admitted and planned for it
//! exactly as if the pod had named it, so no provider is ever asked about
//! a registry it does not serve, and the token goes only where TARGET's
//! exchange sends it. The answer is keyed by SOURCE, the host the kubelet
//! matched and will look the credential up under.
//!
//! Why a credential for TARGET is useful under SOURCE's key: the kubelet
//! hands containerd a login without a server address, and containerd
//! offers it to every host of SOURCE's `hosts.toml` that challenges
//! (containerd `internal/cri/server/images/image_pull.go` and
//! `core/remotes/docker/config/hosts.go`). That includes SOURCE's own
//! upstream, which containerd appends as the last host unless `server`
//! names another: the docs (docs/mirrors.md) and `node doctor` say so.
//!
//! The stock `acr-credential-provider --registry-mirror` splits
//! `src:dst` on `:` (so no ports) and matches a string prefix of the
//! image; here SOURCE is a whole registry host and TARGET a host with an
//! optional path, split on `=`.

use std::fmt;
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};

use wicp_base::error::{Error, Result, quote};
use wicp_kubelet::request::image::ImageRef;

/// `--registry-mirror`.
pub(crate) static REGISTRY_MIRROR: FlagSpec = FlagSpec {
    long: "registry-mirror",
    env: "WICP_REGISTRY_MIRROR",
    takes: Takes::List,
    value: "SOURCE=TARGET",
    default: "",
    help: "Pull images of the registry SOURCE with the credential of TARGET, \
        the registry (and path) containerd mirrors SOURCE to: \
        docker.io=123456789012.dkr.ecr.us-east-1.amazonaws.com/docker-hub. \
        The exchange is done for TARGET, the answer keyed by SOURCE. \
        Repeatable; the variable takes a comma-separated list.",
};

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// [`REGISTRY_MIRROR`].
    pub registry_mirror: Vec<Rule>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[&REGISTRY_MIRROR];

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            registry_mirror: given.list_parsed(&REGISTRY_MIRROR, Rule::parse)?,
        })
    }
}

impl Options {
    /// Refuses two rules for one SOURCE: only the first would ever be
    /// used ([`Options::for_image`]), so the second is a mistake to name,
    /// not to ignore. The message names both.
    pub fn check(&self) -> std::result::Result<(), String> {
        for (i, rule) in self.registry_mirror.iter().enumerate() {
            if let Some(other) = self
                .registry_mirror
                .iter()
                .skip(i + 1)
                .find(|o| o.source.eq_ignore_ascii_case(&rule.source))
            {
                return Err(format!(
                    "--registry-mirror {rule} and --registry-mirror {other} both map {}: only the first would ever be used; keep one",
                    rule.source
                ));
            }
        }
        Ok(())
    }

    /// The rule for `image`'s registry, if one maps it.
    pub fn for_image(&self, image: &ImageRef) -> Option<&Rule> {
        self.registry_mirror
            .iter()
            .find(|rule| rule.source.eq_ignore_ascii_case(image.registry()))
    }
}

/// One `SOURCE=TARGET` mapping, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// A registry host (with its port, if any), as the kubelet names it.
    pub source: String,
    /// The mirror's registry host.
    pub target: String,
    /// A path below it the repositories live under (`docker-hub`), or "".
    pub prefix: String,
}

impl Rule {
    /// Parses `SOURCE=TARGET[/PREFIX]`: both registry hosts an image
    /// reference could name, SOURCE without a path, not the same host.
    pub fn parse(value: &str) -> std::result::Result<Rule, String> {
        let value = value.trim();
        let Some((source, target)) = value.split_once('=') else {
            return Err(format!(
                "{} is not SOURCE=TARGET (docker.io=<account>.dkr.ecr.<region>.amazonaws.com/docker-hub)",
                quote(value)
            ));
        };
        let (source, target) = (source.trim(), target.trim().trim_end_matches('/'));
        let probe = |text: &str| ImageRef::parse(&format!("{text}/probe/probe")).ok();
        let source_ref = probe(source)
            .filter(|r| r.registry() == source && r.repository() == "probe/probe")
            .ok_or_else(|| {
                format!(
                    "the source {} is not a registry host (docker.io, mcr.microsoft.com, registry.example:5000)",
                    quote(source)
                )
            })?;
        let (host, prefix) = target.split_once('/').unwrap_or((target, ""));
        let target_ref = probe(target)
            .filter(|r| r.registry() == host && !host.is_empty())
            .ok_or_else(|| {
                format!(
                    "the target {} is not a registry host with an optional path",
                    quote(target)
                )
            })?;
        if target_ref
            .registry()
            .eq_ignore_ascii_case(source_ref.registry())
        {
            return Err(format!(
                "the target {} is the source registry itself",
                quote(target)
            ));
        }
        Ok(Rule {
            source: source_ref.registry().to_string(),
            target: host.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// `image` as the mirror holds it: on TARGET, below its prefix.
    pub fn target_image(&self, image: &ImageRef) -> Result<ImageRef> {
        let path = if self.prefix.is_empty() {
            image.repository().to_string()
        } else {
            format!("{}/{}", self.prefix, image.repository())
        };
        ImageRef::parse(&format!("{}/{path}", self.target)).map_err(|e| {
            Error::config(format!(
                "--registry-mirror {self} maps {image} to an invalid image reference: {}",
                e.what()
            ))
        })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "{}={}", self.source, self.target)
        } else {
            write!(f, "{}={}/{}", self.source, self.target, self.prefix)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_map_images_onto_the_target() {
        let rule =
            Rule::parse("docker.io=123456789012.dkr.ecr.us-east-1.amazonaws.com/docker-hub/")
                .unwrap();
        assert_eq!(rule.source, "docker.io");
        assert_eq!(rule.target, "123456789012.dkr.ecr.us-east-1.amazonaws.com");
        assert_eq!(rule.prefix, "docker-hub");
        let image = ImageRef::parse("docker.io/library/nginx").unwrap();
        assert_eq!(
            rule.target_image(&image).unwrap().to_string(),
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/docker-hub/library/nginx"
        );
        let plain = Rule::parse("registry.example:5000 = contoso.azurecr.io").unwrap();
        assert_eq!(plain.source, "registry.example:5000");
        assert_eq!(
            plain.to_string(),
            "registry.example:5000=contoso.azurecr.io"
        );
        let image = ImageRef::parse("registry.example:5000/team/app").unwrap();
        assert_eq!(
            plain.target_image(&image).unwrap().to_string(),
            "contoso.azurecr.io/team/app"
        );
        let options = Options {
            registry_mirror: vec![rule.clone(), plain],
        };
        assert_eq!(
            options.for_image(&ImageRef::parse("nginx").unwrap()),
            Some(&rule)
        );
        assert_eq!(
            options.for_image(&ImageRef::parse("quay.io/a/b").unwrap()),
            None
        );
    }

    #[test]
    fn bad_rules_say_why() {
        for (value, why) in [
            ("docker.io:contoso.azurecr.io", "SOURCE=TARGET"),
            (
                "docker.io/library=contoso.azurecr.io",
                "not a registry host",
            ),
            ("=contoso.azurecr.io", "not a registry host"),
            ("docker.io=", "target"),
            ("docker.io=docker.io/x", "source registry itself"),
            ("docker.io=https://contoso.azurecr.io", "target"),
        ] {
            let e = Rule::parse(value).unwrap_err();
            assert!(e.contains(why), "{value}: {e}");
        }
    }
}
