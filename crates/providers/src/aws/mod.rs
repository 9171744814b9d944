//! AWS: a service account's identity to an ECR (or ECR Public) login.
//!
//! Two ways to become an AWS identity:
//! - `web-identity` (IRSA style): STS AssumeRoleWithWebIdentity with the
//!   service account token (audience `sts.amazonaws.com`) and the role ARN
//!   the service account's annotation names;
//! - `pod-identity`: the node's EKS Pod Identity Agent trades the token
//!   (audience `pods.eks.amazonaws.com`) for the credentials of the role
//!   associated with the service account in EKS.
//!
//! Then ECR GetAuthorizationToken, with those temporary credentials, in the
//! region and partition the registry host names, returns the registry login
//! (user `AWS`). Profiles and the SDK's credential chain are never read.
//!
//! With `--fallback node` a pod whose service account did not opt in (no
//! role annotation under web-identity; no token at all under either
//! source) gets the node's identity: the instance profile's credentials
//! from IMDSv2 ([`imds`]), then the same ECR call.
//!
//! The exchanges, each one function to read in order: [`sts_then_ecr`]
//! (web-identity), [`agent_then_ecr`] (pod-identity), [`imds_then_ecr`]
//! (the node's), and [`login`], the ECR step they end with. Module map: [`host`] parses registry hosts,
//! [`identity`] validates role ARNs and derives session names,
//! [`endpoints`] decides where each API is called, [`sdk`] makes the STS
//! and ECR calls, [`pod_identity`] talks to the agent, [`imds`] reads the
//! node's instance profile.

pub mod endpoints;
pub mod host;
pub mod identity;
pub mod imds;
pub mod pod_identity;
pub mod sdk;

use std::time::Duration;

use crate::Input;
use crate::fallback::{self, Fallback, Whose};
use crate::{Context, Credential, Exchanger, Plan, Provider};
use std::sync::Arc;
use wicp_base::duration;
use wicp_base::error::{Error, Result};
use wicp_kubelet::request::image::ImageRef;
use wicp_net::inputs::Inputs;
use wicp_net::{self as net, http};

use endpoints::{Environment, Service};
use host::Registry;
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage, defaulted};

/// The audience of the token for STS AssumeRoleWithWebIdentity: the client
/// ID EKS registers for a cluster's IAM OIDC provider.
const STS_AUDIENCE: &str = "sts.amazonaws.com";

/// STS's bounds on `DurationSeconds`.
const MIN_SESSION: Duration = Duration::from_secs(900);
const MAX_SESSION: Duration = Duration::from_secs(43_200);

/// How the service account becomes an AWS identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialSource {
    /// STS AssumeRoleWithWebIdentity with the role from an annotation.
    WebIdentity,
    /// The node's EKS Pod Identity Agent.
    PodIdentity,
}

impl wicp_base::flags::Choice for CredentialSource {
    const CHOICES: &'static [(&'static str, Self)] = &[
        ("web-identity", CredentialSource::WebIdentity),
        ("pod-identity", CredentialSource::PodIdentity),
    ];
}

impl CredentialSource {
    pub fn name(self) -> &'static str {
        match self {
            CredentialSource::WebIdentity => "web-identity",
            CredentialSource::PodIdentity => "pod-identity",
        }
    }
}

/// `--aws-role-arn-annotation`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static AWS_ROLE_ARN_ANNOTATION: FlagSpec = FlagSpec {
    long: "aws-role-arn-annotation",
    env: "WICP_AWS_ROLE_ARN_ANNOTATION",
    takes: Takes::List,
    value: "KEY",
    // identity::DEFAULT_ROLE_ANNOTATIONS, which a test compares.
    default: "eks.amazonaws.com/ecr-role-arn,eks.amazonaws.com/role-arn",
    help: "Service account annotation holding the IAM role ARN (aws \
        web-identity only). Repeatable, tried in order; replaces the default \
        list. The kubelet passes only the keys listed in the provider \
        entry's tokenAttributes.",
};

/// `--aws-credential-source`.
pub(crate) static AWS_CREDENTIAL_SOURCE: FlagSpec = FlagSpec {
    long: "aws-credential-source",
    env: "WICP_AWS_CREDENTIAL_SOURCE",
    takes: Takes::One,
    value: "SOURCE",
    default: "web-identity",
    help: "How the service account becomes an AWS identity (aws only): \
        `web-identity` calls STS AssumeRoleWithWebIdentity with the token \
        and the role ARN from the service account's annotation (token \
        audience sts.amazonaws.com); `pod-identity` asks the node's EKS Pod \
        Identity Agent for the role associated with the service account \
        (token audience pods.eks.amazonaws.com).",
};

