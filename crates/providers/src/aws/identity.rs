//! Who the pod becomes in AWS: the IAM role its service account names, and
//! the session name CloudTrail records for the pull.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::LazyLock;

use regex_lite::Regex;
use sha2::{Digest, Sha256};

use super::host::Partition;
use wicp_base::error::{Error, Result, quote};
use wicp_kubelet::request::token::ServiceAccount;

/// The annotations read for the role ARN, in order, unless
/// `--aws-role-arn-annotation` replaces them. The first is the upstream
/// ecr-credential-provider's own key (a role only for pulls, without the
/// pod identity webhook injecting credentials into the pod); the second is
/// the IRSA key most service accounts already carry.
pub(crate) const DEFAULT_ROLE_ANNOTATIONS: [&str; 2] = [
    "eks.amazonaws.com/ecr-role-arn",
    "eks.amazonaws.com/role-arn",
];

/// The form a role ARN must have, for messages.
const ARN_FORM: &str = "arn:<partition>:iam::<12-digit account>:role/[<path>/]<name>, \
     partition aws, aws-cn, aws-us-gov, aws-iso, aws-iso-b, aws-iso-e, aws-iso-f or aws-eusc";

/// An IAM role ARN. Path segments and the name use IAM's role-name
/// characters; the name is at most 64 of them.
const ROLE_ARN: &str = concat!(
    r"^arn:(aws|aws-cn|aws-us-gov|aws-iso|aws-iso-b|aws-iso-e|aws-iso-f|aws-eusc)",
    r":iam::([0-9]{12}):role/((?:[A-Za-z0-9_+=,.@-]+/)*)([A-Za-z0-9_+=,.@-]{1,64})$"
);

static ROLE_ARN_RE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(ROLE_ARN).ok());

/// STS's limit on the whole ARN (AssumeRoleWithWebIdentity `RoleArn`).
const MAX_ARN_LEN: usize = 2048;

/// A validated IAM role ARN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleArn {
    text: String,
    partition: Partition,
    account: String,
    name: String,
}

