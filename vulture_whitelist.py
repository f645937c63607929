"""Names vulture (dead code: scripts/test.sh, [tool.vulture] in pyproject.toml) reports as unused in app/ and
engine/ that are used: read by a library or framework by name, or only by the tests and benches, which vulture does
not scan. vulture matches names, not objects, so each is named on a stand-in; nothing imports or runs this file.
A name belongs here only with the reason it is needed."""

from typing import Any

used: Any = None  # the stand-in for each owner below

_library_reads = (
    used.sdpMid,
    used.sdpMLineIndex,  # app/compat/whip.py: aiortc's addIceCandidate reads a candidate's media line
    used.bufferedAmountLowThreshold,  # app/webrtc/peer.py: aiortc's data channel fires "bufferedamountlow" below it
    used.pts,
    used.time_base,  # app/webrtc/rtp_audio.py: PyAV's AudioFrame timing, read by the ingest's resampler
    used.intra_op_num_threads,
    used.inter_op_num_threads,  # engine/audio/vad.py, speakers/campplus.py: ONNX Runtime
    used.relu,  # engine/speakers/campplus.py: assigning a torch submodule replaces it (an Identity, for the export)
    used.process,  # engine/logs.py: logging.LoggerAdapter calls process() for every record
    used.architectures,  # engine/asr/vllm_plugin.py: vLLM picks the model class from the HF config's architectures
    used.input_features,  # engine/asr/vllm_whisper.py: a TensorSchema field, checked by vLLM by name
    used.WindowedWhisperForConditionalGeneration,  # ...registered with vLLM's model registry by name
    used._get_prompt_updates,
    used.hf_processor_mm_kwargs,  # ...vLLM's multimodal processor hook and its signature
    used.embed_multimodal,  # ...vLLM's model interface
    used.CpuThreads,  # engine/asr/vllm_worker.py: named as vLLM's worker extension by a string (vllm_backend.py)
)

_chosen_by_value = (  # enum members a flag or an environment variable names by their value, never in code
    used.AIORTC,  # app/config.py AudioDecoder: --audio-decoder aiortc
    used.CPU,
    used.CUDA,  # engine/config.py Device: --device cpu / cuda
)

_tests_and_benches_read = (
    used.undo,  # app/webrtc/patches.py: tests give aiortc and aioice their own attributes back
    used.loaded,  # app/rooms/registry.py: tests look at a room in memory without loading it
    used.frame_of_timecode,  # app/transcripts/scc.py: the inverse of timecode(), which the tests prove it with
    used.energy,  # app/webrtc/ingest.py: tests check that sound, not silence, arrived
    used.waited,
    used.restarts,  # app/webrtc/jitter.py: the jitter buffer's counters, checked by its tests
    used.fec_samples,  # app/webrtc/rtp_audio.py: audio recovered from FEC copies, checked by tests
    used.FakeTranscriber,
    used.SharedCoreFake,
    used.die,  # engine/asr/fake.py: the recognizer the tests and benches use
    used.last_comparisons,
    used.num_speakers,  # engine/speakers/tracker.py: checked by the speaker tests
    used.captions,  # engine/stream/runner.py: a run's captions, read by benches and tests
    used.finals_inflight,
    used.background_inflight,  # engine/stream/scheduler.py: checked by the scheduling tests
    used.pids,  # engine/translate/apertium.py: the pipelines a test kills underneath
)
