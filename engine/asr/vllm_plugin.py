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

import multiprocessing
import multiprocessing.connection
import os
import threading
from typing import Any

from engine.models import ARCHITECTURE

__all__ = ["ARCHITECTURE", "MODEL_CLASS", "register"]
MODEL_CLASS = "engine.asr.vllm_whisper:WindowedWhisperForConditionalGeneration"


_watching_parent = False


def register() -> None:
    """Register ``ARCHITECTURE`` with vLLM's model registry (idempotent); in a child process (vLLM's engine core,
    its workers), also make the process end with its parent."""
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS)
    die_with_parent()


def die_with_parent() -> None:
    """If this process was started by ``multiprocessing`` (as vLLM starts its engine core), end it the moment
    its parent ends, however the parent ended. A SIGKILLed server otherwise leaves its engine core (GBs of
    weights and KV cache) running, holding the memory a restarted server needs. A thread waits on the parent's
    sentinel (readable once the parent is gone); unlike ``PR_SET_PDEATHSIG``, it does not fire when merely the
    thread that started the child ends."""
    global _watching_parent
    parent = multiprocessing.parent_process()
    if parent is None or _watching_parent:
        return
    _watching_parent = True

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)  # nothing to save: the engine core's only state is the requests of a client that is gone

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def whisper_overrides(hf_config: Any) -> Any:
    """``hf_overrides`` for vLLM: a Whisper config runs as the windowed variant; any other model is untouched."""
    if getattr(hf_config, "model_type", None) == "whisper":
        hf_config.architectures = [ARCHITECTURE]
    return hf_config
