"""`liqo-stack image build`: the runtime's OCI image, without Docker (liqo_stack/operating/image.py)."""

from __future__ import annotations

from pathlib import Path

import click

from liqo_stack.operating import image as runtime_image
from runtime.api import names

PROJECT_DIR = Path(__file__).resolve().parents[3]


@click.group()
def image() -> None:
    """The runtime's container image (cluster mode)."""


def _default_output() -> str:
    version = runtime_image.project_version(PROJECT_DIR)
    return f"oci-archive:dist/{names.RUNTIME_IMAGE_NAME}-{version}.tar"


@image.command()
@click.option(
    "--output",
    default=_default_output,
    show_default="oci-archive:dist/liqo-stack-<version>.tar",
    help="oci-archive:FILE (one file, for `skopeo copy` to a registry) or oci:DIR (an OCI layout)",
)
def build(output: str) -> None:
    """Build the image: a minimal Debian with Python and the runtime, user 65532, `python -m runtime`."""
    try:
        built = runtime_image.build(output, project_dir=PROJECT_DIR, progress=lambda line: click.echo(line, err=True))
    except runtime_image.ImageBuildError as err:
        raise click.ClickException(str(err)) from None
    megabytes = 1024 * 1024
    click.echo(
        f"built {built.reference} in {built.seconds:.0f}s (base {'cached' if built.base_cached else 'built'}, "
        f"dependencies {'cached' if built.dependencies_cached else 'installed'}): "
        f"{built.compressed_bytes / megabytes:.1f} MiB compressed, {built.rootfs_bytes / megabytes:.1f} MiB unpacked"
    )
    click.echo(f"output {built.output}")
    click.echo(f"digest {built.digest}")
    click.echo("publish and pin it:")
    click.echo(f"  skopeo copy {built.output} docker://REGISTRY/{built.reference}")
    click.echo(f"  pulumi config set --path liqo:runtime.image REGISTRY/{built.reference}")
    click.echo(f"  pulumi config set --path liqo:runtime.imageDigest {built.digest}")