/// `--aws-session-duration`.
pub(crate) static AWS_SESSION_DURATION: FlagSpec = FlagSpec {
    long: "aws-session-duration",
    env: "WICP_AWS_SESSION_DURATION",
    takes: Takes::One,
    value: "DURATION",
    default: "1h",
    help: "Lifetime asked of STS for the role session (aws web-identity only), \
        15m to 12h; the role's maximum session duration must allow it.",
};

#[derive(Clone, Debug)]
pub struct Options {
    /// [`AWS_CREDENTIAL_SOURCE`].
    pub aws_credential_source: CredentialSource,

    /// [`AWS_ROLE_ARN_ANNOTATION`].
    pub aws_role_arn_annotations: Vec<String>,

    /// [`AWS_SESSION_DURATION`].
    pub aws_session_duration: Duration,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[
        &AWS_CREDENTIAL_SOURCE,
        &AWS_ROLE_ARN_ANNOTATION,
        &AWS_SESSION_DURATION,
    ];
    const HEADING: &'static str = "AWS";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            aws_credential_source: defaulted(
                &AWS_CREDENTIAL_SOURCE,
                given.choice(&AWS_CREDENTIAL_SOURCE)?,
            )?,
            aws_role_arn_annotations: given.list(&AWS_ROLE_ARN_ANNOTATION)?,
            aws_session_duration: defaulted(
                &AWS_SESSION_DURATION,
                given.parsed(&AWS_SESSION_DURATION, parse_session_duration)?,
            )?,
        })
    }
}

fn parse_session_duration(text: &str) -> std::result::Result<Duration, String> {
    let d = duration::parse(text).map_err(|e| e.to_string())?;
    let whole = Duration::from_secs(d.as_secs());
    if whole < MIN_SESSION || whole > MAX_SESSION {
        return Err(format!(
            "the STS session duration must be between {} and {} (STS's own limits)",
            duration::format_go(MIN_SESSION),
            duration::format_go(MAX_SESSION)
        ));
    }
    Ok(whole)
}

pub static PROVIDER: Provider = Provider {
    name: "aws",
    summary: "STS web identity or EKS Pod Identity, then ECR and ECR Public",
    audience: "sts.amazonaws.com (web-identity) or pods.eks.amazonaws.com (pod-identity)",
    auto: Some(|image| host::parse(image.hostname()).is_some()),
    password_is_token: false,
    annotations: &identity::DEFAULT_ROLE_ANNOTATIONS,
    node_identity: Some("the instance profile's role, from IMDSv2"),
    flags: crate::own_flags::<Options>(),
};

impl crate::OwnFlags for Options {
    fn build(&self, shared: &crate::Shared<'_>, inputs: &Inputs) -> Result<Box<dyn Exchanger>> {
        let env = Environment::from_lookup(|name| inputs.env.get(name).map(str::to_string));
        Ok(Box::new(
            Aws::with_environment(self, env, Arc::clone(&inputs.net))
                .with_fallback(shared.fallback),
        ))
    }
}

pub struct Aws {
    source: CredentialSource,
    fallback: Fallback,
    role_annotations: Vec<String>,
    session_duration: Duration,
    env: Environment,
    net: Arc<net::Settings>,
}

impl Aws {
    /// Takes the options and the AWS_* variables; checks nothing that could
    /// fail for a request this exchanger never sees.
    fn with_environment(options: &Options, env: Environment, net: Arc<net::Settings>) -> Self {
        Aws {
            net,
            source: options.aws_credential_source,
            role_annotations: options
                .aws_role_arn_annotations
                .iter()
                .map(|k| k.trim().to_string())
                .filter(|k| !k.is_empty())
                .collect(),
            session_duration: options.aws_session_duration,
            env,
            fallback: Fallback::None,
        }
    }

