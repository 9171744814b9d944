//! Where STS, ECR, ECR Public and the Pod Identity Agent are reached.
//!
//! Without overrides the SDK's own endpoint rules decide, from the region
//! and partition the registry host implies plus its FIPS and dual-stack
//! markers; we run those rules while planning so the plan (and the cache
//! key) names the exact URL the exchange will call.
//!
//! The overrides are the SDK's standard variables, which we read ourselves
//! because we do not load aws-config (no profile files are read on a pull):
//! `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL_ECR`,
//! `AWS_ENDPOINT_URL_ECR_PUBLIC`, then `AWS_ENDPOINT_URL` for all three;
//! `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true` turns them off. They exist for
//! private VPC endpoints and tests, so an override that names an AWS region
//! must agree with the registry: an ECR token only works in the region that
//! issued it, and STS credentials only in their own partition.

use std::future::Future;
use std::net::IpAddr;
use std::task::{Context, Poll, Waker};

use super::host::{Partition, Registry};
use wicp_base::error::{Error, Fact, Result, Setting, quote};
use wicp_net::{http, metadata};

/// An AWS API the exchange calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Sts,
    Ecr,
    EcrPublic,
}

impl Service {
    /// The service-specific override variable.
    pub(crate) fn env_var(self) -> &'static str {
        match self {
            Service::Sts => "AWS_ENDPOINT_URL_STS",
            Service::Ecr => "AWS_ENDPOINT_URL_ECR",
            Service::EcrPublic => "AWS_ENDPOINT_URL_ECR_PUBLIC",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Service::Sts => "STS",
            Service::Ecr => "ECR",
            Service::EcrPublic => "ECR Public",
        }
    }

    /// The service's stable name in its errors' `service` fact, apart
    /// from Google's STS.
    pub fn fact(self) -> &'static str {
        match self {
            Service::Sts => "AWS STS",
            Service::Ecr => "ECR",
            Service::EcrPublic => "ECR Public",
        }
    }
}

/// The global override variable.
const ENDPOINT_URL: &str = "AWS_ENDPOINT_URL";
const IGNORE_CONFIGURED: &str = "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS";
/// Where EKS Pod Identity credentials come from, if not the default agent.
const FULL_URI: &str = "AWS_CONTAINER_CREDENTIALS_FULL_URI";

/// The EKS Pod Identity Agent on every node (link-local, host network).
/// The SDKs' IMDS settings (docs.aws.amazon.com/sdkref/latest/guide/
/// feature-imds-credentials.html): a full endpoint URI, or the address
/// family of the default one, and a switch that turns IMDS off.
const IMDS_ENDPOINT: &str = "AWS_EC2_METADATA_SERVICE_ENDPOINT";
const IMDS_ENDPOINT_MODE: &str = "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE";
const IMDS_DISABLED: &str = "AWS_EC2_METADATA_DISABLED";

/// IMDS on IPv4, and on IPv6 (Nitro instances, once enabled).
pub(crate) const DEFAULT_IMDS: &str = "http://169.254.169.254";
const DEFAULT_IMDS_V6: &str = "http://[fd00:ec2::254]";

pub const DEFAULT_AGENT: &str = "http://169.254.170.23/v1/credentials";

/// The AWS_* variables the exchanger honours, read once at start-up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Environment {
    vars: Vec<(&'static str, String)>,
}

impl Environment {
    const NAMES: [&'static str; 9] = [
        ENDPOINT_URL,
        "AWS_ENDPOINT_URL_STS",
        "AWS_ENDPOINT_URL_ECR",
        "AWS_ENDPOINT_URL_ECR_PUBLIC",
        IGNORE_CONFIGURED,
        FULL_URI,
        IMDS_ENDPOINT,
        IMDS_ENDPOINT_MODE,
        IMDS_DISABLED,
    ];

