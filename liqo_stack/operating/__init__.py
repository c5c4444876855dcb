"""Operating a stack and its clusters: the `liqo-stack` command line (cli/: offload, preview, promote,
cordon and drain, the dev environment's commands) and the runtime's image it builds (image)."""
