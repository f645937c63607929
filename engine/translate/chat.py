"""An OpenAI-compatible chat-completions endpoint as a translator: in production ``vllm serve`` of an
instruction-tuned model on the GPU tier (``--translate-url http://gpu-host:8000 --translate-model <name>``); any
server that speaks ``POST /v1/chat/completions`` does. It translates far better than Apertium, and into many more
languages (``DEFAULT_TARGETS`` unless told others).

One call is one request (``request_body``): a system message (``SYSTEM_PROMPT``, with the two languages' English
names) and one user message holding the context sentences (to read, not to translate) and the sentences to
translate, numbered from 1; ``temperature`` 0. The answer must hold exactly one line ``N. translation`` per sentence
(``parse_reply``: other lines, such as a preamble, a code fence or a reasoning model's ``<think>`` block, are
skipped); a missing, empty or cut-short line is a ``TranslationError``, and the room keeps the source text and retries.

With no model named, the first one ``GET /v1/models`` lists is used (a ``vllm serve`` serves one). Redirects are never
followed, so the API key goes only to the URL the operator gave.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx

from engine.translate.base import TranslationError, TranslationRequest
from engine.translate.languages import language_name, primary

TIMEOUT_S = 20.0  # one request; a GPU-served 8B model answers a few sentences in well under a second
# What an LLM can be trusted with by default (an operator names others with ``targets``): the languages the common
# open instruction-tuned models (Llama 3, Qwen 2.5, Gemma 2, Mistral) are documented to handle well.
DEFAULT_TARGETS = frozenset(
    {
        "ar",
        "ca",
        "cs",
        "da",
        "de",
        "el",
        "en",
        "es",
        "fi",
        "fr",
        "gl",
        "he",
        "hi",
        "hu",
        "id",
        "it",
        "ja",
        "ko",
        "nl",
        "no",
        "pl",
        "pt",
        "ro",
        "ru",
        "sv",
        "th",
        "tr",
        "uk",
        "vi",
        "zh",
    }
)

SYSTEM_PROMPT = (
    "You translate live captions of speech from {source} into {target}. The user gives you numbered sentences to "
    "translate, and may first give you earlier sentences of the same speech as context: read the context to "
    "understand the sentences, but do not translate it. Translate each numbered sentence on its own, keeping its "
    "meaning, names, numbers and register of speech; add, explain and leave out nothing. Answer with exactly one "
    "line per numbered sentence, in order, written as its number, a full stop, a space and the translation "
    '(for example "1. ..."). No other text: no notes, no commentary, no quotation marks around the lines.'
)
"""The system message of every request (``str.format`` fills in ``source`` and ``target``: English names of the
languages, such as "English" and "Portuguese (BR)"). docs/protocol.md points here: this is what a model is told."""

CONTEXT_HEADING = "Context (earlier sentences, not to translate):"
SENTENCES_HEADING = "Sentences to translate:"
_LINE = re.compile(r"^\s*(?:[-*]\s+)?\**(\d{1,4})\**\s*[.):]\s*(.*?)\s*$")  # "1. x", "2) x", "- **3.** x"
_THINKING = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)


def _one_line(text: str) -> str:
    """A sentence on one line: a line break inside it would end its numbered line early."""
    return " ".join(text.split())


def request_body(model: str, request: TranslationRequest) -> dict[str, Any]:
    """The chat-completions request for ``request``'s texts (see the module); the texts all non-empty."""
    system = SYSTEM_PROMPT.format(source=language_name(request.source), target=language_name(request.target))
    parts = []
    if request.context:
        parts.append("\n".join([CONTEXT_HEADING, *(_one_line(t) for t in request.context)]))
    parts.append("\n".join([SENTENCES_HEADING, *(f"{i}. {_one_line(t)}" for i, t in enumerate(request.texts, 1))]))
    return {
        "model": model,
        "temperature": 0,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}],
    }


def parse_reply(content: str, count: int) -> list[str]:
    """The ``count`` translations in a reply's text: the first line numbered ``N`` for each N from 1 to ``count``,
    in number order; lines not so numbered are skipped. Raises ``TranslationError`` when one is missing or empty."""
    found: dict[int, str] = {}
    for line in _THINKING.sub("", content).splitlines():
        match = _LINE.match(line)
        if match and 1 <= (number := int(match[1])) <= count:
            found.setdefault(number, match[2])
    missing = [n for n in range(1, count + 1) if not found.get(n)]
    if missing:
        raise TranslationError(
            f"the chat endpoint's answer lacks {len(missing)} of {count} numbered lines (first missing: {missing[0]})"
        )
    return [found[n] for n in range(1, count + 1)]