    /// Reads the variables through `lookup`; empty values count as unset,
    /// as the SDKs treat them.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let vars = Self::NAMES
            .iter()
            .filter_map(|&name| {
                lookup(name)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| (name, v))
            })
            .collect();
        Environment { vars }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The override for `service` and the variable it came from.
    fn endpoint_override(&self, service: Service) -> Option<(&'static str, &str)> {
        if self
            .get(IGNORE_CONFIGURED)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        {
            return None;
        }
        self.get(service.env_var())
            .map(|v| (service.env_var(), v))
            .or_else(|| self.get(ENDPOINT_URL).map(|v| (ENDPOINT_URL, v)))
    }

    fn agent_override(&self) -> Option<&str> {
        self.get(FULL_URI)
    }
}

/// A resolved endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub url: String,
    /// The variable that set it, or `None` for the SDK's own rules.
    pub from: Option<&'static str>,
}

impl Endpoint {
    /// For plan inputs and messages.
    pub fn describe(&self) -> String {
        match self.from {
            Some(var) => format!("{} (from {var})", self.url),
            None => self.url.clone(),
        }
    }
}

/// The endpoint of `service` for `registry`.
pub fn resolve(service: Service, registry: &Registry, env: &Environment) -> Result<Endpoint> {
    if let Some((var, value)) = env.endpoint_override(service) {
        let url = http::endpoint_override(Setting::Variable(var), value)?;
        check_override(service, var, &url, registry)?;
        return Ok(Endpoint {
            url,
            from: Some(var),
        });
    }
    let url = sdk_rules(service, registry)?;
    Ok(Endpoint { url, from: None })
}

/// Runs the endpoint rules of one SDK crate (`aws_sdk_sts`, `aws_sdk_ecr`,
/// `aws_sdk_ecrpublic`: different types, the same shape) for a region,
/// FIPS and dual-stack choice, plus that service's own parameters.
macro_rules! rules {
    ($sdk:ident, $region:expr, $fips:expr, $dual_stack:expr $(, $param:ident($value:expr))*) => {{
        use $sdk::config::endpoint::{DefaultResolver, Params, ResolveEndpoint};
        Params::builder()
            .region($region.to_string())
            .use_fips($fips)
            .use_dual_stack($dual_stack)
            $(.$param($value))*
            .build()
            .map_err(|e| e.to_string())
            .and_then(|p| {
                now(ResolveEndpoint::resolve_endpoint(&DefaultResolver::new(), &p))
                    .map(|e| e.url().to_string())
            })
    }};
}

/// Runs the SDK's endpoint rules for `service` in the registry's region.
fn sdk_rules(service: Service, registry: &Registry) -> Result<String> {
    let region = registry.region().to_string();
    let (fips, dual_stack) = (registry.fips(), registry.dual_stack());
    let resolved = match service {
        Service::Sts => rules!(
            aws_sdk_sts,
            &region,
            fips,
            dual_stack,
            use_global_endpoint(false)
        ),
        Service::Ecr => rules!(aws_sdk_ecr, &region, fips, dual_stack),
        // ECR Public has one endpoint, in us-east-1, in no other form.
        Service::EcrPublic => rules!(aws_sdk_ecrpublic, &region, false, false),
    };
    resolved.map_err(|why| {
        let mut form = Vec::new();
        if fips {
            form.push("FIPS");
        }
        if dual_stack {
            form.push("dual-stack");
        }
        let form = if form.is_empty() {
            String::new()
        } else {
            format!("{} ", form.join(" "))
        };
        Error::config(format!(
            "the AWS SDK has no {form}{} endpoint for region {region}: {}",
            service.name(),
            quote(&why)
        ))
        .fix(format!(
            "set {} to the endpoint to use (e.g. a VPC endpoint of {region})",
            service.env_var()
        ))
    })
}

/// The SDK's endpoint resolvers do their work synchronously and return a
/// future that is already complete; this takes its value without a runtime.
fn now<T, E: ToString>(
    future: impl Future<Output = std::result::Result<T, E>>,
) -> std::result::Result<T, String> {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(result) => result.map_err(|e| e.to_string()),
        Poll::Pending => Err("the endpoint resolver did not answer synchronously".into()),
    }
}