    /// What pods without an identity of their own get (`--fallback`).
    pub(crate) fn with_fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// Whether the request's service account opted in to an identity of
    /// its own: a role annotation under web-identity; under pod-identity
    /// the association lives in EKS, so any token counts.
    fn whose(&self, cx: &Context<'_>) -> Whose {
        let (opted_in, opt_in) = match self.source {
            CredentialSource::WebIdentity => (
                self.role_annotations
                    .iter()
                    .any(|key| cx.annotation(key).is_some()),
                format!("no {} annotation", self.role_annotations.join(" or ")),
            ),
            CredentialSource::PodIdentity => (true, "a token".to_string()),
        };
        fallback::whose(self.fallback, cx.token, opted_in, &opt_in)
    }

    /// The node's identity: the instance profile from IMDSv2, then ECR.
    fn node_plan<'a>(
        &'a self,
        cx: &Context<'a>,
        registry: Registry,
        why: String,
    ) -> Result<Plan<'a>> {
        let net: &'a net::Settings = &self.net;
        let ecr = EcrTarget::new(cx.image, registry, &self.env)?;
        let imds = endpoints::imds(&self.env)?;
        let mut inputs = ecr.location().to_vec();
        inputs.push(Input::identity("instance metadata", imds.describe()));
        inputs.push(Input::setting("ecr endpoint", ecr.endpoint.describe()));
        let exchange = move |deadline: &wicp_base::deadline::Deadline| {
            imds_then_ecr(&imds, &ecr, net, deadline)
        };
        Ok(Plan::for_node(&PROVIDER, cx.image, why, inputs, exchange))
    }
}

impl Exchanger for Aws {
    fn provider(&self) -> &'static Provider {
        &PROVIDER
    }

    fn audiences(&self) -> Vec<String> {
        match self.source {
            CredentialSource::WebIdentity => vec![STS_AUDIENCE.to_string()],
            CredentialSource::PodIdentity => vec![pod_identity::AUDIENCE.to_string()],
        }
    }

    fn annotation_keys(&self) -> Vec<String> {
        match self.source {
            CredentialSource::WebIdentity => self.role_annotations.clone(),
            CredentialSource::PodIdentity => Vec::new(),
        }
    }

    fn requires_token(&self) -> bool {
        self.fallback == Fallback::None
    }

    fn serves(&self, image: &ImageRef) -> bool {
        host::parse_registry(image.registry()).is_some()
    }

    fn registries(&self) -> String {
        host::SERVED.to_string()
    }

    fn plan<'a>(&'a self, cx: &Context<'a>) -> Result<Plan<'a>> {
        let net: &'a net::Settings = &self.net;
        let registry = host::require(cx.image.registry())?;
        if let Whose::Node { why } = self.whose(cx) {
            return self.node_plan(cx, registry, why);
        }
        let token = cx.token()?;
        let ecr = EcrTarget::new(cx.image, registry, &self.env)?;
        let mut inputs = vec![Input::identity(
            "credential source",
            self.source.name().to_string(),
        )];
        let exchange = match self.source {
            CredentialSource::WebIdentity => self.web_identity(cx, token, ecr, &mut inputs)?,
            CredentialSource::PodIdentity => {
                from_pod_identity_agent(&self.env, net, token, ecr, &mut inputs)?
            }
        };
        Ok(Plan::for_registry(&PROVIDER, cx.image, inputs, exchange))
    }
}

impl Aws {
    /// STS `AssumeRoleWithWebIdentity` with the role the service account
    /// names, then ECR with the role's credentials.
    fn web_identity<'a>(
        &'a self,
        cx: &Context<'a>,
        token: &'a wicp_kubelet::request::token::ServiceAccountToken,
        ecr: EcrTarget,
        inputs: &mut Vec<Input>,
    ) -> Result<crate::Exchange<'a>> {
        let net: &'a net::Settings = &self.net;
        let registry = &ecr.registry;
        if self.role_annotations.is_empty() {
            return Err(Error::flag(&AWS_ROLE_ARN_ANNOTATION, "lists no annotation key")
                .fix("pass --aws-role-arn-annotation KEY (or leave it unset for eks.amazonaws.com/ecr-role-arn, eks.amazonaws.com/role-arn)"));
        }
        let (key, role) = identity::role_from_annotations(
            cx.annotations,
            &self.role_annotations,
            token.service_account(),
        )?;
        if role.partition() != registry.partition() {
            return Err(Error::annotation_key(&key, format!(
                "the role {role} (annotation {key}) is in partition {}, but registry {} is in partition {}; roles cannot be assumed across partitions",
                role.partition(),
                cx.image.registry(),
                registry.partition()
            ))
            .fix(format!(
                "annotate the service account with a role of the {} partition (arn:{}:iam::...)",
                registry.partition(),
                registry.partition()
            )));
        }
        let session_name = identity::session_name(token.service_account());
        let sts_endpoint = endpoints::resolve(Service::Sts, registry, &self.env)?;
        inputs.extend([
            Input::identity("role arn", role.to_string()),
            Input::setting("session name", session_name.clone()),
            Input::setting(
                "session duration",
                format!("{}s", self.session_duration.as_secs()),
            ),
        ]);
        inputs.extend(ecr.location());
        inputs.push(Input::setting("sts endpoint", sts_endpoint.describe()));
        inputs.push(Input::setting("ecr endpoint", ecr.endpoint.describe()));
        let duration = self.session_duration;
        Ok(Box::new(move |deadline| {
            let sts_call = sdk::WebIdentity {
                role: &role,
                session_name: &session_name,
                duration,
                region: ecr.registry.region(),
                endpoint: &sts_endpoint,
                token,
            };
            sts_then_ecr(&sts_call, &ecr, net, deadline)
        }))
    }
}

