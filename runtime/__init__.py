"""liqo-stack's long-running side: virtual kubelet, reflection, offloading controllers, foreign agent.

Installable and runnable without Pulumi; `liqo_stack` may import `runtime.api`, never the reverse.
"""