/// The DNS suffixes of AWS endpoints, public and VPC, and their partitions.
const AWS_SUFFIXES: [(&str, &[Partition]); 10] = [
    (".amazonaws.com", &[Partition::Aws, Partition::AwsUsGov]),
    (".api.aws", &[Partition::Aws, Partition::AwsUsGov]),
    (".amazonaws.com.cn", &[Partition::AwsCn]),
    (".api.amazonwebservices.com.cn", &[Partition::AwsCn]),
    (".amazonaws.eu", &[Partition::AwsEusc]),
    (".c2s.ic.gov", &[Partition::AwsIso]),
    (".sc2s.sgov.gov", &[Partition::AwsIsoB]),
    (".cloud.adc-e.uk", &[Partition::AwsIsoE]),
    (".csp.hci.ic.gov", &[Partition::AwsIsoF]),
    (".on.aws", &[Partition::Aws, Partition::AwsUsGov]),
];

/// The region and partition an AWS endpoint host names
/// (`api.ecr.us-west-2.amazonaws.com`,
/// `vpce-0a1b.sts.eu-west-1.vpce.amazonaws.com`), or `None` for a host that
/// is not an AWS endpoint name (an IP, a private DNS name).
fn implied_region(host: &str) -> Option<(String, Partition)> {
    let host = host.to_ascii_lowercase();
    let partitions = AWS_SUFFIXES
        .iter()
        .filter(|(suffix, _)| host.ends_with(suffix))
        .flat_map(|(_, p)| p.iter().copied())
        .collect::<Vec<_>>();
    host.split('.').find_map(|label| {
        partitions
            .iter()
            .find(|p| p.has_region(label))
            .map(|p| (label.to_string(), *p))
    })
}

/// Refuses an override that names another region (ECR) or partition (STS)
/// than the registry's.
fn check_override(
    service: Service,
    var: &'static str,
    url: &str,
    registry: &Registry,
) -> Result<()> {
    let Some((region, partition)) = http::endpoint_host(url).and_then(|h| implied_region(&h))
    else {
        return Ok(());
    };
    let region_matters = service != Service::Sts;
    if region_matters && region != registry.region() {
        return Err(Error::config(format!(
            "{var} is {url}, an endpoint in region {region}, but the registry is in region {}: {} tokens only work in the region that issued them",
            registry.region(),
            service.name()
        ))
        .fix(format!(
            "point {var} at an endpoint in {} (e.g. that region's VPC endpoint), or unset it",
            registry.region()
        ))
        .with(Fact::Flag(Setting::Variable(var))));
    }
    if partition != registry.partition() {
        return Err(Error::config(format!(
            "{var} is {url}, an endpoint in partition {partition} (region {region}), but the registry is in partition {}",
            registry.partition()
        ))
        .fix(format!(
            "point {var} at an endpoint of the {} partition, or unset it",
            registry.partition()
        ))
        .with(Fact::Flag(Setting::Variable(var))));
    }
    Ok(())
}

/// The Pod Identity Agent URL: the default link-local agent, or
/// `AWS_CONTAINER_CREDENTIALS_FULL_URI`. The service account token goes
/// there in clear text over `http://`, so, as the AWS SDKs do, plain HTTP is
/// accepted only for loopback and the EKS/ECS link-local agent addresses.
pub fn agent(env: &Environment) -> Result<Endpoint> {
    let Some(value) = env.agent_override() else {
        return Ok(Endpoint {
            url: DEFAULT_AGENT.to_string(),
            from: None,
        });
    };
    let url = http::endpoint_override(Setting::Variable(FULL_URI), value)?;
    if url.starts_with("http://") {
        // The host the client will connect to, by the parser it uses.
        let host = http::endpoint_host(&url).unwrap_or_default();
        let allowed = match host.parse::<IpAddr>() {
            Ok(ip) => {
                ip.is_loopback()
                    || ["169.254.170.23", "169.254.170.2", "fd00:ec2::23"]
                        .iter()
                        .any(|a| a.parse::<IpAddr>().is_ok_and(|a| a == ip))
            }
            Err(_) => host.eq_ignore_ascii_case("localhost"),
        };
        if !allowed {
            return Err(Error::config(format!(
                "{FULL_URI} is {}, plain HTTP to a host that is not the node's Pod Identity Agent",
                quote(value)
            ))
            .fix(format!(
                "use https://, or an http:// URL on loopback or the agent's address ({DEFAULT_AGENT}, http://[fd00:ec2::23]/v1/credentials)"
            ))
            .with(Fact::Flag(Setting::Variable(FULL_URI))));
        }
    }
    Ok(Endpoint {
        url,
        from: Some(FULL_URI),
    })
}

