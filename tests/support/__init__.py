"""Helpers every test tier imports (unit, integration, e2e, bench): one place, no copies.

- `kube`: waits on conditions, namespaces and offloadings, pods on the virtual nodes.
- `placement`: where a pod may schedule (docs/offloading.md's table), for the unit and e2e webhook tests.
"""