/// The node's exchange (`--fallback node`), in order: the instance
/// profile's credentials from IMDSv2, then ECR `GetAuthorizationToken`
/// with them for the registry login ([`login`]).
fn imds_then_ecr(
    imds: &wicp_net::metadata::Service,
    ecr: &EcrTarget,
    net: &net::Settings,
    deadline: &wicp_base::deadline::Deadline,
) -> Result<Credential> {
    let node = http::block_on(
        deadline,
        http::Call::new(imds.name, format!("{} at {}", imds.name, imds.base)),
        imds::fetch(imds, net, deadline),
    )?;
    wicp_base::log::debug!(
        "IMDS issued the credentials of instance profile role {}, expiring at {}",
        node.role,
        node.credentials.expiry()
    );
    let principal = format!("the node's instance profile role {}", node.role);
    login(&ecr.call(principal), &node.credentials, net, deadline)
}

/// The web-identity exchange, in order: STS `AssumeRoleWithWebIdentity`
/// with the service account token for the role's temporary credentials,
/// then ECR `GetAuthorizationToken` with them for the registry login
/// ([`login`]).
fn sts_then_ecr(
    sts_call: &sdk::WebIdentity<'_>,
    ecr: &EcrTarget,
    net: &net::Settings,
    deadline: &wicp_base::deadline::Deadline,
) -> Result<Credential> {
    let credentials = http::block_on(
        deadline,
        sts_call.call_name(),
        sdk::assume_role_with_web_identity(sts_call, net, deadline),
    )?;
    wicp_base::log::debug!(
        "STS issued credentials for role {}, session {}, expiring at {}",
        sts_call.role,
        sts_call.session_name,
        credentials.expiry()
    );
    login(
        &ecr.call(format!("role {}", sts_call.role)),
        &credentials,
        net,
        deadline,
    )
}

/// The EKS Pod Identity Agent's credentials for the service account's
/// associated role, then ECR with them.
fn from_pod_identity_agent<'a>(
    env: &Environment,
    net: &'a net::Settings,
    token: &'a wicp_kubelet::request::token::ServiceAccountToken,
    ecr: EcrTarget,
    inputs: &mut Vec<Input>,
) -> Result<crate::Exchange<'a>> {
    let agent = endpoints::agent(env)?;
    inputs.extend(ecr.location());
    inputs.push(Input::setting("pod identity agent", agent.describe()));
    inputs.push(Input::setting("ecr endpoint", ecr.endpoint.describe()));
    Ok(Box::new(move |deadline| {
        agent_then_ecr(&agent, token, &ecr, net, deadline)
    }))
}

/// The pod-identity exchange, in order: the service account token to the
/// node's EKS Pod Identity Agent for the credentials of the role
/// associated with the service account, then ECR `GetAuthorizationToken`
/// with them for the registry login ([`login`]).
fn agent_then_ecr(
    agent: &endpoints::Endpoint,
    token: &wicp_kubelet::request::token::ServiceAccountToken,
    ecr: &EcrTarget,
    net: &net::Settings,
    deadline: &wicp_base::deadline::Deadline,
) -> Result<Credential> {
    let from_agent = http::block_on(
        deadline,
        http::Call::new(
            pod_identity::AGENT,
            format!("EKS Pod Identity Agent at {}", agent.url),
        ),
        pod_identity::fetch(agent, token, net, deadline),
    )?;
    let principal = match &from_agent.account {
        Some(account) => format!(
            "the role associated with service account {} (account {account})",
            token.service_account()
        ),
        None => format!(
            "the role associated with service account {}",
            token.service_account()
        ),
    };
    login(&ecr.call(principal), &from_agent.credentials, net, deadline)
}

