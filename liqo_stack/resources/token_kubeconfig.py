"""The name an old stack's state gives the provider of its home identity kubeconfigs (see retired.py)."""

from liqo_stack.resources.retired import RetiredProvider as TokenKubeconfigProvider

__all__ = ["TokenKubeconfigProvider"]
