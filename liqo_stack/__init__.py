"""liqo-stack: extend a Kubernetes cluster onto others through virtual nodes, declared with Pulumi.

What a Pulumi program needs, by name:

    import liqo_stack

    stack = liqo_stack.main()  # or main(providers): a `kubernetes.Provider` per cluster id of its own
    stack.offloadings["demo"]  # what an application in namespace demo depends on

or each team its own part, with the package's components (docs/package.md), the classes the other
languages get under the same names: `Stack`, `Home`, `Peering`, `ForeignSide`, `OffloadedNamespace`
(liqo_stack/declaring/package/components.py), each constructed from its properties:

    home = liqo_stack.Home("home", {"home": {"clusterId": "home", "kubeconfigPath": "..."}})
    liqo_stack.OffloadedNamespace("apps", {"name": "apps", "homeClusterId": "home", "providers": {"home": p}})

`main` reads and validates the `liqo:` stack config and declares the stack; the component classes are
the types of what it returns (`LiqoStack`). The rest is the toolkit's own, by job:
- `liqo_stack.declaring`: the config models, manifests, plan, components and the program;
- `liqo_stack.foreseeing`: what a change will do before it is made (effects, pod preview, policy pack);
- `liqo_stack.operating`: the `liqo-stack` command line and the runtime image it builds;
- `liqo_stack.dev`: the local dev environment (clusters, offline Pulumi, external runtime);
- `liqo_stack.kube`: the Kubernetes client all of them read clusters with;
- `liqo_stack.resources`: the dynamic providers: the destroy guards', and the retired ones an old stack's
  state names (upgrades only).

The names below are imported when first used, not with the package: the CLI and the dev tools
import `liqo_stack.*` without Pulumi's Kubernetes SDK, and `tools/build.py` imports
`liqo_stack.dev.paths` before anything is installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from liqo_stack.declaring.components import Cluster, ForeignAgent, HomeControlPlane, NamespaceOffloadings
    from liqo_stack.declaring.package.components import ForeignSide, Home, OffloadedNamespace, Peering, Stack
    from liqo_stack.declaring.program import LiqoStack, main

__all__ = [
    "Cluster",
    "ForeignAgent",
    "ForeignSide",
    "Home",
    "HomeControlPlane",
    "LiqoStack",
    "NamespaceOffloadings",
    "OffloadedNamespace",
    "Peering",
    "Stack",
    "main",
]

_HOME = {
    "main": "liqo_stack.declaring.program",
    "LiqoStack": "liqo_stack.declaring.program",
    "Cluster": "liqo_stack.declaring.components",
    "ForeignAgent": "liqo_stack.declaring.components",
    "HomeControlPlane": "liqo_stack.declaring.components",
    "NamespaceOffloadings": "liqo_stack.declaring.components",
    # the package's components (a peering's own parts are liqo_stack.declaring.components.Peering)
    "Stack": "liqo_stack.declaring.package.components",
    "Home": "liqo_stack.declaring.package.components",
    "Peering": "liqo_stack.declaring.package.components",
    "ForeignSide": "liqo_stack.declaring.package.components",
    "OffloadedNamespace": "liqo_stack.declaring.package.components",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value  # found once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
