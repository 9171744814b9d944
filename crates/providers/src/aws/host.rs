//! Which ECR registry an image host names, and where its APIs live.
//!
//! A private ECR host spells out everything the exchange needs: the account,
//! the region, the partition (from the DNS suffix), whether the node wants
//! FIPS endpoints (`dkr.ecr-fips`) and whether it is the dual-stack form
//! (`dkr-ecr.<region>.on.aws`). We parse it with one anchored pattern and
//! then check that the region belongs to the partition the suffix names, so
//! `dkr.ecr.us-east-1.amazonaws.com.evil.io` or a China region under
//! `amazonaws.com` is refused rather than guessed at: the service account
//! token is only ever presented for a host we fully understand.

use std::fmt;
use std::sync::LazyLock;

use regex_lite::Regex;

use wicp_base::error::{Error, Result, quote};

/// An AWS partition: a separate set of regions, accounts and endpoints. A
/// role in one partition cannot be assumed from another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partition {
    Aws,
    AwsCn,
    AwsUsGov,
    AwsIso,
    AwsIsoB,
    AwsIsoE,
    AwsIsoF,
    AwsEusc,
}

impl Partition {
    pub const ALL: [Partition; 8] = [
        Partition::Aws,
        Partition::AwsCn,
        Partition::AwsUsGov,
        Partition::AwsIso,
        Partition::AwsIsoB,
        Partition::AwsIsoE,
        Partition::AwsIsoF,
        Partition::AwsEusc,
    ];

    /// The name used in ARNs (`arn:aws-cn:...`).
    pub fn name(self) -> &'static str {
        match self {
            Partition::Aws => "aws",
            Partition::AwsCn => "aws-cn",
            Partition::AwsUsGov => "aws-us-gov",
            Partition::AwsIso => "aws-iso",
            Partition::AwsIsoB => "aws-iso-b",
            Partition::AwsIsoE => "aws-iso-e",
            Partition::AwsIsoF => "aws-iso-f",
            Partition::AwsEusc => "aws-eusc",
        }
    }

    pub fn from_name(name: &str) -> Option<Partition> {
        Partition::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether `region` is one of this partition's region names, after the
    /// region patterns AWS publishes for its partitions (`partitions.json`).
    pub fn has_region(self, region: &str) -> bool {
        let parts: Vec<&str> = region.split('-').collect();
        let word = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase());
        let number =
            |s: &str| !s.is_empty() && s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit());
        match (self, parts.as_slice()) {
            (Partition::Aws, [area, place, n]) => {
                ["us", "eu", "ap", "sa", "ca", "me", "af", "il", "mx"].contains(area)
                    && word(place)
                    && number(n)
            }
            (Partition::AwsCn, ["cn", place, n]) => word(place) && number(n),
            (Partition::AwsUsGov, ["us", "gov", place, n]) => word(place) && number(n),
            (Partition::AwsIso, ["us", "iso", place, n]) => word(place) && number(n),
            (Partition::AwsIsoB, ["us", "isob", place, n]) => word(place) && number(n),
            (Partition::AwsIsoE, ["eu", "isoe", place, n]) => word(place) && number(n),
            (Partition::AwsIsoF, ["us", "isof", place, n]) => word(place) && number(n),
            (Partition::AwsEusc, ["eusc", country, place, n]) => {
                word(country) && word(place) && number(n)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The region ECR Public's API lives in, whatever region the node is in.
pub(crate) const ECR_PUBLIC_REGION: &str = "us-east-1";

/// The hosts ECR Public serves images from (the second is the dual-stack name).
pub(crate) const ECR_PUBLIC_HOSTS: [&str; 2] = ["public.ecr.aws", "ecr-public.aws.com"];

/// A private ECR registry, as its host names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrivateRegistry {
    pub account: String,
    pub region: String,
    pub partition: Partition,
    /// `dkr.ecr-fips` / `dkr-ecr-fips`: the node must use FIPS endpoints.
    pub fips: bool,
    /// `dkr-ecr.<region>.on.aws`: the node may be IPv6-only, so the APIs are
    /// called on their dual-stack endpoints too.
    pub dual_stack: bool,
}

/// The ECR registry an image is on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registry {
    Private(PrivateRegistry),
    /// ECR Public, whose API is in us-east-1 of the `aws` partition.
    Public,
}

