"""``python -m tools.release.image build|run`` from the checkout's root."""

from klutch_gitops.console import run_cli
from tools.release.image.cli import image

run_cli(image)
