//! The RBAC a config's audiences need: with `NodeRestriction` and
//! `ServiceAccountNodeAudienceRestriction` (on from 1.33) a kubelet may
//! request a token only for audiences its pods' volumes use, unless group
//! `system:nodes` may `request-serviceaccounts-token-audience` on the
//! audience. Without it the TokenRequest is refused and the plugin never
//! runs (kind#4185).

use std::collections::BTreeSet;

use yaml_serde::Value;

/// The audiences of the entries that carry `tokenAttributes`.
pub(crate) fn audiences(providers: &[Value]) -> Vec<String> {
    providers
        .iter()
        .filter_map(|p| {
            p.get("tokenAttributes")?
                .get("serviceAccountTokenAudience")?
                .as_str()
        })
        .map(str::to_string)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// A ClusterRole and its binding to `system:nodes`, ready to apply.
pub(crate) fn manifest(audiences: &[String]) -> String {
    if audiences.is_empty() {
        return String::new();
    }
    let resources = audiences
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: wi-credential-provider-audiences
rules:
  - apiGroups: [\"\"]
    resources: [{resources}]
    verbs: [\"request-serviceaccounts-token-audience\"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: wi-credential-provider-audiences
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: wi-credential-provider-audiences
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: Group
    name: system:nodes
"
    )
}