/// The ECR registry a plan logs in to: the registry, the name it has among
/// the plan's inputs, and the endpoint its calls go to.
struct EcrTarget {
    registry: Registry,
    input: String,
    endpoint: endpoints::Endpoint,
}

impl EcrTarget {
    /// The target for `image` on `registry`: its ECR or ECR Public endpoint
    /// (an override from `env`, else the partition's own).
    fn new(image: &ImageRef, registry: Registry, env: &Environment) -> Result<Self> {
        let service = match registry {
            Registry::Private(_) => Service::Ecr,
            Registry::Public => Service::EcrPublic,
        };
        Ok(EcrTarget {
            endpoint: endpoints::resolve(service, &registry, env)?,
            input: match &registry {
                Registry::Private(_) => image.hostname().to_ascii_lowercase(),
                Registry::Public => "ecr-public".to_string(),
            },
            registry,
        })
    }

    /// Where the registry is, as plan inputs.
    fn location(&self) -> [Input; 3] {
        [
            Input::setting("partition", self.registry.partition().to_string()),
            Input::setting("region", self.registry.region().to_string()),
            Input::setting("registry", self.input.clone()),
        ]
    }

    /// The `GetAuthorizationToken` call, made as `principal`.
    fn call(&self, principal: String) -> sdk::EcrCall<'_> {
        sdk::EcrCall {
            registry: &self.registry,
            endpoint: &self.endpoint,
            principal,
        }
    }
}

