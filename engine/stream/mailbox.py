"""A coalescing mailbox for one session's outgoing messages (like vLLM's per-request output collector).

Messages keep their order. A caption update posted while the previous caption update is still waiting merges into
it: its newly locked sentences are appended (they always get through) and its partial text replaces the waiting
one. So a slow reader gets fewer, fuller messages instead of a backlog of stale partials. ``seq`` is assigned when
a message is taken, so it increases by one per delivered message.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Sequence

from engine.protocol import Caption, Sentence, ServerMessage, Word


class Mailbox:
    """Single consumer. ``post_*`` are synchronous and never block; ``get`` waits for the next message."""

    def __init__(self) -> None:
        self._queue: deque[ServerMessage] = deque()
        self._ready = asyncio.Event()
        self._seq = 0
        self.closed = False

    def post_caption(
        self,
        sentences: list[Sentence],
        partial: str,
        *,
        is_final: bool = False,
        latency_ms: int | None = None,
        partial_spk: int | None = None,
        stable: int = 0,
        stable_words: Sequence[Word] = (),
    ) -> None:
        """Queue a caption update, merging into a waiting non-final one (``stable`` describes ``partial`` and is
        replaced with it; ``stable_words`` are each sent once, so they add up)."""
        tail = self._queue[-1] if self._queue else None
        if isinstance(tail, Caption) and not tail.is_final:
            tail.sentences.extend(sentences)
            tail.partial = partial
            tail.partial_spk = partial_spk
            tail.is_final = is_final
            tail.stable = stable
            tail.stable_words.extend(stable_words)
            if latency_ms is not None:
                tail.latency_ms = latency_ms
        else:
            self._put(
                Caption(
                    list(sentences),
                    partial,
                    is_final,
                    latency_ms,
                    partial_spk=partial_spk,
                    stable=stable,
                    stable_words=list(stable_words),
                )
            )
        self._ready.set()

    def post(self, message: ServerMessage) -> None:
        """Queue any other message as is (it gets a ``seq`` when taken)."""
        self._put(message)
        self._ready.set()

    def _put(self, message: ServerMessage) -> None:
        if not self.closed:
            self._queue.append(message)

    def close(self) -> None:
        """No more messages will be posted; ``get`` returns None once the queue is drained."""
        self.closed = True
        self._ready.set()

    def pending(self) -> int:
        return len(self._queue)

    async def get(self) -> ServerMessage | None:
        """The next message with its ``seq``, or None after ``close`` once everything was taken."""
        while not self._queue:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        msg = self._queue.popleft()
        self._seq += 1
        return dataclasses.replace(msg, seq=self._seq)
