"""The name an old stack's state gives the provider of its Kubernetes objects (see retired.py)."""

from liqo_stack.resources.retired import RetiredProvider as KubeObjectProvider

__all__ = ["KubeObjectProvider"]
