//! Who the pod becomes in Google Cloud: the identity pool that trusts the
//! cluster, and optionally the Google service account it impersonates.
//!
//! Two pools can trust a cluster's service account tokens:
//! - GKE Workload Identity: the project's built-in pool
//!   `PROJECT_ID.svc.id.goog`, which GKE keeps in sync with the cluster's
//!   issuer. The token's audience is the pool name; STS is told the pool and
//!   the cluster (`identitynamespace:<pool>:<cluster URL>`).
//! - Workload Identity Federation: a pool provider an admin created for the
//!   cluster's issuer, on any cluster anywhere. STS is told the provider's
//!   full resource name, and the token's audience is that name (with `//` or
//!   `https://`) unless the provider lists allowed audiences.
//!
//! Every value is checked against Google's resource-name grammar before it is
//! sent: a typo fails here with the flag's name instead of as an opaque
//! `invalid_target` from STS.

use super::{GCP_CLUSTER, GCP_PROJECT_ID, GCP_WORKLOAD_IDENTITY_PROVIDER};
use wicp_base::error::{Error, Fact, Result, quote};
use wicp_base::flags::FlagSpec;
use wicp_kubelet::request::token::ServiceAccount;

/// The annotation naming the Google service account to impersonate; without
/// it the federated token itself is the credential (direct resource access).
pub const SERVICE_ACCOUNT_ANNOTATION: &str = "iam.gke.io/gcp-service-account";

/// The pool the cluster's tokens are exchanged in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `provider` is `projects/N/locations/global/workloadIdentityPools/P/providers/X`.
    Federation { provider: String },
    /// `cluster` is `projects/P/locations/L/clusters/C`.
    Gke { project: String, cluster: String },
}

impl Mode {
    /// Decides the mode from the flags: exactly one of the two
    /// configurations, or none (the gcp exchanger is then unusable, which is
    /// only an error if a request is routed to it).
    pub fn from_flags(
        provider: Option<&str>,
        project: Option<&str>,
        cluster: Option<&str>,
    ) -> Result<Option<Mode>> {
        fn set(v: Option<&str>) -> Option<&str> {
            v.map(str::trim).filter(|v| !v.is_empty())
        }
        match (set(provider), set(project), set(cluster)) {
            (None, None, None) => Ok(None),
            (Some(provider), None, None) => Ok(Some(Mode::Federation {
                provider: parse_provider(provider)?,
            })),
            (None, Some(project), Some(cluster)) => Ok(Some(Mode::Gke {
                project: parse_project_id(project, &GCP_PROJECT_ID)?,
                cluster: parse_cluster(cluster)?,
            })),
            (Some(_), _, _) => Err(Error::config(format!(
                "{GCP_WORKLOAD_IDENTITY_PROVIDER} and {GCP_PROJECT_ID}/{GCP_CLUSTER} are both set, but they configure two different identity pools"
            ))
            .fix(format!(
                "keep {GCP_WORKLOAD_IDENTITY_PROVIDER} for Workload Identity Federation, or {GCP_PROJECT_ID} with {GCP_CLUSTER} for GKE Workload Identity, not both"
            ))
            .with(Fact::Flag((&GCP_WORKLOAD_IDENTITY_PROVIDER).into()))),
            (None, Some(_), None) => Err(Error::config(format!(
                "{GCP_PROJECT_ID} is set without {GCP_CLUSTER}; GKE Workload Identity needs both"
            ))
            .fix(format!(
                "add {GCP_CLUSTER} projects/PROJECT_ID/locations/LOCATION/clusters/NAME, or use {GCP_WORKLOAD_IDENTITY_PROVIDER} instead"
            ))
            .with(Fact::Flag((&GCP_PROJECT_ID).into()))),
            (None, None, Some(_)) => Err(Error::config(format!(
                "{GCP_CLUSTER} is set without {GCP_PROJECT_ID}; GKE Workload Identity needs both"
            ))
            .fix(format!(
                "add {GCP_PROJECT_ID} with the project that owns the Workload Identity pool (PROJECT_ID.svc.id.goog)"
            ))
            .with(Fact::Flag((&GCP_CLUSTER).into()))),
        }
    }

    /// The error for a request routed to an exchanger with no mode.
    pub(crate) fn not_configured() -> Error {
        Error::config("the gcp exchanger has no identity pool configured")
            .fix(format!(
                "pass {GCP_WORKLOAD_IDENTITY_PROVIDER} projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER \
                 (Workload Identity Federation), or {GCP_PROJECT_ID} with {GCP_CLUSTER} (GKE Workload Identity)"
            ))
            .with(Fact::Flag((&GCP_WORKLOAD_IDENTITY_PROVIDER).into()))
    }

