"""The `liqo-stack` command line."""

from __future__ import annotations

import click

from liqo_stack.operating.cli.demo import demo
from liqo_stack.operating.cli.dev import dev
from liqo_stack.operating.cli.image import image
from liqo_stack.operating.cli.info import info
from liqo_stack.operating.cli.offload import offload, unoffload
from liqo_stack.operating.cli.offload_selector import offload_namespaces, unoffload_namespaces
from liqo_stack.operating.cli.preview import preview
from liqo_stack.operating.cli.preview_pod import preview_pod_command
from liqo_stack.operating.cli.promote import promote
from liqo_stack.operating.cli.tenants import cordon, drain, uncordon


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Extend a Kubernetes cluster onto foreign clusters through virtual nodes."""


main.add_command(dev)
main.add_command(demo)
main.add_command(offload)
main.add_command(unoffload)
assert offload.get_command(click.Context(offload), "namespaces") is offload_namespaces  # registered on import
assert unoffload.get_command(click.Context(unoffload), "namespaces") is unoffload_namespaces
main.add_command(info)
main.add_command(image)
preview.add_command(preview_pod_command)
main.add_command(preview)
main.add_command(promote)
main.add_command(cordon)
main.add_command(uncordon)
main.add_command(drain)
