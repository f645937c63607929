"""Translation of locked caption sentences into a room's languages.

Engines behind one interface (``base``: ``Translator``, ``TranslationRequest``, ``TranslationError``): Apertium,
offline, from Debian (``apertium``); an OpenAI-compatible chat-completions endpoint (``chat``). ``service`` runs them
for every room off the event loop, in one worker thread, batched across rooms. Language tags are BCP 47
(``languages``). Whisper's own translate task (speech into English) is the recognizer's, not here.
"""

from engine.translate.apertium import ApertiumTranslator
from engine.translate.base import TranslationError, TranslationRequest, Translator, UnsupportedPair
from engine.translate.chat import ChatTranslator
from engine.translate.languages import language_name, normalise_language, primary
from engine.translate.service import ServiceConfig, TranslationService, TranslationStats

__all__ = [
    "ApertiumTranslator",
    "ChatTranslator",
    "ServiceConfig",
    "TranslationError",
    "TranslationRequest",
    "TranslationService",
    "TranslationStats",
    "Translator",
    "UnsupportedPair",
    "language_name",
    "normalise_language",
    "primary",
]
