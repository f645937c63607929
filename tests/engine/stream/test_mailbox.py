"""A session's outgoing mailbox (``engine.stream.mailbox``): partials coalesce, sentences and other messages never drop
or reorder."""

from __future__ import annotations

from collections.abc import AsyncIterator

from engine import protocol
from engine.protocol import ErrorCode
from engine.stream.mailbox import Mailbox


async def test_mailbox_merges_partials_but_never_drops_sentences() -> None:
    box = Mailbox()
    box.post(protocol.Ready("s", "m", "en"))
    box.post_caption([protocol.Sentence(0, "one", 0, 10, 0)], "two thr")
    box.post_caption([], "two three")
    box.post_caption([protocol.Sentence(1, "two three", 20, 30, 1)], "")
    box.post(protocol.Stopped())
    box.close()
    got = [m async for m in _drain(box)]
    assert [m.wire()["type"] for m in got] == ["ready", "caption", "stopped"]
    caption = got[1]
    assert isinstance(caption, protocol.Caption)
    assert [s.id for s in caption.sentences] == [0, 1] and caption.partial == ""
    assert [m.seq for m in got] == [1, 2, 3]


async def test_mailbox_keeps_order_around_other_messages() -> None:
    box = Mailbox()
    box.post_caption([], "a")
    box.post(protocol.Error(ErrorCode.OVERLOADED, "behind"))
    box.post_caption([], "a b")
    box.close()
    got = [m async for m in _drain(box)]
    assert [(m.wire()["type"], m.wire().get("partial")) for m in got] == [
        ("caption", "a"),
        ("error", None),
        ("caption", "a b"),
    ]


async def _drain(box: Mailbox) -> AsyncIterator[protocol.ServerMessage]:
    while (m := await box.get()) is not None:
        yield m
