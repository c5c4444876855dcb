"""The platform team's stack: `Home` and one `Peering` per foreign cluster (docs/package.md). Its outputs,
`homeClusterId` and `foreignClusters`, are what application teams' stacks read through a StackReference."""

import pulumi

import liqo_stack

config = pulumi.Config()
foreign_side = pulumi.StackReference(config.require("foreignSideStack"))  # foreign-1's admins' stack

home = liqo_stack.Home(
    "home",
    {
        "home": {"clusterId": "home", "kubeconfigPath": config.require("homeKubeconfig")},
        "runtime": {"mode": "external", "webhookPort": config.require_int("webhookPort")},
    },
)
beside_home = {"home": home.settings, "controlPlane": home.control_plane}
peerings = {
    "foreign-1": liqo_stack.Peering(
        "foreign-1",
        beside_home
        | {
            "foreignCluster": {
                "clusterId": "foreign-1",
                "identityKubeconfig": foreign_side.require_output("homeIdentities")["home"],
            }
        },
    ),
    "foreign-2": liqo_stack.Peering(
        "foreign-2",
        beside_home
        | {"foreignCluster": {"clusterId": "foreign-2", "kubeconfigPath": config.require("foreign2Kubeconfig")}},
    ),
}
pulumi.export("homeClusterId", home.outputs["homeClusterId"])
pulumi.export("foreignClusters", {cluster_id: p.outputs["foreignCluster"] for cluster_id, p in peerings.items()})