impl Registry {
    pub fn region(&self) -> &str {
        match self {
            Registry::Private(r) => &r.region,
            Registry::Public => ECR_PUBLIC_REGION,
        }
    }

    pub fn partition(&self) -> Partition {
        match self {
            Registry::Private(r) => r.partition,
            Registry::Public => Partition::Aws,
        }
    }

    pub fn fips(&self) -> bool {
        matches!(self, Registry::Private(r) if r.fips)
    }

    pub fn dual_stack(&self) -> bool {
        matches!(self, Registry::Private(r) if r.dual_stack)
    }
}

/// The private ECR host pattern. Group 1 is the account; then either the
/// classic form (`dkr.ecr[-fips].<region>.<suffix>`, groups 2-4) or the
/// dual-stack form (`dkr-ecr[-fips].<region>.<suffix>`, groups 5-7).
const PRIVATE_HOST: &str = concat!(
    r"^([0-9]{12})\.(?:",
    r"dkr\.ecr(-fips)?\.([a-z]{2,4}(?:-[a-z]+){1,3}-[0-9]{1,2})\.",
    r"(amazonaws\.com|amazonaws\.com\.cn|amazonaws\.eu|c2s\.ic\.gov|sc2s\.sgov\.gov|cloud\.adc-e\.uk|csp\.hci\.ic\.gov)",
    r"|",
    r"dkr-ecr(-fips)?\.([a-z]{2,4}(?:-[a-z]+){1,3}-[0-9]{1,2})\.",
    r"(on\.aws|on\.amazonwebservices\.com\.cn)",
    r")$"
);

static PRIVATE_HOST_RE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(PRIVATE_HOST).ok());

/// The partitions a DNS suffix may belong to.
fn suffix_partitions(suffix: &str) -> &'static [Partition] {
    match suffix {
        "amazonaws.com" | "on.aws" => &[Partition::Aws, Partition::AwsUsGov],
        "amazonaws.com.cn" | "on.amazonwebservices.com.cn" => &[Partition::AwsCn],
        "amazonaws.eu" => &[Partition::AwsEusc],
        "c2s.ic.gov" => &[Partition::AwsIso],
        "sc2s.sgov.gov" => &[Partition::AwsIsoB],
        "cloud.adc-e.uk" => &[Partition::AwsIsoE],
        "csp.hci.ic.gov" => &[Partition::AwsIsoF],
        _ => &[],
    }
}

/// Human-readable list of the hosts served, for messages and `--help`.
pub(crate) const SERVED: &str = "ECR private (<account>.dkr.ecr[-fips].<region>.amazonaws.com, .amazonaws.com.cn, .amazonaws.eu, \
     the ISO partitions, and the dual-stack <account>.dkr-ecr[-fips].<region>.on.aws / .on.amazonwebservices.com.cn) \
     and ECR Public (public.ecr.aws, ecr-public.aws.com)";

/// Parses a registry hostname (no port). `None` when it is not an ECR host.
pub fn parse(hostname: &str) -> Option<Registry> {
    let host = hostname.to_ascii_lowercase();
    if ECR_PUBLIC_HOSTS.contains(&host.as_str()) {
        return Some(Registry::Public);
    }
    let re = PRIVATE_HOST_RE.as_ref()?;
    let caps = re.captures(&host)?;
    let group = |i: usize| caps.get(i).map(|m| m.as_str());
    let account = group(1)?.to_string();
    let (fips, region, suffix, dual_stack) = match (group(3), group(6)) {
        (Some(region), _) => (group(2).is_some(), region, group(4)?, false),
        (None, Some(region)) => (group(5).is_some(), region, group(7)?, true),
        (None, None) => return None,
    };
    let partition = suffix_partitions(suffix)
        .iter()
        .copied()
        .find(|p| p.has_region(region))?;
    Some(Registry::Private(PrivateRegistry {
        account,
        region: region.to_string(),
        partition,
        fips,
        dual_stack,
    }))
}

