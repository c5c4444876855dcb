"""liqo-stack: extend a Kubernetes cluster onto others through virtual nodes, declared with Pulumi.

The install-time side: stack config, Pulumi components, the CLI and the local dev environment.
"""
