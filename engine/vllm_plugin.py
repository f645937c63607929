"""vLLM general plugin (entry point group ``vllm.general_plugins``): registers the windowed Whisper variant.

vLLM calls ``register`` in every process that builds a model (the front process, the engine core and each
worker), so the architecture named here resolves wherever the model loads: in the in-process ``AsyncLLM`` of this
server and in ``vllm serve`` on a GPU machine where this project is pip-installed. Registration is lazy (a
``module:class`` string): importing this module imports neither torch nor the model code.

A model selects the variant through its config's ``architectures``: the embedded models' converted checkpoints
name it, and ``whisper_overrides`` (handed to vLLM as ``hf_overrides``) renames any other Whisper checkpoint,
e.g. a hub id, to it.
"""

from __future__ import annotations

from typing import Any

ARCHITECTURE = "LiveCaptionsWhisperForConditionalGeneration"
MODEL_CLASS = "engine.vllm_whisper:WindowedWhisperForConditionalGeneration"


def register() -> None:
    """Register ``ARCHITECTURE`` with vLLM's model registry (idempotent)."""
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS)


def whisper_overrides(hf_config: Any) -> Any:
    """``hf_overrides`` for vLLM: a Whisper config runs as the windowed variant; any other model is untouched."""
    if getattr(hf_config, "model_type", None) == "whisper":
        hf_config.architectures = [ARCHITECTURE]
    return hf_config
