"""A room's sentences in its languages: each sentence this front end locks, and each one an editor corrects here, is
translated into every room language and committed as a ``translation`` room event keyed by the source sentence's id
(``Room.commit_translation``). Other front ends get the events from the store, as every event.

Order and speed: one worker per room takes the sentences in the order they locked or changed; the languages of one
sentence are asked for at once (the engine service batches them across rooms, ``engine.translate``). Translation
runs after the source sentence is committed and broadcast, so it never delays a caption or its lock.

Failure: a sentence whose translation fails is committed with its source text and marked ``missing`` (a viewer of
that language shows something, and can say it is untranslated), then retried after ``RETRY_S`` seconds, each retry
an ``update`` of it. A translation whose source text changed meanwhile (an editor was quicker) is dropped: the
correction's own re-translation follows it in the queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from engine import TranslationError, TranslationRequest, normalise_language, primary

from .store.base import SPOKEN_DEFAULT, SentenceRecord

log = logging.getLogger(__name__)

SOURCE_LANGUAGE = SPOKEN_DEFAULT  # what a room is spoken in unless it was made in another language
CONTEXT_SENTENCES = 3  # the sentences before the ones translated, given to engines that use context
RETRY_S = (5.0, 30.0, 120.0)  # a failed translation is retried after each of these, then left missing
QUEUE_MAX = 2000  # sentences waiting per room; past it the oldest waiting are left untranslated (and counted)
HISTORY_MAX = 500  # a language added during an event: its translation of the sentences so far, the newest this many
MAX_ROOM_LANGUAGES = 6  # as many caption languages as the largest live-event products offer (Teams: 6)


def asked_language(raw: str, languages: Sequence[str], source: str = SOURCE_LANGUAGE) -> str | None:
    """The room language a viewer, a file or an output asks for by ``raw`` (a BCP 47 tag): None for the spoken one
    (``source``, or a tag of the same language), else one of ``languages`` (the room's): the same tag, else the
    first of the same language (``es-MX`` for ``es``). ``ValueError`` for anything else, saying which the room has
    (never repeating ``raw``)."""
    try:
        lang = normalise_language(raw)
    except ValueError:
        raise ValueError("must be a language code (BCP 47)") from None
    if lang in languages:
        return lang
    if lang.split("-")[0].lower() == source:
        return None
    # "es-MX" asked of a room in "es" (or the other way round): the same language for its reader.
    same = [have for have in languages if have.split("-")[0].lower() == lang.split("-")[0].lower()]
    if not same:
        raise ValueError(f"this room is in {', '.join([source, *languages])}, not the language asked for")
    return same[0]


def room_languages(value: object, available: frozenset[str], source: str = SOURCE_LANGUAGE) -> tuple[str, ...]:
    """A room's ``"languages"`` from a request body: distinct BCP 47 tags (normalised) that engines can produce from
    ``available`` (primary subtags: what they translate ``source``, the spoken language, into), at most
    ``MAX_ROOM_LANGUAGES``, the spoken language left out. Raises ``ValueError`` with a message for the client that
    names what can be had."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(value) > MAX_ROOM_LANGUAGES:
        raise ValueError(f'"languages" must be a list of at most {MAX_ROOM_LANGUAGES} language codes (BCP 47)')
    out: list[str] = []
    for raw in value:
        try:
            lang = normalise_language(raw)
        except ValueError:
            raise ValueError(f'{raw[:40]!r} is not a language code (BCP 47, such as "es" or "pt-BR")') from None
        spoken = lang.split("-")[0] == source
        if lang.split("-")[0] not in available and not spoken:
            can = ", ".join(sorted(available)) or "none (this server has no translation engine)"
            raise ValueError(f"this server cannot translate {source!r} into {lang!r}; it can into: {can}")
        if not spoken and lang not in out:
            out.append(lang)
    return tuple(out)


class Translates(Protocol):
    """What a room needs of the translation engines (``engine.TranslationService``)."""

    def targets(self, source: str) -> frozenset[str]: ...

    def names(self) -> list[str]: ...

    def warm(self, source: str, targets: Sequence[str]) -> None:
        """Start the engines for these pairs (blocking: called in a thread)."""

    async def translate(self, request: TranslationRequest) -> list[str]: ...


Commit = Callable[[str, Mapping[int, str], Mapping[int, str], bool, Sequence[int]], Awaitable[object]]


@dataclass
class TranslationStats:
    """Counters over every room of a server (``/metrics``, ``/ready``)."""

    sentences: int = 0  # translations committed (a sentence into one language)
    failures: int = 0  # engine calls that failed (each retried)
    missing: int = 0  # sentences committed with their source text because their translation failed
    dropped: int = 0  # sentences left untranslated because a room's queue was full


@dataclass(frozen=True)
class _Job:
    lang: str
    sentences: tuple[SentenceRecord, ...]  # as they were when queued: their text is what gets translated
    update: bool  # they have a translation in ``lang`` already (a correction, a retry)
    context: tuple[str, ...] = ()
    attempt: int = 0


@dataclass
class RoomTranslating:
    """The translation side of one room. ``languages`` reads the room's languages now; ``commit(lang, texts,
    sources, update, missing)`` commits a translation event (``texts``: id -> translation; ``sources``: id -> the
    source text it translates, checked against the sentence as it is now)."""

    room_id: str
    service: Translates
    languages: Callable[[], tuple[str, ...]]
    commit: Commit
    stats: TranslationStats = field(default_factory=TranslationStats)
    source: str = SOURCE_LANGUAGE
    _queue: deque[_Job] = field(default_factory=deque)
    _recent: deque[str] = field(default_factory=lambda: deque(maxlen=CONTEXT_SENTENCES))
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _worker: asyncio.Task[None] | None = None
    _retries: set[asyncio.Task[None]] = field(default_factory=set)
    _closed: bool = False

    @property
    def busy(self) -> bool:
        """Translations queued, being made or to be retried (the room must stay in memory for them)."""
        return bool(self._queue or self._retries) or (
            self._worker is not None and not self._worker.done() and self._wake.is_set()
        )

    @property
    def waiting(self) -> int:
        """Sentences (one per language) queued and not yet translated."""
        return sum(len(job.sentences) for job in self._queue)

    def locked(self, records: Sequence[SentenceRecord]) -> None:
        """Sentences this front end just committed (newly locked, or a split's new part)."""
        context = tuple(self._recent)
        self._recent.extend(r.text for r in records)
        for lang in self._targets():
            self._put(_Job(lang, tuple(records), update=False, context=context))

    def corrected(self, replaced: Sequence[SentenceRecord]) -> None:
        """Sentences an editor changed here (their new text): translated again into every language."""
        for lang in self._targets():
            self._put(_Job(lang, tuple(replaced), update=True))

    def added(self, lang: str, history: Sequence[SentenceRecord]) -> None:
        """Room language ``lang`` was added: its translation of the sentences so far (the newest ``HISTORY_MAX``)."""
        if lang not in self._targets():
            return
        history = list(history)[-HISTORY_MAX:]
        for i in range(0, len(history), 20):  # a batch at a time: live sentences can go in between
            self._put(_Job(lang, tuple(history[i : i + 20]), update=True))

    def _targets(self) -> list[str]:
        """The room's languages that an engine makes from its spoken one. A language only the speech gives (the
        words said by a publisher of Whisper's translate task, ``Room.commit_original``) is none of them."""
        can = self.service.targets(self.source)
        return [lang for lang in self.languages() if primary(lang) in can]

    def close(self) -> None:
        """The room leaves memory or the server stops: what is queued is left (the store has the source text)."""
        self._closed = True
        for task in [*self._retries, *([self._worker] if self._worker else [])]:
            task.cancel()
        self._queue.clear()

    def _put(self, job: _Job) -> None:
        if self._closed or not job.sentences:
            return
        while self._queue and self.waiting + len(job.sentences) > QUEUE_MAX:
            self.stats.dropped += len(self._queue.popleft().sentences)
        self._queue.append(job)
        self._wake.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name=f"translate-{self.room_id}")

    async def _work(self) -> None:
        while not self._closed:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            # Every language's job for the same sentences at once: the engine service runs them back to back.
            first = self._queue.popleft()
            jobs = [first]
            while (
                self._queue
                and self._queue[0].sentences == first.sentences
                and self._queue[0].lang not in {j.lang for j in jobs}
            ):
                jobs.append(self._queue.popleft())
            await asyncio.gather(*(self._run(job) for job in jobs))

    async def _run(self, job: _Job) -> None:
        texts = tuple(s.text for s in job.sentences)
        sources = {s.id: s.text for s in job.sentences}
        try:
            out = await self.service.translate(TranslationRequest(self.source, job.lang, texts, job.context))
        except TranslationError as exc:
            self.stats.failures += 1
            log.warning(
                "room %s: translation into %s failed (%s); attempt %d", self.room_id, job.lang, exc, job.attempt + 1
            )
            if job.attempt == 0 and not job.update:  # the audience of that language sees the source meanwhile
                await self._commit(job.lang, sources, sources, False, tuple(sources))
                self.stats.missing += len(sources)
            if job.attempt < len(RETRY_S):
                self._retry(_Job(job.lang, job.sentences, True, job.context, job.attempt + 1), RETRY_S[job.attempt])
            return
        await self._commit(job.lang, dict(zip(sources, out, strict=True)), sources, job.update, ())
        self.stats.sentences += len(out)

    async def _commit(
        self, lang: str, texts: Mapping[int, str], sources: Mapping[int, str], update: bool, missing: Sequence[int]
    ) -> None:
        try:
            await self.commit(lang, texts, sources, update, missing)
        except Exception:  # a store failure is the journal's to keep; anything else must not stop the worker
            log.exception("room %s: could not commit a translation into %s", self.room_id, lang)

    def _retry(self, job: _Job, after_s: float) -> None:
        async def later() -> None:
            await asyncio.sleep(after_s)
            self._put(job)

        task = asyncio.create_task(later(), name=f"translate-retry-{self.room_id}")
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)
