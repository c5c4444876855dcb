"""Foreseeing what a change will do before it is made: the effects of a new stack config on running
workloads (effects), one pod as each foreign cluster would run it (podpreview), and the policy pack's
checks (policy) with the entry point the Pulumi engine starts them by (policy_host)."""