    /// A short name for logs and cache inputs.
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Federation { .. } => "workload-identity-federation",
            Mode::Gke { .. } => "gke-workload-identity",
        }
    }

    /// The `audience` sent to STS.
    pub fn sts_audience(&self) -> String {
        match self {
            Mode::Federation { provider } => format!("//iam.googleapis.com/{provider}"),
            Mode::Gke { project, cluster } => format!(
                "identitynamespace:{project}.svc.id.goog:https://container.googleapis.com/v1/{cluster}"
            ),
        }
    }

    /// The audiences Google accepts on the service account token when
    /// nothing else is configured. For a pool provider without
    /// `allowedAudiences` that is its full resource name "with or without the
    /// HTTPS prefix"; with `allowedAudiences`, `--audience` names the one the
    /// kubelet requests.
    pub fn token_audiences(&self) -> Vec<String> {
        match self {
            Mode::Federation { provider } => vec![
                format!("//iam.googleapis.com/{provider}"),
                format!("https://iam.googleapis.com/{provider}"),
            ],
            Mode::Gke { project, .. } => vec![format!("{project}.svc.id.goog")],
        }
    }

    /// The IAM principal Google sees after the exchange, for the fix of a
    /// refused impersonation. For a pool provider this assumes the usual
    /// attribute mapping `google.subject=assertion.sub`.
    pub fn principal(&self, sa: &ServiceAccount) -> String {
        match self {
            Mode::Federation { provider } => {
                let pool = provider
                    .split_once("/providers/")
                    .map_or(provider.as_str(), |(pool, _)| pool);
                format!(
                    "principal://iam.googleapis.com/{pool}/subject/system:serviceaccount:{}:{}",
                    sa.namespace, sa.name
                )
            }
            Mode::Gke { project, .. } => {
                format!(
                    "serviceAccount:{project}.svc.id.goog[{}/{}]",
                    sa.namespace, sa.name
                )
            }
        }
    }
}

/// `projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER`.
fn parse_provider(value: &str) -> Result<String> {
    let fix = format!(
        "write {GCP_WORKLOAD_IDENTITY_PROVIDER} as projects/PROJECT_NUMBER/locations/global/workloadIdentityPools/POOL_ID/providers/PROVIDER_ID \
         (gcloud iam workload-identity-pools providers describe PROVIDER_ID --workload-identity-pool POOL_ID --location global --format 'value(name)')"
    );
    let bad = |why: &str| {
        Error::flag(
            &GCP_WORKLOAD_IDENTITY_PROVIDER,
            format!("{} {why}", quote(value)),
        )
        .fix(fix.clone())
    };
    for prefix in ["//iam.googleapis.com/", "https://iam.googleapis.com/"] {
        if value.starts_with(prefix) {
            return Err(bad(&format!(
                "starts with {prefix}; the flag takes the resource name alone (the audience is derived from it)"
            )));
        }
    }
    let parts: Vec<&str> = value.split('/').collect();
    let [
        "projects",
        number,
        "locations",
        "global",
        "workloadIdentityPools",
        pool,
        "providers",
        provider,
    ] = parts.as_slice()
    else {
        return Err(bad(
            "is not a workload identity pool provider resource name",
        ));
    };
    if number.is_empty() || number.len() > 30 || !number.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad(
            "names the project by ID; pool resource names use the project number (gcloud projects describe PROJECT_ID --format 'value(projectNumber)')",
        ));
    }
    if !is_resource_id(pool) {
        return Err(bad(
            "has a pool ID that is not lowercase letters, digits and hyphens",
        ));
    }
    if !is_resource_id(provider) {
        return Err(bad(
            "has a provider ID that is not lowercase letters, digits and hyphens",
        ));
    }
    Ok(value.to_string())
}