/// GetAuthorizationToken, and the credential's lifetime: the earlier of the
/// ECR token's and the AWS credentials' expiry.
fn login(
    call: &sdk::EcrCall<'_>,
    credentials: &sdk::AwsCredentials,
    net: &net::Settings,
    deadline: &wicp_base::deadline::Deadline,
) -> Result<Credential> {
    let login = http::block_on(
        deadline,
        call.call_name(),
        sdk::get_authorization_token(call, credentials, net, deadline),
    )?;
    let now = duration::unix_now();
    if let Some(at) = login.expires_at.filter(|&at| at <= now) {
        wicp_base::log::warning!(
            "{} returned a token whose expiresAt {} is already past (is the node's clock ahead, or is this an emulator?); \
             it is handed out once, not cached",
            call.call_name(),
            duration::format_unix(at)
        );
    }
    let expires_at = [login.expires_at, credentials.expires_at]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now);
    Ok(Credential {
        username: login.username,
        password: login.password,
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pull;
    use wicp_base::secret::Secret;
    use wicp_kubelet::request::protocol::CacheKeyType;
    use wicp_kubelet::request::token::ServiceAccountToken;

    fn token(audience: &str) -> ServiceAccountToken {
        let claims = format!(
            r#"{{"aud":["{audience}"],"exp":4102444800,"iat":1000,"iss":"https://issuer.example","sub":"system:serviceaccount:team:api",
            "kubernetes.io":{{"namespace":"team","serviceaccount":{{"name":"api","uid":"u-1"}}}}}}"#
        );
        let jwt = wicp_kubelet::request::token::jwt(r#"{"alg":"RS256"}"#, &claims);
        ServiceAccountToken::decode(Secret::new(jwt), 2000).unwrap()
    }

    /// A web-identity exchanger with no AWS variables set.
    fn web_identity() -> Aws {
        Aws::with_environment(
            &options(CredentialSource::WebIdentity),
            Environment::default(),
            Arc::default(),
        )
    }

    fn options(source: CredentialSource) -> Options {
        Options {
            aws_credential_source: source,
            aws_role_arn_annotations: identity::DEFAULT_ROLE_ANNOTATIONS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            aws_session_duration: Duration::from_secs(1800),
        }
    }

    fn inputs(
        aws: &Aws,
        image: &str,
        token: &ServiceAccountToken,
        annotations: &[(&str, &str)],
    ) -> Result<Vec<Input>> {
        let pull = Pull::new(image, annotations);
        let plan = aws.plan(&pull.context(Some(token)))?;
        assert_eq!(plan.auth_key, pull.image.registry());
        assert_eq!(plan.cache_key_type, CacheKeyType::Registry);
        assert!(plan.cacheable);
        Ok(plan.inputs)
    }

    #[test]
    fn web_identity_plan_names_every_input() {
        let aws = web_identity();
        assert_eq!(aws.audiences(), ["sts.amazonaws.com"]);
        assert_eq!(aws.annotation_keys(), identity::DEFAULT_ROLE_ANNOTATIONS);
        // The flag's declared default is that list.
        let read = Options::from_flags(&wicp_base::flags::Given::default()).unwrap();
        assert_eq!(
            read.aws_role_arn_annotations,
            identity::DEFAULT_ROLE_ANNOTATIONS
        );
        let t = token(STS_AUDIENCE);
        let got = inputs(
            &aws,
            "123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com/team/app:1",
            &t,
            &[(
                "eks.amazonaws.com/role-arn",
                "arn:aws-us-gov:iam::123456789012:role/pull",
            )],
        )
        .unwrap();
        assert_inputs(
            got,
            &[
                ("credential source", "web-identity"),
                ("role arn", "arn:aws-us-gov:iam::123456789012:role/pull"),
                ("session name", "team.api"),
                ("session duration", "1800s"),
                ("partition", "aws-us-gov"),
                ("region", "us-gov-west-1"),
                (
                    "registry",
                    "123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com",
                ),
                ("sts endpoint", "https://sts.us-gov-west-1.amazonaws.com"),
                (
                    "ecr endpoint",
                    "https://api.ecr-fips.us-gov-west-1.amazonaws.com",
                ),
            ],
        );
    }

    /// The plan's inputs are exactly `want`, in order.
    fn assert_inputs(got: Vec<Input>, want: &[(&str, &str)]) {
        let got: Vec<(&str, &str)> = got.iter().map(|i| (i.name(), i.value())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn pod_identity_plan_names_every_input() {
        let env = Environment::from_lookup(|name| {
            (name == "AWS_ENDPOINT_URL_ECR_PUBLIC")
                .then(|| "https://ecr-public.vpce.example".to_string())
        });
        let aws =
            Aws::with_environment(&options(CredentialSource::PodIdentity), env, Arc::default());
        assert_eq!(aws.audiences(), ["pods.eks.amazonaws.com"]);
        assert!(aws.annotation_keys().is_empty());
        let t = token(pod_identity::AUDIENCE);
        let got = inputs(&aws, "public.ecr.aws/team/app", &t, &[]).unwrap();
        assert_inputs(
            got,
            &[
                ("credential source", "pod-identity"),
                ("partition", "aws"),
                ("region", "us-east-1"),
                ("registry", "ecr-public"),
                ("pod identity agent", "http://169.254.170.23/v1/credentials"),
                (
                    "ecr endpoint",
                    "https://ecr-public.vpce.example (from AWS_ENDPOINT_URL_ECR_PUBLIC)",
                ),
            ],
        );
    }

    #[test]
    fn hosts_served_and_refused() {
        let aws = web_identity();
        let serves = |i: &str| aws.serves(&ImageRef::parse(i).unwrap());
        assert!(serves("123456789012.dkr.ecr.us-east-1.amazonaws.com/a"));
        assert!(serves("public.ecr.aws/a/b"));
        assert!(!serves(
            "123456789012.dkr.ecr.us-east-1.amazonaws.com.evil.io/a"
        ));
        assert!(!serves("docker.io/library/nginx"));
        let t = token(STS_AUDIENCE);
        let e = inputs(&aws, "registry.k8s.io/pause", &t, &[]).unwrap_err();
        assert!(e.to_string().contains("is not an ECR registry"), "{e}");
    }

    #[test]
    fn session_duration_bounds() {
        assert_eq!(
            parse_session_duration("1h").unwrap(),
            Duration::from_secs(3600)
        );
        assert_eq!(parse_session_duration("15m").unwrap(), MIN_SESSION);
        assert_eq!(parse_session_duration("12h").unwrap(), MAX_SESSION);
        assert_eq!(parse_session_duration("900.5s").unwrap(), MIN_SESSION);
        for bad in ["14m59s", "12h0m1s", "0", "1d", "-1h", "3600"] {
            assert!(parse_session_duration(bad).is_err(), "{bad}");
        }
    }
}
