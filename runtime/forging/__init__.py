"""Pure forging: what the runtime writes, computed from what it reads (no I/O). Reflected copies
(`objects`), offloaded pods and their status back home (`pods`), ServiceAccount token Secrets
(`tokens`), home copies of foreign events (`events`),
remote claims and the home PVs standing for them (`storage`); shared by the virtual kubelet, reflection and
the foreign agent."""
