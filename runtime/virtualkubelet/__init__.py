"""The virtual kubelet: one per foreign cluster; the Node, pod offloading and status back."""