def completions_url(url: str) -> str:
    """``{url}/v1/chat/completions``, with ``url`` given with or without its ``/v1``. Raises ``ValueError`` for a
    URL that is not http(s) with a host."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"not an http(s) base URL: {url[:80]!r}")
    base = url.strip().rstrip("/")
    return (base if base.endswith("/v1") else base + "/v1") + "/chat/completions"


def _reason(response: httpx.Response) -> str:
    """A short why for a refused request: the status, and the API's own ``error.message`` when it gives one."""
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = ""
    if response.is_redirect:
        message = "a redirect, not followed"
    return f"HTTP {response.status_code}" + (f": {str(message)[:200]}" if message else "")


class ChatTranslator:
    """The endpoint at ``url`` (its base, with or without ``/v1``) serving ``model`` (empty: the first it lists).
    ``api_key``: sent as a bearer token. ``timeout_s``: the most one request may take. ``targets``: the languages
    (primary subtags) it is asked for (default ``DEFAULT_TARGETS``). Raises ``ValueError`` for a bad URL."""

    name = "chat"
    uses_context = True

    def __init__(
        self,
        url: str,
        model: str = "",
        api_key: str | None = None,
        *,
        timeout_s: float = TIMEOUT_S,
        targets: Iterable[str] | None = None,
    ) -> None:
        self.url = completions_url(url)
        self.model = model
        self._targets = frozenset(primary(t) for t in targets) if targets is not None else DEFAULT_TARGETS
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout_s, follow_redirects=False, headers=headers)
        self._model_lock = threading.Lock()

    def targets(self, source: str) -> frozenset[str]:
        return self._targets - {primary(source)}

    def translate(self, request: TranslationRequest) -> list[str]:
        # Empty texts are not worth a line the model might fill with something: they come back as they are.
        asked = [i for i, text in enumerate(request.texts) if text.strip()]
        out = list(request.texts)
        if not asked:
            return out
        some = TranslationRequest(
            request.source, request.target, tuple(request.texts[i] for i in asked), request.context
        )
        reply = self._post(self.url, request_body(self._model(), some))
        try:
            choice = reply["choices"][0]
            content, finish = choice["message"]["content"], choice.get("finish_reason")
        except (KeyError, IndexError, TypeError):
            raise TranslationError("the chat endpoint's answer is not a chat completion") from None
        if not isinstance(content, str):
            raise TranslationError("the chat endpoint's answer has no text")
        if finish == "length":
            raise TranslationError("the chat endpoint's answer was cut short (finish_reason: length)")
        for i, text in zip(asked, parse_reply(content, len(asked)), strict=True):
            out[i] = text
        return out

    def _model(self) -> str:
        """``model``, or the first model the endpoint lists (asked once)."""
        with self._model_lock:
            if not self.model:
                listed = self._get(self.url.removesuffix("/chat/completions") + "/models")
                try:
                    self.model = str(listed["data"][0]["id"])
                except (KeyError, IndexError, TypeError):
                    raise TranslationError("no --translate-model given, and the endpoint lists no model") from None
            return self.model

    def _post(self, url: str, body: dict[str, Any]) -> Any:
        return self._answer(lambda: self._client.post(url, json=body))

    def _get(self, url: str) -> Any:
        return self._answer(lambda: self._client.get(url))

    def _answer(self, send: Callable[[], httpx.Response]) -> Any:
        """The JSON of a 200 answer to ``send()``. Raises ``TranslationError`` for anything else."""
        if self._client.is_closed:
            raise TranslationError("the chat translator is closed")
        try:
            response = send()
        except httpx.HTTPError as exc:  # connection refused, timed out, reset, bad HTTP
            raise TranslationError(f"the chat endpoint: {type(exc).__name__}: {exc}") from exc
        except RuntimeError:  # httpx's "the client has been closed": close() came in another thread
            if self._client.is_closed:
                raise TranslationError("the chat translator is closed") from None
            raise
        if response.status_code != 200:
            raise TranslationError(f"the chat endpoint answered {_reason(response)}")
        try:
            return response.json()
        except ValueError:
            raise TranslationError("the chat endpoint's answer is not JSON") from None

    def close(self) -> None:
        self._client.close()