/// Parses a registry as the image names it (`host[:port]`). ECR serves
/// registries on the default HTTPS port only, so a host with any port, even
/// `:443`, is some other registry (as for Azure and Google): `None`.
pub(crate) fn parse_registry(registry: &str) -> Option<Registry> {
    match wicp_kubelet::request::image::split_port(registry) {
        (hostname, None) => parse(hostname),
        (_, Some(_)) => None,
    }
}

/// Like [`parse_registry`], with the error an admin sees for any other
/// registry.
pub fn require(registry: &str) -> Result<Registry> {
    if let (hostname, Some(_)) = wicp_kubelet::request::image::split_port(registry)
        && parse(hostname).is_some()
    {
        return Err(Error::registry(format!(
            "registry {} names an ECR host with a port; ECR serves registries on the default HTTPS port only, so the token is not sent there",
            quote(registry)
        ))
        .fix("write the image without the port (ECR images are <account>.dkr.ecr.<region>.amazonaws.com/<repository>), or route this registry to another provider"));
    }
    let hostname = registry;
    parse(hostname).ok_or_else(|| {
        Error::registry(format!(
            "registry {} is not an ECR registry: expected {SERVED}, with a 12-digit account and a region of the partition the suffix names",
            quote(hostname)
        ))
        .fix("narrow this provider's matchImages to ECR hosts (e.g. *.dkr.ecr.*.amazonaws.com, public.ecr.aws), or route this registry to another provider")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private(
        account: &str,
        region: &str,
        partition: Partition,
        fips: bool,
        dual_stack: bool,
    ) -> Option<Registry> {
        Some(Registry::Private(PrivateRegistry {
            account: account.into(),
            region: region.into(),
            partition,
            fips,
            dual_stack,
        }))
    }

    #[test]
    fn a_port_makes_it_another_registry() {
        for registry in [
            "123456789012.dkr.ecr.us-east-1.amazonaws.com:5000",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com:443",
            "public.ecr.aws:8443",
        ] {
            assert_eq!(parse_registry(registry), None, "{registry}");
            let err = require(registry).unwrap_err().to_string();
            assert!(err.contains("names an ECR host with a port"), "{err}");
        }
        assert!(parse_registry("public.ecr.aws").is_some());
        assert!(require("123456789012.dkr.ecr.us-east-1.amazonaws.com").is_ok());
        let err = require("registry.example:5000").unwrap_err().to_string();
        assert!(err.contains("is not an ECR registry"), "{err}");
    }

    #[test]
    fn the_pattern_compiles() {
        assert!(PRIVATE_HOST_RE.is_some());
    }

    #[test]
    fn ecr_hosts_across_partitions() {
        use Partition::*;
        let a = "123456789012";
        let table = [
            // Commercial, classic and FIPS.
            (
                "123456789012.dkr.ecr.us-east-1.amazonaws.com",
                "us-east-1",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.us-west-2.amazonaws.com",
                "us-west-2",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.eu-central-1.amazonaws.com",
                "eu-central-1",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.eu-south-2.amazonaws.com",
                "eu-south-2",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.ap-southeast-5.amazonaws.com",
                "ap-southeast-5",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.ap-northeast-3.amazonaws.com",
                "ap-northeast-3",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.sa-east-1.amazonaws.com",
                "sa-east-1",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.ca-west-1.amazonaws.com",
                "ca-west-1",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.me-central-1.amazonaws.com",
                "me-central-1",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.af-south-1.amazonaws.com",
                "af-south-1",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.il-central-1.amazonaws.com",
                "il-central-1",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.mx-central-1.amazonaws.com",
                "mx-central-1",
                Aws,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr-fips.us-east-1.amazonaws.com",
                "us-east-1",
                Aws,
                true,
                false,
            ),
            (
                "123456789012.dkr.ecr-fips.ca-central-1.amazonaws.com",
                "ca-central-1",
                Aws,
                true,
                false,
            ),
            // Upper case is the same host.
            (
                "123456789012.DKR.ECR.US-EAST-2.AMAZONAWS.COM",
                "us-east-2",
                Aws,
                false,
                false,
            ),
            // GovCloud.
            (
                "123456789012.dkr.ecr.us-gov-west-1.amazonaws.com",
                "us-gov-west-1",
                AwsUsGov,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr-fips.us-gov-east-1.amazonaws.com",
                "us-gov-east-1",
                AwsUsGov,
                true,
                false,
            ),
            // China.
            (
                "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn",
                "cn-north-1",
                AwsCn,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.cn-northwest-1.amazonaws.com.cn",
                "cn-northwest-1",
                AwsCn,
                false,
                false,
            ),
            // European Sovereign Cloud.
            (
                "123456789012.dkr.ecr.eusc-de-east-1.amazonaws.eu",
                "eusc-de-east-1",
                AwsEusc,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr-fips.eusc-de-east-1.amazonaws.eu",
                "eusc-de-east-1",
                AwsEusc,
                true,
                false,
            ),
            // ISO partitions.
            (
                "123456789012.dkr.ecr.us-iso-east-1.c2s.ic.gov",
                "us-iso-east-1",
                AwsIso,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.us-iso-west-1.c2s.ic.gov",
                "us-iso-west-1",
                AwsIso,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr-fips.us-iso-east-1.c2s.ic.gov",
                "us-iso-east-1",
                AwsIso,
                true,
                false,
            ),
            (
                "123456789012.dkr.ecr.us-isob-east-1.sc2s.sgov.gov",
                "us-isob-east-1",
                AwsIsoB,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.eu-isoe-west-1.cloud.adc-e.uk",
                "eu-isoe-west-1",
                AwsIsoE,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.us-isof-south-1.csp.hci.ic.gov",
                "us-isof-south-1",
                AwsIsoF,
                false,
                false,
            ),
            (
                "123456789012.dkr.ecr.us-isof-east-1.csp.hci.ic.gov",
                "us-isof-east-1",
                AwsIsoF,
                false,
                false,
            ),
            // Dual-stack.
            (
                "123456789012.dkr-ecr.us-east-1.on.aws",
                "us-east-1",
                Aws,
                false,
                true,
            ),
            (
                "123456789012.dkr-ecr.eu-west-1.on.aws",
                "eu-west-1",
                Aws,
                false,
                true,
            ),
            (
                "123456789012.dkr-ecr-fips.us-east-2.on.aws",
                "us-east-2",
                Aws,
                true,
                true,
            ),
            (
                "123456789012.dkr-ecr.us-gov-west-1.on.aws",
                "us-gov-west-1",
                AwsUsGov,
                false,
                true,
            ),
            (
                "123456789012.dkr-ecr-fips.us-gov-east-1.on.aws",
                "us-gov-east-1",
                AwsUsGov,
                true,
                true,
            ),
            (
                "123456789012.dkr-ecr.cn-north-1.on.amazonwebservices.com.cn",
                "cn-north-1",
                AwsCn,
                false,
                true,
            ),
            (
                "123456789012.dkr-ecr.cn-northwest-1.on.amazonwebservices.com.cn",
                "cn-northwest-1",
                AwsCn,
                false,
                true,
            ),
        ];
        assert!(table.len() >= 30);
        for (host, region, partition, fips, dual) in table {
            assert_eq!(
                parse(host),
                private(a, region, partition, fips, dual),
                "{host}"
            );
        }
        assert_eq!(parse("public.ecr.aws"), Some(Registry::Public));
        assert_eq!(parse("ecr-public.aws.com"), Some(Registry::Public));
        assert_eq!(parse("Public.ECR.aws"), Some(Registry::Public));
    }

    #[test]
    fn near_misses_are_refused() {
        for host in [
            // Suffix continues into someone else's domain.
            "123456789012.dkr.ecr.us-east-1.amazonaws.com.evil.io",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com.",
            "123456789012.dkr.ecr.us-east-1.amazonaws.hacker.com",
            "123456789012.dkr.ecr.us-east-1.amazonaws.lol",
            "123456789012.dkr.ecr.us-east-1.amazonaws.gov",
            "evil.io.123456789012.dkr.ecr.us-east-1.amazonaws.com",
            "x123456789012.dkr.ecr.us-east-1.amazonaws.com",
            // Account: 11 and 13 digits, not digits.
            "12345678901.dkr.ecr.us-east-1.amazonaws.com",
            "1234567890123.dkr.ecr.us-east-1.amazonaws.com",
            "12345678901a.dkr.ecr.us-east-1.amazonaws.com",
            // Missing or malformed region.
            "123456789012.dkr.ecr.amazonaws.com",
            "123456789012.dkr.ecr..amazonaws.com",
            "123456789012.dkr.ecr.us_east_1.amazonaws.com",
            "123456789012.dkr.ecr.us-east.amazonaws.com",
            "123456789012.dkr.ecr.useast1.amazonaws.com",
            // Region of another partition than the suffix.
            "123456789012.dkr.ecr.cn-north-1.amazonaws.com",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com.cn",
            "123456789012.dkr.ecr.us-iso-east-1.amazonaws.com",
            "123456789012.dkr.ecr.us-east-1.c2s.ic.gov",
            "123456789012.dkr.ecr.us-east-1.amazonaws.eu",
            "123456789012.dkr.ecr.xx-east-1.amazonaws.com",
            // Wrong service labels, or the forms mixed.
            "123456789012.dog.ecr.us-east-1.amazonaws.com",
            "123456789012.dkr.cat.us-east-1.amazonaws.com",
            "123456789012.us-east-1.amazonaws.com",
            "123456789012.dkr-ecr.us-east-1.amazonaws.com",
            "123456789012.dkr.ecr.us-east-1.on.aws",
            "123456789012.dkr.ecr-fipsy.us-east-1.amazonaws.com",
            "123456789012.api.ecr.us-east-1.amazonaws.com",
            // Lookalike public hosts.
            "public.ecr.aws.evil.io",
            "evilpublic.ecr.aws",
            "ecr-public.aws.com.evil.io",
            "gallery.ecr.aws",
            // Not ECR at all.
            "registry.k8s.io",
            "docker.io",
            "",
        ] {
            assert_eq!(parse(host), None, "{host} must not be taken for ECR");
        }
    }

    #[test]
    fn the_refusal_says_what_is_expected() {
        let e = require("123456789012.dkr.ecr.us-east-1.amazonaws.com.evil.io").unwrap_err();
        assert_eq!(e.kind(), wicp_base::error::Kind::Registry);
        let text = e.to_string();
        assert!(text.contains("is not an ECR registry"), "{text}");
        assert!(text.contains("dkr.ecr"), "{text}");
        assert!(e.remedy().is_some());
    }

    #[test]
    fn partitions_know_their_regions() {
        assert!(Partition::Aws.has_region("us-east-1"));
        assert!(!Partition::Aws.has_region("us-gov-west-1"));
        assert!(Partition::AwsUsGov.has_region("us-gov-west-1"));
        assert!(!Partition::AwsCn.has_region("us-east-1"));
        assert!(Partition::AwsEusc.has_region("eusc-de-east-1"));
        assert!(!Partition::Aws.has_region("us-east-123"));
        for p in Partition::ALL {
            assert_eq!(Partition::from_name(p.name()), Some(p));
        }
    }
}
