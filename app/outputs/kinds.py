"""The kinds of output, by the name the API gives them: how to make each one's ``Target`` from its configuration,
and what of it to keep across restarts.

OBS's target (``app.outputs.obs``) is imported when an OBS output is made, not before: a server that never sends
to OBS never loads its client.
"""

from __future__ import annotations

from collections.abc import Callable

from .destinations import DestinationPolicy
from .layout import Layout
from .spec import OutputKind, OutputSpec
from .target import Target, TargetError
from .youtube import YouTubeTarget

# A target of a configuration, connecting only where the policy allows.
Factory = Callable[[OutputSpec, Layout, DestinationPolicy], Target]


def _youtube(spec: OutputSpec, layout: Layout, policy: DestinationPolicy) -> Target:
    return YouTubeTarget(spec.url, layout.break_lines, acknowledged=spec.resume.get("seq", 0), policy=policy)


def _obs(spec: OutputSpec, layout: Layout, policy: DestinationPolicy) -> Target:
    from .obs import ObsTarget  # loaded on first use (see the module)

    return ObsTarget(spec.url, spec.password, policy=policy)


FACTORIES: dict[OutputKind | str, Factory] = {OutputKind.YOUTUBE: _youtube, OutputKind.OBS: _obs}


def make_target(spec: OutputSpec, layout: Layout, policy: DestinationPolicy) -> Target:
    """The target of ``spec``, connecting only where ``policy`` allows. Raises ``TargetError`` (permanent) for a
    kind this server does not know (a stored output of a newer version), ``ValueError`` for a configuration the
    target refuses."""
    factory = FACTORIES.get(spec.kind)
    if factory is None:
        raise TargetError(f"unknown output kind {spec.kind!r}", permanent=True)
    return factory(spec, layout, policy)


def resume_state(target: Target) -> dict[str, int]:
    """What ``target`` must find again after a restart (YouTube: the last ``seq`` it acknowledged, so the count goes
    on); empty for kinds that need nothing."""
    if isinstance(target, YouTubeTarget):
        return {"seq": target.acknowledged}
    return {}
