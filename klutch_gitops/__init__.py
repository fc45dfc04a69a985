"""klutch-gitops: Git as the front door of Klutch multi-cluster data services."""

from importlib.metadata import version

__version__ = version("klutch-gitops")
