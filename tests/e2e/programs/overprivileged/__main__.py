"""liqo-stack's program, plus a ClusterRoleBinding that makes the home identity in foreign-1 cluster-admin:
what the policy pack's least-privilege policy exists to stop (e.g. added by a well-meant patch)."""

import pulumi

import liqo_stack
from liqo_stack.declaring import manifests
from runtime.api import names

stack = liqo_stack.main()
identity = names.home_identity_name("home")
stack.clusters["foreign-1"].object(
    "home-identity-cluster-admin",
    manifests.binding(
        "ClusterRole", "home-identity-cluster-admin", "cluster-admin", identity, names.tenant_namespace("home"), "test"
    ),
    pulumi.ResourceOptions(),
)
