"""The Pulumi program: stack config -> components. `__main__.py` and the tests both run `main()`."""

from __future__ import annotations

import pulumi
import pulumi.runtime.config as pulumi_config

from liqo_stack import config as stack_config
from liqo_stack.components import Cluster, ForeignAgent, HomeControlPlane, NamespaceOffloadings, Peering
from liqo_stack.plan import stack_plan


def load_config() -> stack_config.StackConfig:
    """Validate the whole `liqo:` config before any resource is registered."""
    try:
        return stack_config.from_pulumi_config(pulumi_config.CONFIG.get() or pulumi_config.get_config_env())
    except stack_config.ConfigError as err:
        raise pulumi.RunError(f"{err}\nFix Pulumi.<stack>.yaml (or `pulumi config set ...`) and run again.") from None


def main() -> None:
    config = load_config()
    try:
        home = Cluster(config.home.cluster_id, pulumi.Output.secret(config.home.kubeconfig_text()))
        foreigns = {
            f.cluster_id: Cluster(f.cluster_id, pulumi.Output.secret(f.kubeconfig_text()))
            for f in config.foreign_clusters
        }
    except stack_config.ConfigError as err:
        raise pulumi.RunError(str(err)) from None

    home_plane = HomeControlPlane("home", home, config.runtime)
    handlers: list[pulumi.Resource] = [home_plane.controller_manager]
    for foreign_config in config.foreign_clusters:
        foreign = foreigns[foreign_config.cluster_id]
        agent = ForeignAgent(foreign.cluster_id, foreign, config.runtime)
        peering = Peering(
            f"{config.home.cluster_id}-{foreign.cluster_id}",
            config=config,
            foreign_config=foreign_config,
            home=home,
            foreign=foreign,
            home_plane=home_plane,
            agent=agent,
        )
        handlers.append(peering.virtual_kubelet)
    NamespaceOffloadings("offloadings", home, config.namespaces, home_plane, handlers)

    for key, value in stack_plan(config).items():
        pulumi.export(key, value)
