"""liqo-stack's Pulumi program: see liqo_stack/program.py."""

from liqo_stack.program import main

main()
