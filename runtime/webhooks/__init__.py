"""Admission logic: pod mutation per offloading strategy (the TLS server that serves it comes next)."""
