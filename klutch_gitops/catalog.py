"""The catalog's files: what a Control Plane offers as data services, read from ``catalog/``.

- ``xrds/``: CompositeResourceDefinitions of the Klutch claim kinds (group ``anynines.com``).
- ``compositions/<backend>/``: the Compositions of one backend; ``a8s`` and ``a9s`` are what a
  production Control Plane runs (``mode: Pipeline``), other folders (``local``) serve other stacks.
- ``templates/``: the APIServiceExportTemplates that offer the claim kinds for binding.
- ``examples/``: example claims of every kind.

This module only reads; applying is the caller's (server-side, XRDs before Compositions).

Where: a wheel carries ``catalog/`` as the package data ``klutch_gitops/_catalog`` (pyproject.toml's
package-dir mapping); a source checkout or an editable install reads ``catalog/`` beside the
packages. Every module that reads a catalog file starts from ``CATALOG_DIR``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.errors import KlutchError


def catalog_dir() -> Path:
    """The installed package data when there is some, else the source checkout's ``catalog/``."""
    here = Path(__file__).resolve()
    packaged = here.with_name("_catalog")
    return packaged if packaged.is_dir() else here.parents[1] / "catalog"


CATALOG_DIR = catalog_dir()
XRD_DIR = CATALOG_DIR / "xrds"
COMPOSITION_DIR = CATALOG_DIR / "compositions"
TEMPLATE_DIR = CATALOG_DIR / "templates"
EXAMPLE_DIR = CATALOG_DIR / "examples"
PRODUCTION_BACKENDS = ("a8s", "a9s")


def read_documents(directory: Path) -> list[dict[str, Any]]:
    """Every YAML document in the ``*.yaml`` files under ``directory``, in path order."""
    if not directory.is_dir():  # rglob would find nothing and the catalog would look empty
        raise KlutchError(
            f"the catalog folder {directory} is missing",
            "reinstall klutch-gitops from its wheel, which carries the catalog",
        )
    documents: list[dict[str, Any]] = []
    for path in sorted(directory.rglob("*.yaml")):
        try:
            documents += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        except yaml.YAMLError as error:
            raise KlutchError(
                f"{path} is not valid YAML: {error}", "fix the file, it is part of the catalog"
            ) from error
    return documents


def load_xrds() -> list[dict[str, Any]]:
    """The CompositeResourceDefinitions, sorted by file name."""
    return read_documents(XRD_DIR)


def load_compositions(backends: Iterable[str] = PRODUCTION_BACKENDS) -> list[dict[str, Any]]:
    """The Compositions of ``backends`` (folder names under ``catalog/compositions``)."""
    compositions: list[dict[str, Any]] = []
    for backend in backends:
        directory = COMPOSITION_DIR / backend
        if not directory.is_dir():
            known = sorted(path.name for path in COMPOSITION_DIR.iterdir() if path.is_dir())
            raise KlutchError(
                f"the catalog has no compositions for backend {backend!r}",
                f"use one of: {', '.join(known)}",
            )
        compositions += read_documents(directory)
    return compositions


def load_templates() -> list[dict[str, Any]]:
    """The APIServiceExportTemplates (namespace ``crossplane-system``, as Klutch ships them)."""
    return read_documents(TEMPLATE_DIR)


def load_examples() -> list[dict[str, Any]]:
    """The example claims, without a namespace: apply them into the one you choose."""
    return read_documents(EXAMPLE_DIR)


def load_catalog(backends: Iterable[str] = PRODUCTION_BACKENDS) -> list[dict[str, Any]]:
    """XRDs, then the backends' Compositions, then the templates: the order to apply them in."""
    return load_xrds() + load_compositions(backends) + load_templates()
