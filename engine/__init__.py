"""Speech half of live captions: framing, VAD, endpointing, speakers, transcription and session state.

Nothing here imports web code. Drive it from a file (``python -m engine``), a test, a benchmark or the server.

This module is the engine's public API, and the only part of it the transport (``app/``) imports: create one
``CaptionEngine`` per process from an ``EngineConfig``, ``open_session`` per caller (a ``Session`` handle: feed
audio, read messages, stop), and speak the wire protocol (``protocol``: message types and their JSON form).
To count what the engine does (metrics), add an ``EngineObserver`` to ``CaptionEngine.observers``.
The subpackages are the data path in order: ``audio`` -> ``stream`` -> ``asr`` / ``speakers``; ``models``
prepares weights offline.
"""

from engine import protocol
from engine.asr.instances import normalise_url as normalise_asr_url
from engine.asr.transcriber import DECODE_KINDS
from engine.audio.pcm import CHUNK_SAMPLES, SAMPLE_RATE
from engine.config import (
    ENDPOINT_PRESETS,
    WINDOW_MODES,
    Device,
    EndpointPreset,
    EngineConfig,
    SessionOptions,
    TranscriberConfig,
    WindowMode,
)
from engine.errors import BadAudio, EngineError, EngineNotReady, IllegalTransition, ModelError
from engine.logs import SessionLog
from engine.observe import EngineObserver
from engine.protocol import LANGUAGE_CODES, LANGUAGES, MAX_HOTWORDS, ErrorCode
from engine.settings import Declared, borrow, declared, member_of, nested, setting, values_of
from engine.speakers.models import DEFAULT_SPEAKER_MODEL, SPEAKER_MODEL_NAMES
from engine.stream.capacity import CapacityEstimate
from engine.stream.crosstalk import CrossTalk, CrossTalkConfig, Microphone
from engine.stream.engine import CaptionEngine, EngineState
from engine.stream.session import Session, SessionState
from engine.stream.speech import Heard, SpeechEvent, SpeechStarted, SpeechStopped
from engine.translate import (
    ApertiumTranslator,
    ChatTranslator,
    TranslationError,
    TranslationRequest,
    TranslationService,
    Translator,
    language_name,
    normalise_language,
    primary,
)

__all__ = [
    "CHUNK_SAMPLES",
    "DECODE_KINDS",
    "DEFAULT_SPEAKER_MODEL",
    "ENDPOINT_PRESETS",
    "LANGUAGES",
    "LANGUAGE_CODES",
    "MAX_HOTWORDS",
    "SAMPLE_RATE",
    "SPEAKER_MODEL_NAMES",
    "WINDOW_MODES",
    "ApertiumTranslator",
    "BadAudio",
    "CapacityEstimate",
    "CaptionEngine",
    "ChatTranslator",
    "CrossTalk",
    "CrossTalkConfig",
    "Declared",
    "Device",
    "EndpointPreset",
    "EngineConfig",
    "EngineError",
    "EngineNotReady",
    "EngineObserver",
    "EngineState",
    "ErrorCode",
    "Heard",
    "IllegalTransition",
    "Microphone",
    "ModelError",
    "Session",
    "SessionLog",
    "SessionOptions",
    "SessionState",
    "SpeechEvent",
    "SpeechStarted",
    "SpeechStopped",
    "TranscriberConfig",
    "TranslationError",
    "TranslationRequest",
    "TranslationService",
    "Translator",
    "WindowMode",
    "borrow",
    "declared",
    "language_name",
    "member_of",
    "nested",
    "normalise_asr_url",
    "normalise_language",
    "primary",
    "protocol",
    "setting",
    "values_of",
]
