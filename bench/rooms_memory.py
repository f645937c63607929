"""Rooms in memory over many rooms: idle rooms leave memory, reads load nothing.

    python -m bench.rooms_memory [--rooms 100000] [--json rooms.json]

Creates ``--rooms`` rooms through the server's own ``RoomRegistry`` on an SQLite file (as ``POST /rooms`` does,
without HTTP), then reads each one's status as ``GET /rooms/{id}`` does, and reports rooms held in memory and the
process RSS at checkpoints, for two registries side by side in one run:

- ``evicting``: the server's registry with its idle sweep (here every 1,000 rooms with ``idle_s=0``, standing in
  for the 30 s sweep and 5 min idle time of a live server);
- ``keeping``: the same registry never swept, which is how rooms behaved before eviction (every room created or
  read stayed in memory for the life of the process).

Each variant runs in its own child process, so one's memory does not count in the other's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil


async def _run(rooms: int, sweep: bool, folder: str) -> dict[str, Any]:
    from app.rooms import RoomRegistry
    from app.rooms.store import open_store

    store = await open_store(str(Path(folder) / f"rooms-{'evict' if sweep else 'keep'}.db"))
    registry = RoomRegistry(store, idle_s=0.0)
    proc = psutil.Process()
    checkpoints: list[dict[str, Any]] = []
    ids: list[str] = []
    t0 = time.monotonic()

    def mark(phase: str, done: int) -> None:
        checkpoints.append(
            {
                "phase": phase,
                "rooms": done,
                "in_memory": len(registry._rooms),
                "rss_mb": round(proc.memory_info().rss / 1e6, 1),
            }
        )

    mark("start", 0)
    step = max(1, rooms // 10)
    for i in range(rooms):
        ids.append((await registry.create(f"room {i}")).room.id)
        if sweep and (i + 1) % 1000 == 0:
            await registry.sweep()
        if (i + 1) % step == 0:
            mark("create", i + 1)
    for i, room_id in enumerate(ids):  # status reads, as GET /rooms/{id} makes them
        room = await registry.get(room_id, keep=not sweep)
        assert room is not None
        if (i + 1) % step == 0:
            mark("read", i + 1)
    await store.close()
    return {
        "variant": "evicting" if sweep else "keeping",
        "seconds": round(time.monotonic() - t0, 1),
        "checkpoints": checkpoints,
    }


def _child(rooms: int, sweep: bool, folder: str, out: Any) -> None:
    out.send(asyncio.run(_run(rooms, sweep, folder)))


def run_variant(rooms: int, sweep: bool, folder: str) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(rooms, sweep, folder, child))
    proc.start()
    result: dict[str, Any] = parent.recv()
    proc.join()
    return result


def main() -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.rooms_memory", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rooms", type=int, default=100_000)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = [run_variant(args.rooms, sweep, folder) for sweep in (True, False)]
    print("| variant | phase | rooms | rooms in memory | RSS MB |\n|---|---|---|---|---|")
    for r in results:
        for c in r["checkpoints"]:
            print(f"| {r['variant']} | {c['phase']} | {c['rooms']} | {c['in_memory']} | {c['rss_mb']} |")
    for r in results:
        first, last = r["checkpoints"][0], r["checkpoints"][-1]
        print(
            f"{r['variant']}: {last['in_memory']} rooms in memory after {args.rooms} created and read; RSS "
            f"{first['rss_mb']} -> {last['rss_mb']} MB ({r['seconds']} s)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"rooms": args.rooms, "results": results}, indent=2), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
