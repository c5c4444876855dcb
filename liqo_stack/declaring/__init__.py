"""Declaring a stack: the `liqo:` config models, the Kubernetes objects each cluster gets (manifests),
the plan (twin namespaces, virtual node capacities), the Pulumi components and the program that
assembles them, and the reference pages generated from them (docs)."""
