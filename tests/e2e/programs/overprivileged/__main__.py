"""liqo-stack's program, plus a ClusterRoleBinding that makes the home identity in foreign-1 cluster-admin:
what the policy pack's least-privilege policy exists to stop (e.g. added by a well-meant patch)."""

import pulumi

from liqo_stack import manifests
from liqo_stack.program import main
from liqo_stack.resources.kube_object import KubeObject
from runtime.api import names

main()
identity = names.home_identity_name("home")
KubeObject(
    "foreign-1:home-identity-cluster-admin",
    cluster_id="foreign-1",
    kubeconfig=pulumi.Output.secret("not used by a preview"),
    manifest=manifests.binding(
        "ClusterRole", "home-identity-cluster-admin", "cluster-admin", identity, names.tenant_namespace("home"), "test"
    ),
)
