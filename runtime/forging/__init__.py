"""Pure forging: what the runtime writes, computed from what it reads (no I/O); shared by the virtual
kubelet, reflection, the foreign agent and the webhooks, and by liqo_stack's previews. One module
per kind of object forged:
- `objects`: any reflected copy (ownership, skip lists, applied hash) and whether it is up to date;
- `kinds`: the kinds reflected toward foreign clusters, and what each copy leaves out;
- `pods`: offloaded pods and their status back home, and where a home pod may run (the pod webhook's
  constraints);
- `shadowpods`: what brings a live remote pod to its ShadowPod, and the status recording it;
- `tokens`: ServiceAccount token Secrets;
- `events`: home copies of foreign events;
- `storage`: remote claims and the home PVs standing for them;
- `custom`: custom objects' copies and the VirtualNode's condition on their reflection.
"""