/// `projects/PROJECT/locations/LOCATION/clusters/NAME`, the cluster's
/// resource name as `gcloud container clusters describe --format 'value(selfLink)'`
/// ends.
fn parse_cluster(value: &str) -> Result<String> {
    let bad = |why: &str| {
        Error::flag(&GCP_CLUSTER, format!("{} {why}", quote(value))).fix(format!(
            "write {GCP_CLUSTER} as projects/PROJECT_ID/locations/LOCATION/clusters/NAME, \
             e.g. projects/my-project/locations/us-central1/clusters/prod"
        ))
    };
    if value.starts_with("https://") {
        return Err(bad(
            "is a URL; the flag takes the resource name alone (projects/...)",
        ));
    }
    let parts: Vec<&str> = value.split('/').collect();
    let ["projects", project, "locations", location, "clusters", name] = parts.as_slice() else {
        return Err(bad("is not a GKE cluster resource name"));
    };
    let project_number =
        !project.is_empty() && project.len() <= 30 && project.bytes().all(|c| c.is_ascii_digit());
    if !project_number && !is_project_id(project) {
        return Err(bad(
            "has a project that is neither a project ID nor a number",
        ));
    }
    if !is_resource_id(location) {
        return Err(bad("has a location that is not a region or zone name"));
    }
    if !is_resource_id(name) || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(bad(
            "has a cluster name that is not lowercase letters, digits and hyphens starting with a letter",
        ));
    }
    Ok(value.to_string())
}

fn parse_project_id(value: &str, flag: &'static FlagSpec) -> Result<String> {
    if is_project_id(value) {
        return Ok(value.to_string());
    }
    Err(Error::config(format!(
        "{flag} {} is not a Google Cloud project ID",
        quote(value)
    ))
    .fix("use the project ID (6 to 30 lowercase letters, digits and hyphens, starting with a letter), not its name or number"))
}

