"""The reconciler's config file, validated by ``models.reconciler.ReconcilerConfig`` and built into
the runtime ``Config``: the one builder, also of the defaults (``defaults``) that tests, the bench
and the demo start from, so every default is written once, in the models.

Every problem in the file is reported at once, each naming the field path and the fix, so one edit
fixes them all.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from klutch_gitops import config as runtime
from klutch_gitops.models import reconciler as model
from klutch_gitops.models.problems import parse_yaml, validate
from klutch_gitops.models.refs import resolve
from klutch_gitops.models.registration import registration_spec
from klutch_gitops.settings import read_config_file

FIX = "edit the config file and run again"


def load_config(path: Path) -> runtime.Config:
    return parse_config(read_config_file(path), str(path), path.parent)


def parse_config(text: str, origin: str, base: Path) -> runtime.Config:
    """Parse and validate; raise one KlutchError listing every problem found."""
    data = validate(model.ReconcilerConfig, parse_yaml(text, origin), origin, FIX)
    return build_config(data, base)


def build_config(data: model.ReconcilerConfig, base: Path) -> runtime.Config:
    """The runtime Config of a validated file; relative paths resolve against ``base``."""
    election = data.leader_election
    return runtime.Config(
        control_plane_kubeconfig=resolve(base, data.control_plane.kubeconfig),
        repositories=tuple(
            registration_spec(
                entry,
                entry.references(base),
                name=entry.name,
                consumer_namespace=entry.consumer_namespace,
            )
            for entry in data.repositories
        ),
        platform=build_platform(data.platform, base) if data.platform else None,
        listen=data.listen,
        poll_interval=data.poll_interval,
        batch_window=data.batch_window,
        workers=data.workers,
        work_dir=resolve(base, data.work_dir) if data.work_dir else model.WORK_DIR,
        bot=runtime.Bot(name=data.bot.name, email=data.bot.email),
        binder_tokens=runtime.TokenRenewal(
            lifetime=data.binder_tokens.lifetime, renew_before=data.binder_tokens.renew_before
        ),
        leader_election=runtime.LeaderElection(
            enabled=election.enabled,
            namespace=election.namespace or "",
            name=election.name,
            lease_duration=election.lease_duration,
            renew_deadline=election.renew_deadline,
            retry_period=election.retry_period,
            shards=election.shards,
        ),
        metrics_token=data.metrics_token.ref(base) if data.metrics_token else None,
    )


def build_platform(platform: model.Platform, base: Path) -> runtime.PlatformSpec:
    return runtime.PlatformSpec(
        url=platform.url,
        branch=platform.branch,
        path=platform.path,
        credentials=platform.credentials.ref(base) if platform.credentials else None,
        webhook_secret=platform.webhook_secret.ref(base) if platform.webhook_secret else None,
    )


@cache
def defaults() -> runtime.Config:
    """The Config of a file that sets nothing but the Control Plane's kubeconfig (``kubeconfig``):
    the models' defaults as runtime values, whose parts (``defaults().bot``) stand for them."""
    minimal = {"controlPlane": {"kubeconfig": "kubeconfig"}}
    return build_config(model.ReconcilerConfig.model_validate(minimal), Path())


def config_from(control_plane_kubeconfig: Path, **fields: Any) -> runtime.Config:
    """``defaults()`` on another kubeconfig, with ``fields`` (runtime values) in their place."""
    return replace(defaults(), control_plane_kubeconfig=control_plane_kubeconfig, **fields)


def platform_from(url: str, **fields: Any) -> runtime.PlatformSpec:
    """The platform of a file that sets only its ``url``, with ``fields`` in their place."""
    platform = model.Platform.model_validate({"url": url})
    return replace(build_platform(platform, Path()), **fields)