impl RoleArn {
    /// Parses `text`, or `None` when it is not an IAM role ARN.
    pub fn parse(text: &str) -> Option<RoleArn> {
        if text.len() > MAX_ARN_LEN {
            return None;
        }
        let caps = ROLE_ARN_RE.as_ref()?.captures(text)?;
        let partition = Partition::from_name(caps.get(1)?.as_str())?;
        Some(RoleArn {
            text: text.to_string(),
            partition,
            account: caps.get(2)?.as_str().to_string(),
            name: caps.get(4)?.as_str().to_string(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn partition(&self) -> Partition {
        self.partition
    }

    pub fn account(&self) -> &str {
        &self.account
    }

    #[cfg(test)]
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for RoleArn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The role ARN a service account names: the first of `keys` present in
/// the annotations the kubelet passed decides. A present key with an empty
/// or malformed value is an error, not a reason to look further: the admin
/// wrote it, and silently using another role would hide the mistake.
pub(crate) fn role_from_annotations(
    annotations: &BTreeMap<String, String>,
    keys: &[String],
    service_account: &ServiceAccount,
) -> Result<(String, RoleArn)> {
    let Some((key, value)) = keys.iter().find_map(|k| annotations.get(k).map(|v| (k, v))) else {
        let listed = keys
            .iter()
            .map(|k| quote(k))
            .collect::<Vec<_>>()
            .join(" or ");
        let first = keys.first().map(String::as_str).unwrap_or_default();
        return Err(Error::annotation_key(first, format!(
            "the service account {service_account} has no role ARN annotation ({listed}) in the request"
        ))
        .fix(format!(
            "annotate the service account with {first}: arn:aws:iam::<account>:role/<role>, and list {first} in \
             tokenAttributes.optionalServiceAccountAnnotationKeys (or requiredServiceAccountAnnotationKeys) of this \
             provider's CredentialProviderConfig entry so the kubelet passes it; or use --aws-credential-source pod-identity"
        )));
    };
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(Error::annotation_key(key, format!(
            "the annotation {key} on service account {service_account} is empty; expected {ARN_FORM}"
        ))
        .fix(format!(
            "set {key} to the ARN of the IAM role this service account pulls images as, or remove the annotation"
        )));
    }
    let arn = RoleArn::parse(trimmed).ok_or_else(|| {
        Error::annotation_key(key, format!(
            "the annotation {key} on service account {service_account} is {}, which is not an IAM role ARN; expected {ARN_FORM}",
            quote(value)
        ))
        .fix(format!(
            "set {key} to the role's ARN as IAM shows it, e.g. arn:aws:iam::123456789012:role/ecr-pull"
        ))
    })?;
    Ok((key.clone(), arn))
}

/// STS's limit on `RoleSessionName`.
const MAX_SESSION_NAME: usize = 64;

/// Hex digits of the hash appended to a session name that had to change.
const SESSION_HASH_LEN: usize = 8;

/// The session name for a service account: `<namespace>.<name>`, which
/// CloudTrail shows as `assumed-role/<role>/<namespace>.<name>`. Namespaces
/// cannot contain dots, so the first dot separates the two. STS allows
/// `[A-Za-z0-9_+=,.@-]`, 2 to 64 characters: a name that is too long (or,
/// from a non-conforming token, has other characters) keeps a readable,
/// cleaned prefix plus a short hash of the full name, so two service
/// accounts never share a session name by being cut the same way.
pub(crate) fn session_name(service_account: &ServiceAccount) -> String {
    let full = format!("{}.{}", service_account.namespace, service_account.name);
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c);
    if full.len() <= MAX_SESSION_NAME && full.len() >= 2 && full.chars().all(allowed) {
        return full;
    }
    let digest = Sha256::digest(full.as_bytes());
    let hash = wicp_base::hex::encode(digest.get(..SESSION_HASH_LEN / 2).unwrap_or_default());
    let keep = MAX_SESSION_NAME - SESSION_HASH_LEN - 1;
    let prefix: String = full
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .take(keep)
        .collect();
    format!("{prefix}-{hash}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations;

    fn sa(namespace: &str, name: &str) -> ServiceAccount {
        ServiceAccount {
            namespace: namespace.into(),
            name: name.into(),
            uid: "uid".into(),
        }
    }

    #[test]
    fn role_arns_in_every_partition() {
        for (text, partition, account, name) in [
            (
                "arn:aws:iam::123456789012:role/ecr-pull",
                "aws",
                "123456789012",
                "ecr-pull",
            ),
            (
                "arn:aws:iam::123456789012:role/service-role/team/ecr_pull+x=y,z.@-",
                "aws",
                "123456789012",
                "ecr_pull+x=y,z.@-",
            ),
            (
                "arn:aws-cn:iam::000000000001:role/pull",
                "aws-cn",
                "000000000001",
                "pull",
            ),
            (
                "arn:aws-us-gov:iam::123456789012:role/Pull",
                "aws-us-gov",
                "123456789012",
                "Pull",
            ),
            (
                "arn:aws-iso:iam::123456789012:role/p",
                "aws-iso",
                "123456789012",
                "p",
            ),
            (
                "arn:aws-iso-b:iam::123456789012:role/p",
                "aws-iso-b",
                "123456789012",
                "p",
            ),
            (
                "arn:aws-iso-e:iam::123456789012:role/p",
                "aws-iso-e",
                "123456789012",
                "p",
            ),
            (
                "arn:aws-iso-f:iam::123456789012:role/p",
                "aws-iso-f",
                "123456789012",
                "p",
            ),
            (
                "arn:aws-eusc:iam::123456789012:role/p",
                "aws-eusc",
                "123456789012",
                "p",
            ),
            (
                &format!("arn:aws:iam::123456789012:role/{}", "r".repeat(64)),
                "aws",
                "123456789012",
                &"r".repeat(64),
            ),
        ] {
            let arn = RoleArn::parse(text).unwrap_or_else(|| panic!("{text} should parse"));
            assert_eq!(arn.partition().name(), partition, "{text}");
            assert_eq!(arn.account(), account, "{text}");
            assert_eq!(arn.name(), name, "{text}");
            assert_eq!(arn.as_str(), text);
        }
    }

    #[test]
    fn malformed_role_arns_are_refused() {
        for text in [
            "",
            "ecr-pull",
            "arn:aws:iam::123456789012:role/",
            "arn:aws:iam::123456789012:role",
            "arn:aws:iam::123456789012:user/alice",
            "arn:aws:iam::123456789012:policy/p",
            "arn:aws:sts::123456789012:assumed-role/r/s",
            "arn:aws:iam:us-east-1:123456789012:role/r",
            "arn:aws:iam::12345678901:role/r",
            "arn:aws:iam::1234567890123:role/r",
            "arn:aws:iam::12345678901x:role/r",
            "arn:aws-foo:iam::123456789012:role/r",
            "arn:aws-iso-z:iam::123456789012:role/r",
            "arn:azure:iam::123456789012:role/r",
            " arn:aws:iam::123456789012:role/r",
            "arn:aws:iam::123456789012:role/r\n",
            "arn:aws:iam::123456789012:role/has space",
            "arn:aws:iam::123456789012:role/a//b",
            "arn:aws:iam::123456789012:role/r:x",
            "ARN:AWS:IAM::123456789012:ROLE/r",
            &format!("arn:aws:iam::123456789012:role/{}", "r".repeat(65)),
        ] {
            assert_eq!(RoleArn::parse(text), None, "{text:?} must be refused");
        }
    }

    fn keys() -> Vec<String> {
        DEFAULT_ROLE_ANNOTATIONS
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn the_first_present_annotation_decides() {
        let who = sa("team", "api");
        let both = annotations(&[
            (
                "eks.amazonaws.com/role-arn",
                "arn:aws:iam::123456789012:role/app",
            ),
            (
                "eks.amazonaws.com/ecr-role-arn",
                "arn:aws:iam::123456789012:role/pull",
            ),
        ]);
        let (key, arn) = role_from_annotations(&both, &keys(), &who).unwrap();
        assert_eq!(key, "eks.amazonaws.com/ecr-role-arn");
        assert_eq!(arn.name(), "pull");

        let irsa = annotations(&[(
            "eks.amazonaws.com/role-arn",
            "arn:aws:iam::123456789012:role/app",
        )]);
        let (key, arn) = role_from_annotations(&irsa, &keys(), &who).unwrap();
        assert_eq!(key, "eks.amazonaws.com/role-arn");
        assert_eq!(arn.name(), "app");

        // A custom list replaces the defaults.
        let custom = vec!["example.com/pull-role".to_string()];
        assert!(role_from_annotations(&irsa, &custom, &who).is_err());
    }

    #[test]
    fn missing_empty_and_malformed_annotations_name_key_value_and_form() {
        let who = sa("team", "api");
        let e = role_from_annotations(&annotations(&[]), &keys(), &who)
            .unwrap_err()
            .to_string();
        assert!(e.contains("team/api"), "{e}");
        assert!(e.contains("eks.amazonaws.com/ecr-role-arn"), "{e}");
        assert!(e.contains("eks.amazonaws.com/role-arn"), "{e}");
        assert!(e.contains("optionalServiceAccountAnnotationKeys"), "{e}");

        // Empty: an error even though the next key would be valid.
        let empty = annotations(&[
            ("eks.amazonaws.com/ecr-role-arn", " "),
            (
                "eks.amazonaws.com/role-arn",
                "arn:aws:iam::123456789012:role/app",
            ),
        ]);
        let e = role_from_annotations(&empty, &keys(), &who)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("eks.amazonaws.com/ecr-role-arn on service account team/api is empty"),
            "{e}"
        );
        assert!(
            e.contains("arn:<partition>:iam::<12-digit account>:role/"),
            "{e}"
        );

        let bad = annotations(&[("eks.amazonaws.com/role-arn", "arn:aws:iam::123:role/app")]);
        let e = role_from_annotations(&bad, &keys(), &who).unwrap_err();
        assert_eq!(e.kind(), wicp_base::error::Kind::Annotation, "{e}");
        let e = e.to_string();
        assert!(e.contains("eks.amazonaws.com/role-arn"), "{e}");
        assert!(e.contains("\"arn:aws:iam::123:role/app\""), "{e}");
        assert!(e.contains("not an IAM role ARN"), "{e}");
        assert!(e.contains("aws-eusc"), "{e}");
    }

    #[test]
    fn session_names() {
        assert_eq!(session_name(&sa("team", "api")), "team.api");
        assert_eq!(
            session_name(&sa("kube-system", "coredns")),
            "kube-system.coredns"
        );
        // Service account names may contain dots; still allowed.
        assert_eq!(session_name(&sa("a", "b.c-d")), "a.b.c-d");
        // Exactly 64 fits.
        let ns = "n".repeat(30);
        let name = "s".repeat(33);
        assert_eq!(session_name(&sa(&ns, &name)), format!("{ns}.{name}"));
    }

    #[test]
    fn long_session_names_are_cut_with_a_hash() {
        let ns = "payments-production-eu-west-1";
        let a = session_name(&sa(
            ns,
            &format!("{}-a", "very-long-service-account-name".repeat(3)),
        ));
        let b = session_name(&sa(
            ns,
            &format!("{}-b", "very-long-service-account-name".repeat(3)),
        ));
        for name in [&a, &b] {
            assert_eq!(name.len(), MAX_SESSION_NAME, "{name}");
            assert!(
                name.starts_with("payments-production-eu-west-1.very-long-service"),
                "{name}"
            );
            let (_, hash) = name.rsplit_once('-').unwrap();
            assert_eq!(hash.len(), SESSION_HASH_LEN);
            assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
        }
        // Same prefix after cutting, different names: different hashes.
        assert_ne!(a, b);
        // Deterministic: CloudTrail searches and cache keys stay stable.
        assert_eq!(
            a,
            session_name(&sa(
                ns,
                &format!("{}-a", "very-long-service-account-name".repeat(3))
            ))
        );
    }

    #[test]
    fn characters_sts_refuses_are_replaced_and_hashed() {
        let name = session_name(&sa("team", "api/x y"));
        assert!(name.starts_with("team.api_x_y-"), "{name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c)),
            "{name}"
        );
        assert_ne!(name, session_name(&sa("team", "api_x_y")));
    }
}
