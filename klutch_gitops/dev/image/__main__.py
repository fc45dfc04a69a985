"""``python -m klutch_gitops.dev.image``: the image commands without the ``dev`` group."""

from klutch_gitops.console import run_cli
from klutch_gitops.dev.image.cli import image

run_cli(image)