/// Where IMDS is, read as the SDKs read it: `AWS_EC2_METADATA_SERVICE_ENDPOINT`
/// first (it must be a valid URI), else the address of
/// `AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE` (`IPv4`, the default, or
/// `IPv6`, case-insensitive). `AWS_EC2_METADATA_DISABLED=true` turns IMDS
/// off, and with it the node identity.
pub fn imds(env: &Environment) -> Result<metadata::Service> {
    if env
        .get(IMDS_DISABLED)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    {
        return Err(Error::config(format!(
            "{IMDS_DISABLED} is true, so the instance metadata service, and with it the node's identity, is off"
        ))
        .fix(format!(
            "unset {IMDS_DISABLED} in the kubelet's environment and the provider entry's env, or use --fallback none"
        )));
    }
    let (base, source) = match (env.get(IMDS_ENDPOINT), env.get(IMDS_ENDPOINT_MODE)) {
        (Some(value), _) => (
            http::endpoint_override(Setting::Variable(IMDS_ENDPOINT), value)?,
            Some(Setting::Variable(IMDS_ENDPOINT)),
        ),
        (None, Some(mode)) if mode.trim().eq_ignore_ascii_case("ipv6") => (
            DEFAULT_IMDS_V6.to_string(),
            Some(Setting::Variable(IMDS_ENDPOINT_MODE)),
        ),
        (None, Some(mode)) if mode.trim().eq_ignore_ascii_case("ipv4") => {
            (DEFAULT_IMDS.to_string(), None)
        }
        (None, Some(mode)) => {
            return Err(Error::config(format!(
                "{IMDS_ENDPOINT_MODE} is {}, neither IPv4 nor IPv6",
                quote(mode)
            ))
            .fix(format!(
                "set {IMDS_ENDPOINT_MODE} to IPv4 or IPv6, or unset it"
            )));
        }
        (None, None) => (DEFAULT_IMDS.to_string(), None),
    };
    Ok(metadata::Service {
        name: "the EC2 instance metadata service (IMDSv2)",
        base,
        source,
        absent_fix: "--fallback node needs an EC2 instance: run on EC2 (or set AWS_EC2_METADATA_SERVICE_ENDPOINT), \
             or use --fallback none and give every pod's service account a role annotation",
        silent_fix: "the IMDSv2 hop limit is too low for this network namespace: the kubelet runs the plugin on the host \
             network, where a hop limit of 1 is enough; from a pod (explain, a DaemonSet) raise HttpPutResponseHopLimit \
             to 2 (aws ec2 modify-instance-metadata-options --http-put-response-hop-limit 2)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::host;

    fn env(pairs: &[(&str, &str)]) -> Environment {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Environment::from_lookup(|name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    fn registry(h: &str) -> Registry {
        host::parse(h).unwrap()
    }

    #[test]
    fn sdk_rules_follow_region_partition_fips_and_dual_stack() {
        let none = Environment::default();
        for (h, sts, ecr) in [
            (
                "123456789012.dkr.ecr.us-west-2.amazonaws.com",
                "https://sts.us-west-2.amazonaws.com",
                "https://api.ecr.us-west-2.amazonaws.com",
            ),
            (
                "123456789012.dkr.ecr-fips.us-east-1.amazonaws.com",
                "https://sts-fips.us-east-1.amazonaws.com",
                "https://api.ecr-fips.us-east-1.amazonaws.com",
            ),
            (
                "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn",
                "https://sts.cn-north-1.amazonaws.com.cn",
                "https://api.ecr.cn-north-1.amazonaws.com.cn",
            ),
            (
                "123456789012.dkr.ecr.us-gov-west-1.amazonaws.com",
                "https://sts.us-gov-west-1.amazonaws.com",
                "https://api.ecr.us-gov-west-1.amazonaws.com",
            ),
            (
                "123456789012.dkr-ecr.eu-west-1.on.aws",
                "https://sts.eu-west-1.api.aws",
                "https://ecr.eu-west-1.api.aws",
            ),
            (
                "123456789012.dkr.ecr-fips.us-gov-east-1.amazonaws.com",
                "https://sts.us-gov-east-1.amazonaws.com",
                "https://api.ecr-fips.us-gov-east-1.amazonaws.com",
            ),
            (
                "123456789012.dkr.ecr.eusc-de-east-1.amazonaws.eu",
                "https://sts.eusc-de-east-1.amazonaws.eu",
                "https://api.ecr.eusc-de-east-1.amazonaws.eu",
            ),
            (
                "123456789012.dkr-ecr-fips.us-east-2.on.aws",
                "https://sts-fips.us-east-2.api.aws",
                "https://ecr-fips.us-east-2.api.aws",
            ),
            (
                "123456789012.dkr-ecr.cn-north-1.on.amazonwebservices.com.cn",
                "https://sts.cn-north-1.api.amazonwebservices.com.cn",
                "https://ecr.cn-north-1.api.amazonwebservices.com.cn",
            ),
            (
                "123456789012.dkr.ecr.us-iso-east-1.c2s.ic.gov",
                "https://sts.us-iso-east-1.c2s.ic.gov",
                "https://api.ecr.us-iso-east-1.c2s.ic.gov",
            ),
        ] {
            let r = registry(h);
            assert_eq!(resolve(Service::Sts, &r, &none).unwrap().url, sts, "{h}");
            assert_eq!(resolve(Service::Ecr, &r, &none).unwrap().url, ecr, "{h}");
        }
        assert_eq!(
            resolve(Service::EcrPublic, &Registry::Public, &none)
                .unwrap()
                .url,
            "https://api.ecr-public.us-east-1.amazonaws.com"
        );
        assert_eq!(
            resolve(Service::Sts, &Registry::Public, &none).unwrap().url,
            "https://sts.us-east-1.amazonaws.com"
        );
    }

    #[test]
    fn overrides_service_specific_first_then_global() {
        let r = registry("123456789012.dkr.ecr.us-east-1.amazonaws.com");
        let e = env(&[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000/"),
            ("AWS_ENDPOINT_URL_STS", "https://sts.internal.example"),
        ]);
        let sts = resolve(Service::Sts, &r, &e).unwrap();
        assert_eq!(sts.url, "https://sts.internal.example");
        assert_eq!(sts.from, Some("AWS_ENDPOINT_URL_STS"));
        let ecr = resolve(Service::Ecr, &r, &e).unwrap();
        assert_eq!(ecr.url, "http://127.0.0.1:5000");
        assert_eq!(
            ecr.describe(),
            "http://127.0.0.1:5000 (from AWS_ENDPOINT_URL)"
        );
        // Turned off by the SDK's standard switch.
        let off = env(&[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000/"),
            ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
        ]);
        assert_eq!(resolve(Service::Ecr, &r, &off).unwrap().from, None);
        // Empty is unset.
        assert_eq!(
            resolve(Service::Ecr, &r, &env(&[("AWS_ENDPOINT_URL_ECR", "")]))
                .unwrap()
                .from,
            None
        );
        // Malformed is an error naming the variable.
        let bad = resolve(
            Service::Ecr,
            &r,
            &env(&[("AWS_ENDPOINT_URL_ECR", "api.ecr")]),
        )
        .unwrap_err();
        assert!(bad.to_string().contains("AWS_ENDPOINT_URL_ECR"), "{bad}");
    }

    #[test]
    fn overrides_that_contradict_the_registry_are_refused() {
        let r = registry("123456789012.dkr.ecr.us-east-1.amazonaws.com");
        let public = Registry::Public;
        // (service, registry, variable, URL, what the refusal names; None:
        // accepted).
        let cases = [
            (
                Service::Ecr,
                &r,
                "AWS_ENDPOINT_URL_ECR",
                "https://api.ecr.us-west-2.amazonaws.com",
                Some("region us-west-2"),
            ),
            (
                Service::Ecr,
                &r,
                "AWS_ENDPOINT_URL_ECR",
                "https://vpce-0a1b2c3d-x.api.ecr.eu-west-1.vpce.amazonaws.com",
                Some("region us-east-1"),
            ),
            // The same region's VPC endpoint is fine.
            (
                Service::Ecr,
                &r,
                "AWS_ENDPOINT_URL_ECR",
                "https://vpce-0a1b2c3d-x.api.ecr.us-east-1.vpce.amazonaws.com",
                None,
            ),
            // STS credentials work in every region of the partition: the
            // node's own region's STS endpoint is allowed...
            (
                Service::Sts,
                &r,
                "AWS_ENDPOINT_URL_STS",
                "https://sts.eu-west-1.amazonaws.com",
                None,
            ),
            // ... but not another partition's.
            (
                Service::Sts,
                &r,
                "AWS_ENDPOINT_URL_STS",
                "https://sts.cn-north-1.amazonaws.com.cn",
                Some("partition aws-cn"),
            ),
            // ECR Public is in us-east-1.
            (
                Service::EcrPublic,
                &public,
                "AWS_ENDPOINT_URL",
                "https://api.ecr-public.us-west-2.amazonaws.com",
                Some("us-west-2"),
            ),
        ];
        for (service, registry, variable, url, refused) in cases {
            let resolved = resolve(service, registry, &env(&[(variable, url)]));
            match refused {
                Some(named) => {
                    let e = resolved.unwrap_err().to_string();
                    assert!(e.contains(named), "{url}: {e}");
                }
                None => assert!(resolved.is_ok(), "{url}"),
            }
        }
        // Hosts that are not AWS endpoint names imply nothing.
        for url in [
            "http://127.0.0.1:5000",
            "https://ecr.corp.example:8443/x",
            "http://[::1]:9",
        ] {
            let any = env(&[("AWS_ENDPOINT_URL_ECR", url)]);
            assert!(resolve(Service::Ecr, &r, &any).is_ok(), "{url}");
        }
    }

    #[test]
    fn implied_regions() {
        assert_eq!(
            implied_region("api.ecr.us-west-2.amazonaws.com"),
            Some(("us-west-2".into(), Partition::Aws))
        );
        assert_eq!(
            implied_region("sts.us-gov-east-1.amazonaws.com"),
            Some(("us-gov-east-1".into(), Partition::AwsUsGov))
        );
        assert_eq!(
            implied_region("ecr.eu-west-1.api.aws"),
            Some(("eu-west-1".into(), Partition::Aws))
        );
        assert_eq!(implied_region("us-west-2.example.com"), None);
        assert_eq!(implied_region("127.0.0.1"), None);
    }

    #[test]
    fn agent_endpoint() {
        let none = agent(&Environment::default()).unwrap();
        assert_eq!(none.url, DEFAULT_AGENT);
        assert_eq!(none.from, None);
        for ok in [
            "http://127.0.0.1:8080/v1/credentials",
            "http://[fd00:ec2::23]/v1/credentials",
            "http://169.254.170.23/v1/credentials",
            "http://localhost:1/x",
            "https://agent.example.com/creds",
        ] {
            let e = agent(&env(&[(FULL_URI, ok)])).unwrap();
            assert_eq!(e.from, Some(FULL_URI), "{ok}");
        }
        for bad in [
            "http://10.0.0.5/creds",
            "http://agent.example.com/",
            "ftp://x",
            // The client connects to the host before the backslash.
            "http://198.51.100.7:8080\\@127.0.0.1/v1/credentials",
            "http://198.51.100.7:8080/\\@127.0.0.1/v1/credentials",
            "http://u:p@127.0.0.1/v1/credentials",
            "http://127.0.0.1.nip.io/v1/credentials",
        ] {
            let e = agent(&env(&[(FULL_URI, bad)])).unwrap_err();
            assert!(e.to_string().contains(FULL_URI), "{e}");
        }
    }
}
