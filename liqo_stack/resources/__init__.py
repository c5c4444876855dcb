"""Retired: the dynamic providers liqo-stack used before pulumi-kubernetes, kept only so that a stack
made by them upgrades with a plain `pulumi up` (see `retired.py`). Nothing declares them any more."""
