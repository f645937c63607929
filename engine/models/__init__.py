"""Offline model preparation, never on the live path: ``resolve`` finds a model by name (the embedded default, a
local folder) and keeps the converted-checkpoint cache; ``ct2``/``ct2_whisper`` read CTranslate2 Whisper files and
``convert`` writes them out as a Hugging Face checkpoint vLLM loads."""

# The architecture our converted checkpoints name in config.json; the vLLM plugin (engine.asr.vllm_plugin)
# registers the windowed Whisper under it. Defined here so that conversion needs nothing of the live pipeline.
ARCHITECTURE = "LiveCaptionsWhisperForConditionalGeneration"
