"""The dynamic providers, each run by the engine in a process of its own (`python -m pulumi.dynamic`) from
the module a stack's state names, so each imports only what it needs:
- `destroy_guard.py`: the destroy guards' (liqo_stack/declaring/components/destroy_guard.py declares them);
- retired: those liqo-stack used before pulumi-kubernetes, kept only so that a stack made by them upgrades
  with a plain `pulumi up` (see `retired.py`). Nothing declares them any more."""
