"""Admission logic: pod mutation per offloading strategy and NamespaceOffloading validation (pure
functions; the TLS server that serves them to the API server is not written yet)."""
