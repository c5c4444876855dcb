"""liqo-stack's Pulumi program: see liqo_stack/declaring/program.py."""

from liqo_stack.declaring.program import main

main()
