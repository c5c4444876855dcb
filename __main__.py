"""liqo-stack's Pulumi program: see liqo_stack/declaring/program.py."""

import liqo_stack

liqo_stack.main()
