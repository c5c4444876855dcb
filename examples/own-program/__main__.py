"""An infra team's own Pulumi program: its own `kubernetes.Provider`s, liqo-stack's components, and
its application (a ConfigMap and a Deployment) in a namespace the stack offloads.

The `liqo:` stack config names the clusters by id (docs/configuration.md; this program: docs/stack.md,
"Your own program"); the clusters' kubeconfigs come from this program's own config (`kubeconfigs`, a
secret object keyed by cluster id), not from `liqo:`.
`app: false` installs liqo-stack alone: with the runtime outside the clusters (`runtime.mode:
external`), start it before the application's pods are created, so that its webhook places them.
"""

import pulumi
import pulumi_kubernetes as k8s

import liqo_stack

config = pulumi.Config()
kubeconfigs = config.require_secret_object("kubeconfigs")
providers = {
    cluster_id: k8s.Provider(
        cluster_id,
        kubeconfig=kubeconfigs.apply(lambda found, cluster_id=cluster_id: found[cluster_id]),
        # as liqo-stack's own providers: a new kubeconfig for the cluster never replaces an object,
        # and the credentials Secret is updated in place
        cluster_identifier=cluster_id,
        enable_server_side_apply=True,
        enable_secret_mutable=True,
        enable_config_map_mutable=True,
    )
    for cluster_id in config.require_object("clusters")
}
stack = liqo_stack.main(providers)


def application(app: str) -> None:
    """A ConfigMap and a Deployment that reads it, in the offloaded namespace `app`."""
    home = pulumi.ResourceOptions(provider=providers["home"], depends_on=[stack.offloadings[app]])
    settings = k8s.core.v1.ConfigMap(
        "web-settings",
        metadata={"name": "web-settings", "namespace": app},
        data={"greeting": "hello from home"},
        opts=home,
    )
    labels = {"app": "web"}
    k8s.apps.v1.Deployment(
        "web",
        metadata={"name": "web", "namespace": app},
        spec={
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "registry.example/web:1.0",
                            "envFrom": [{"configMapRef": {"name": "web-settings"}}],
                        }
                    ]
                },
            },
        },
        opts=pulumi.ResourceOptions.merge(home, pulumi.ResourceOptions(depends_on=[settings])),
    )


if config.get_bool("app") is not False:
    application(config.get("namespace") or "demo")
