"""``python -m tools.release.image build|run`` (``make image``)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from klutch_gitops.console import err, out
from tools.release.image import build as builder
from tools.release.image import runtime

image = typer.Typer(
    help="The image of both services, built without a Docker daemon (mmdebstrap, chroot).",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help, as klutch-gitops's
    add_completion=False,
)


@image.command("build")
def build_command(
    out_dir: Annotated[
        Path, typer.Option("--out", help="Directory for the OCI image layout (made or replaced)")
    ],
    tag: Annotated[
        str | None,
        typer.Option(help="REGISTRY/NAME:TAG (default: ghcr.io/anynines/klutch-gitops:VERSION)"),
    ] = None,
    archive: Annotated[
        Path | None,
        typer.Option(help="Also write the layout as one tar for docker load / kind load"),
    ] = None,
    refresh: Annotated[
        bool, typer.Option(help="Make the cached Debian root filesystem anew (security updates)")
    ] = False,
) -> None:
    """Build the image as an OCI image layout (root only: mmdebstrap and chroot need it)."""
    with err.status("building the image…") as spinner:
        built = builder.build(
            out_dir, reference=tag, archive=archive, refresh=refresh, on_step=spinner.update
        )
    for step, seconds in built.seconds.items():
        out.print(f"{step:<36} {seconds:6.1f}s")
    reused = "made now" if built.base_made else "cached"
    out.print(f"base root filesystem {built.base} ({reused})")
    out.print(f"image   {built.image.reference}")
    out.print(f"layout  {built.layout}  manifest {built.image.manifest_digest}")
    layer = built.image.layer
    out.print(f"layer   {layer.size / 2**20:.1f} MiB gzip, {layer.entries} entries")
    if archive is not None:
        out.print(f"archive {archive}  (docker load -i …; kind load image-archive …)")
    tag_name = built.image.reference.rpartition(":")[2]
    out.print(f"push    skopeo copy oci:{built.layout}:{tag_name} docker://{built.image.reference}")


@image.command("run")
def run_command(
    layout: Annotated[Path, typer.Argument(help="An OCI image layout from 'image build'")],
    args: Annotated[list[str] | None, typer.Argument(help="Arguments for the entry point")] = None,
) -> None:
    """Start the image's entry point in its unpacked root filesystem, as its user (unshare,
    chroot): a smoke test where no container runtime is installed."""
    with tempfile.TemporaryDirectory(prefix="klutch-image-run-") as scratch:
        result = runtime.run(layout, list(args or []), Path(scratch))
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    raise typer.Exit(result.returncode)