/// Google's project ID grammar: 6 to 30 characters, lowercase letters,
/// digits and hyphens, starting with a letter and not ending with a hyphen.
fn is_project_id(s: &str) -> bool {
    (6..=30).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && !s.ends_with('-')
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// Pool, provider, location and cluster IDs: lowercase letters, digits and
/// hyphens, not at either end.
fn is_resource_id(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// Checks the Google service account named by the annotation. The email goes
/// into the IAM Credentials URL path, so nothing but a service account email
/// may pass: `NAME@PROJECT.iam.gserviceaccount.com`, or the Compute Engine
/// and App Engine default accounts.
pub(super) fn parse_service_account(value: &str) -> Result<String> {
    let valid = value.split_once('@').is_some_and(|(name, domain)| {
        let label = |s: &str| {
            (1..=100).contains(&s.len())
                && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
        };
        let domain_ok = match domain {
            "developer.gserviceaccount.com" | "appspot.gserviceaccount.com" => true,
            _ => domain
                .strip_suffix(".iam.gserviceaccount.com")
                .is_some_and(label),
        };
        label(name) && domain_ok
    });
    if valid {
        return Ok(value.to_string());
    }
    Err(Error::annotation_key(SERVICE_ACCOUNT_ANNOTATION, format!(
        "annotation {SERVICE_ACCOUNT_ANNOTATION} {} is not a Google service account email",
        quote(value)
    ))
    .fix(format!(
        "set {SERVICE_ACCOUNT_ANNOTATION} to NAME@PROJECT_ID.iam.gserviceaccount.com on the Kubernetes service account, \
         or remove it to use the federated identity directly"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROVIDER: &str = "projects/123456789012/locations/global/workloadIdentityPools/k8s-pool/providers/prod-cluster";
    const CLUSTER: &str = "projects/my-project/locations/us-central1/clusters/prod";

    fn sa() -> ServiceAccount {
        ServiceAccount {
            namespace: "team".into(),
            name: "api".into(),
            uid: "u".into(),
        }
    }

    #[test]
    fn federation_mode() {
        let mode = Mode::from_flags(Some(PROVIDER), None, None)
            .unwrap()
            .unwrap();
        assert_eq!(mode.name(), "workload-identity-federation");
        assert_eq!(
            mode.sts_audience(),
            format!("//iam.googleapis.com/{PROVIDER}")
        );
        assert_eq!(
            mode.token_audiences(),
            [
                format!("//iam.googleapis.com/{PROVIDER}"),
                format!("https://iam.googleapis.com/{PROVIDER}"),
            ]
        );
        assert_eq!(
            mode.principal(&sa()),
            "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/k8s-pool/subject/system:serviceaccount:team:api"
        );
    }

    #[test]
    fn gke_mode() {
        let mode = Mode::from_flags(None, Some("my-project"), Some(CLUSTER))
            .unwrap()
            .unwrap();
        assert_eq!(mode.name(), "gke-workload-identity");
        assert_eq!(
            mode.sts_audience(),
            "identitynamespace:my-project.svc.id.goog:https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/prod"
        );
        assert_eq!(mode.token_audiences(), ["my-project.svc.id.goog"]);
        assert_eq!(
            mode.principal(&sa()),
            "serviceAccount:my-project.svc.id.goog[team/api]"
        );
    }

    #[test]
    fn neither_both_or_half_a_mode() {
        assert_eq!(Mode::from_flags(None, None, None).unwrap(), None);
        assert_eq!(Mode::from_flags(Some(" "), Some(""), None).unwrap(), None);
        let err = |p, pr, c| Mode::from_flags(p, pr, c).unwrap_err().to_string();
        let both = err(Some(PROVIDER), Some("my-project"), Some(CLUSTER));
        assert!(
            both.contains(
                "--gcp-workload-identity-provider and --gcp-project-id/--gcp-cluster are both set"
            ),
            "{both}"
        );
        let both = err(Some(PROVIDER), Some("my-project"), None);
        assert!(both.contains("both set"), "{both}");
        let half = err(None, Some("my-project"), None);
        assert!(
            half.contains("--gcp-project-id is set without --gcp-cluster"),
            "{half}"
        );
        let half = err(None, None, Some(CLUSTER));
        assert!(
            half.contains("--gcp-cluster is set without --gcp-project-id"),
            "{half}"
        );
        let none = Mode::not_configured().to_string();
        assert!(none.contains("--gcp-workload-identity-provider"), "{none}");
        assert!(none.contains("--gcp-cluster"), "{none}");
    }

    #[test]
    fn provider_names_are_validated() {
        for bad in [
            "k8s-pool",
            "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/x",
            "https://iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/x",
            "projects/my-project/locations/global/workloadIdentityPools/p/providers/x",
            "projects/1/locations/us-east1/workloadIdentityPools/p/providers/x",
            "projects/1/locations/global/workloadIdentityPools/p/providers/x/",
            "projects/1/locations/global/workloadIdentityPools/P/providers/x",
            "projects/1/locations/global/workloadIdentityPools/p/providers/",
            "projects/1/locations/global/workloadIdentityPools/p?x/providers/x",
            "projects//locations/global/workloadIdentityPools/p/providers/x",
        ] {
            let e = Mode::from_flags(Some(bad), None, None).unwrap_err();
            assert_eq!(e.kind(), wicp_base::error::Kind::Config, "{bad}: {e}");
            let e = e.to_string();
            assert!(
                e.starts_with("--gcp-workload-identity-provider"),
                "{bad}: {e}"
            );
            assert!(
                e.contains("fix: write --gcp-workload-identity-provider as"),
                "{e}"
            );
        }
    }

    #[test]
    fn clusters_and_projects_are_validated() {
        assert!(
            Mode::from_flags(
                None,
                Some("my-project"),
                Some("projects/123/locations/europe-west1-b/clusters/c1")
            )
            .is_ok()
        );
        for bad in [
            "prod",
            "https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/prod",
            "projects/my-project/zones/us-central1-a/clusters/prod",
            "projects/My-Project/locations/us-central1/clusters/prod",
            "projects/my-project/locations/us-central1/clusters/1prod",
            "projects/my-project/locations/us central1/clusters/prod",
            "projects/my-project/locations/us-central1/clusters/prod/nodePools/a",
        ] {
            let e = Mode::from_flags(None, Some("my-project"), Some(bad))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("--gcp-cluster"), "{bad}: {e}");
        }
        for bad in [
            "123456789012",
            "My-Project",
            "proj",
            "my-project-",
            "my_project",
            "example.com:proj",
        ] {
            let e = Mode::from_flags(None, Some(bad), Some(CLUSTER))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("--gcp-project-id"), "{bad}: {e}");
        }
    }

    #[test]
    fn service_account_emails() {
        for good in [
            "puller@my-project.iam.gserviceaccount.com",
            "123456789012-compute@developer.gserviceaccount.com",
            "my-project@appspot.gserviceaccount.com",
        ] {
            assert_eq!(parse_service_account(good).unwrap(), good);
        }
        for bad in [
            "puller",
            "puller@gmail.com",
            "puller@my-project.iam.gserviceaccount.com.evil.com",
            "puller@my-project.iam.gserviceaccount.com/../x",
            "a/b@my-project.iam.gserviceaccount.com",
            "pull er@my-project.iam.gserviceaccount.com",
            "@my-project.iam.gserviceaccount.com",
            "puller@.iam.gserviceaccount.com",
            "puller@evil.developer.gserviceaccount.com",
            "puller@my-project.iam.gserviceaccount.com:generateIdToken?",
        ] {
            let e = parse_service_account(bad).unwrap_err();
            assert_eq!(e.kind(), wicp_base::error::Kind::Annotation, "{bad}: {e}");
            let e = e.to_string();
            assert!(
                e.contains("is not a Google service account email"),
                "{bad}: {e}"
            );
        }
    }
}
