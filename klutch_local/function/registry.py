"""Every composer function-klutch-local serves, by the name a Composition's input gives it:
the Klutch-compatible claims' (``composers.py``) and the namespaced flavour's
(``namespaced.py``)."""

from __future__ import annotations

from typing import Any

from klutch_local.function import composers, namespaced
from klutch_local.function.composers import Composer, CompositionError

COMPOSERS: dict[str, Composer] = {**composers.COMPOSERS, **namespaced.COMPOSERS}


def compose(xr: dict[str, Any], step_input: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The desired composed resources for ``xr``, by the composer ``step_input`` names."""
    name = step_input.get("compose")
    composer = COMPOSERS.get(str(name))
    if composer is None:
        raise CompositionError(
            f"the Composition's function input names compose: {name!r}; "
            f"function-klutch-local composes one of: {', '.join(sorted(COMPOSERS))}"
        )
    return composer(xr, step_input)
