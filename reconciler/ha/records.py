"""What a shard's holder records in its Lease for the next holder: the commit each of the shard's
repositories last passed, so a replica taking the shard over, after a kill too, can tell which
repositories had a push nobody applied yet without cloning them (``handover.py``).

The record rides on the renewals the holder writes anyway (``shards.py``): no request of its own.
A webhook's stamp on the Lease names the pushed registration too: one stamped after the holder's
last renewal was likely never seen by it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

RECORD_ANNOTATION = "gitops.klutch.anynines.com/passed-commits"  # JSON: registration -> commit


def _annotations(lease: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((lease or {}).get("metadata") or {}).get("annotations") or {}


def read_record(lease: Mapping[str, Any] | None) -> dict[str, str]:
    """The commits a shard's holder recorded; a record that is not a JSON object of strings
    (written by hand, or cut short) counts as none: it only orders work."""
    text = _annotations(lease).get(RECORD_ANNOTATION)
    try:
        record = json.loads(text) if text else {}
    except ValueError:
        record = None
    if not isinstance(record, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in record.items()
    ):
        log.info("ignoring a shard lease's unreadable record", extra={"record": text})
        return {}
    return record


def with_record(lease: Mapping[str, Any], record: Mapping[str, str]) -> dict[str, Any]:
    """``lease`` with ``record`` as its annotation (none when empty), the rest kept."""
    metadata = dict(lease.get("metadata") or {})
    annotations = dict(metadata.get("annotations") or {})
    annotations.pop(RECORD_ANNOTATION, None)
    if record:
        annotations[RECORD_ANNOTATION] = json.dumps(
            dict(sorted(record.items())), separators=(",", ":")
        )
    metadata["annotations"] = annotations
    return {**lease, "metadata": metadata}


def unseen_push(stamp: str | None, lease: Mapping[str, Any] | None) -> str | None:
    """The registration a fetch stamp (``time identity [registration]``) names, when it came
    after the Lease's last renewal: pushed while its holder was gone or going."""
    time_, _, rest = (stamp or "").partition(" ")
    _, _, name = rest.partition(" ")
    renewed = ((lease or {}).get("spec") or {}).get("renewTime") or ""
    return name or None if time_ > renewed else None
