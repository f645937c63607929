"""Which browser audio processing a phone lying on a meeting table should use: what each of Chromium's capture
settings (echo cancellation, noise suppression, automatic gain control) does to the audio the server receives.

    python -m bench.capture_settings [--settings off agc ns ec all] [--scenes own neighbour noisy] [--json out.json]
                                     [--keep DIR]
    python -m bench.capture_settings --wer DIR   # the word error rate of audio kept by --keep (loads the model)

Why it matters: in a meeting room every phone hears every voice, and the server decides which microphone a voice
belongs to by comparing the microphones' levels (a voice is loudest at its own). Anything that changes a
microphone's level by itself, per device, works against that comparison.

Each scene is one WAV played by Chromium's fake microphone (real read speech, ``../shared/data/speech``: three
sentences of one LibriSpeech reader, 0.8 s apart, over a real street recording as the room's background):
- ``own``: the phone's own person, speech at -26 dBFS (active-speech RMS), background at -56 dBFS;
- ``neighbour``: the same speech 12 dB quieter (someone across the table), the same background;
- ``noisy``: the own speech over a background at -36 dBFS (10 dB SNR: a busy open-plan room).
For each setting a fresh Chromium plays the scene into a page that opens the microphone with those constraints and
publishes it to the real server (in this process, the named fake recognizer: no model) with the product's WebRTC
client (static/js/session.js). The server's received audio (16 kHz, after Opus, as the engine gets it) is tapped
and aligned with the source by cross-correlation. Reported per setting and scene:

- ``speech dBFS``: received level over the source's speech frames (20 ms), the first sentence and the last one
  (automatic gain control adapts over seconds), and ``floor dBFS`` over background-only frames;
- ``corr``: waveform correlation of the received audio with what the microphone played (its size: 1 = untouched);
- per setting, ``own - neighbour`` (dB): how far apart the same voice arrives at its own phone and at the
  neighbour's, in the last sentence; the source says 12 dB. The arbitration lives on that margin.

``--keep DIR`` saves the received audio (``<scene>-<setting>.wav``); ``--wer DIR`` then streams each file through the
real engine (the embedded model, speaker labels off, as fast as it goes) and prints its word error rate against
the clips' reference text: what a setting does to the recognizer, apart from the levels.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web
from scipy.signal import fftconvolve

import app.webrtc.peer as peer_module
from app.config import IceConfig, ServerConfig
from app.server import create_app
from bench.lib.browser import chromium
from bench.lib.metrics import Column, print_markdown_table
from engine.asr.fake import FakeTranscriber
from engine.config import EngineConfig
from engine.stream.engine import CaptionEngine
from speechdata.corpus import audio, reference
from speechdata.wer import word_errors

SR = 16_000
FRAME = 320  # 20 ms
CLIPS = ("ls_1988-24833-0000", "ls_1988-24833-0002", "ls_1988-24833-0003")  # one reader, 13 s of speech
BACKGROUND = "dns_street_mobile_A1CIM28ZUCA8RX"  # a real noisy recording (no speech reference)
GAP_S, LEAD_S, TAIL_S = 0.8, 1.5, 1.5
SPEECH_DBFS, FLOOR_DBFS = -26.0, -56.0
NEIGHBOUR_DB = 12.0  # a voice across the table against one 40 cm away: 20 log10(1.6 / 0.4)
SETTINGS: dict[str, dict[str, bool]] = {
    "off": {"echoCancellation": False, "noiseSuppression": False, "autoGainControl": False},
    "agc": {"echoCancellation": False, "noiseSuppression": False, "autoGainControl": True},
    "ns": {"echoCancellation": False, "noiseSuppression": True, "autoGainControl": False},
    "ec": {"echoCancellation": True, "noiseSuppression": False, "autoGainControl": False},
    "all": {"echoCancellation": True, "noiseSuppression": True, "autoGainControl": True},  # the browser's default
}

PAGE = """<!doctype html><meta charset="utf-8"><title>capture bench</title>
<script type="module">
import { Session } from "/static/js/session.js";
window.capture = async (constraints, seconds) => {
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { ...constraints, channelCount: 1 } });
  const applied = stream.getAudioTracks()[0].getSettings();
  const session = new Session({ stream, offerUrl: "/offer", start: { language: "en", hotwords: [] } });
  await session.connect();
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  await session.stop(5000);
  for (const track of stream.getTracks()) track.stop();
  return { session: session.id, applied };
};
window.ready = true;
</script>"""


@dataclass(frozen=True)
class Scene:
    name: str
    speech: np.ndarray  # the speech part of what the microphone hears (float, -1..1)
    background: np.ndarray  # the rest

    @property
    def mix(self) -> np.ndarray:
        return self.speech + self.background


def db(power: float) -> float:
    return float(10 * np.log10(max(power, 1e-12)))


def frame_power(x: np.ndarray) -> np.ndarray:
    n = x.size // FRAME
    return np.mean(np.square(x[: n * FRAME].reshape(n, FRAME), dtype=np.float64), axis=1)


def scenes() -> dict[str, Scene]:
    gap = np.zeros(int(GAP_S * SR), np.float32)
    parts: list[np.ndarray] = [np.zeros(int(LEAD_S * SR), np.float32)]
    for i, clip in enumerate(CLIPS):
        parts += [gap] if i else []
        parts.append(audio(clip))
    parts.append(np.zeros(int(TAIL_S * SR), np.float32))
    speech = np.concatenate(parts)
    active = frame_power(speech)
    active = active[active > active.max() * 10 ** (-30 / 10)]  # frames within 30 dB of the loudest
    speech = speech * 10 ** ((SPEECH_DBFS - db(float(active.mean()))) / 20)
    street = audio(BACKGROUND)
    street = np.tile(street, speech.size // street.size + 1)[: speech.size]
    street = street / np.sqrt(np.mean(np.square(street, dtype=np.float64)))
    floor = (street * 10 ** (FLOOR_DBFS / 20)).astype(np.float32)
    return {
        "own": Scene("own", speech, floor),
        "neighbour": Scene("neighbour", speech * 10 ** (-NEIGHBOUR_DB / 20), floor),
        "noisy": Scene("noisy", speech, floor * 10 ** (20 / 20)),  # -36 dBFS: 10 dB under the speech
    }


def write_wav(path: Path, samples: np.ndarray) -> Path:
    import wave

    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def analyse(scene: Scene, received: np.ndarray) -> dict[str, float]:
    """Levels of ``received`` (float) over the scene's speech and background-only frames, once aligned with it."""
    mix = scene.mix
    # The fake microphone starts playing before the connection is up: the received audio starts somewhere in the
    # file. Find where by cross-correlation (processing changes the level, not the timing).
    corr = fftconvolve(received, mix[::-1], mode="full")
    offset = int(np.argmax(np.abs(corr))) - (mix.size - 1)  # received[i] ~ mix[i - offset]
    start = max(0, offset)  # the first received sample that has a source sample
    skip = start - offset  # the source sample it has (what played before the connection was up never arrived)
    n = min(mix.size - skip, received.size - start)
    y, x, s = received[start : start + n], mix[skip : skip + n], scene.speech[skip : skip + n]
    sp, yp = frame_power(s), frame_power(y)
    loud = sp > sp.max() * 10 ** (-20 / 10)
    silent = np.convolve(sp > 0, np.ones(15), mode="same") == 0  # background only, 150 ms from any speech
    bounds = np.cumsum([LEAD_S * SR, *[audio(c).size + GAP_S * SR for c in CLIPS]]) - skip
    frames = np.arange(sp.size) * FRAME
    first = loud & (frames < bounds[1])
    last = loud & (frames >= bounds[-2])
    return {
        "speech_db": db(float(yp[loud].mean())),
        "first_db": db(float(yp[first].mean())) if first.any() else float("nan"),
        "last_db": db(float(yp[last].mean())) if last.any() else float("nan"),
        "floor_db": db(float(yp[silent].mean())) if silent.any() else float("nan"),
        # (Chromium's processing path inverts the polarity, which no listener or recognizer hears: take its size.)
        "corr": abs(float(np.corrcoef(x, y)[0, 1])),
        "lost_s": skip / SR,
    }


async def run(settings: list[str], scene_names: list[str], keep: Path | None = None) -> list[dict[str, Any]]:
    received: list[np.ndarray] = []
    original = peer_module.pump_track

    async def tapped(track: Any, feed: Callable[[np.ndarray], None], *rest: Any) -> None:
        def tap(chunk: np.ndarray) -> None:
            received.append(chunk.copy())
            feed(chunk)

        await original(track, tap, *rest)

    peer_module.pump_track = tapped  # type: ignore[assignment]

    async def page(_: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    engine = CaptionEngine(EngineConfig(speakers=False), transcriber=FakeTranscriber(delay_s=0.05))
    await engine.start()
    config = ServerConfig(ice=IceConfig(hosts=("127.0.0.1",), loopback_only=True), max_sessions=4)
    app = create_app(config, engine=engine)
    app.router.add_get("/bench/capture", page)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    rows: list[dict[str, Any]] = []
    all_scenes = scenes()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in scene_names:
                scene = all_scenes[name]
                wav = write_wav(Path(tmp) / f"{name}.wav", scene.mix)
                for setting in settings:
                    received.clear()
                    async with chromium(wav) as browser:
                        tab = await browser.new_page()
                        await tab.goto(f"{url}/bench/capture")
                        await tab.wait_for_function("window.ready === true")
                        result = await tab.evaluate(
                            "([c, s]) => window.capture(c, s)", [SETTINGS[setting], scene.mix.size / SR + 0.5]
                        )
                    await asyncio.sleep(0.5)  # the server takes the session's last frames after the page's stop
                    got = np.concatenate(received).astype(np.float32) / 32768.0 if received else np.zeros(1)
                    if keep is not None:
                        write_wav(keep / f"{name}-{setting}.wav", got)
                    row = {
                        "setting": setting,
                        "scene": name,
                        **analyse(scene, got),
                        "applied": {k: result["applied"].get(k) for k in SETTINGS[setting]},
                    }
                    rows.append(row)
                    print(
                        f"{setting:>4} {name:>9}: speech {row['speech_db']:6.1f} dBFS (first {row['first_db']:6.1f},"
                        f" last {row['last_db']:6.1f}), floor {row['floor_db']:6.1f}, corr {row['corr']:.2f}",
                        file=sys.stderr,
                    )
    finally:
        await runner.cleanup()
        await engine.close()
        peer_module.pump_track = original  # type: ignore[assignment]
    return rows


async def word_error_rates(wavs: list[Path]) -> list[dict[str, Any]]:
    """WER of the locked text of each ``<scene>-<setting>.wav`` (the real engine, started once)."""
    from engine.audio.pcm import load_wav
    from engine.config import SessionOptions
    from engine.stream.runner import stream_audio

    said = " ".join(reference(clip) for clip in CLIPS)
    engine = CaptionEngine(EngineConfig(speakers=False))
    await engine.start()
    rows = []
    try:
        for wav in wavs:
            scene, setting = wav.stem.rsplit("-", 1)
            result = await stream_audio(engine, load_wav(wav), realtime=False, options=SessionOptions(language="en"))
            errors, words = word_errors(said, result.text())
            rows.append({"scene": scene, "setting": setting, "wer": 100 * errors / words, "text": result.text()})
            print(f"{scene:>9} {setting:>4}: WER {rows[-1]['wer']:5.1f} %  {result.text()}", file=sys.stderr)
    finally:
        await engine.close()
    return rows


def margins(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    by = {(r["setting"], r["scene"]): r for r in rows}
    for setting in dict.fromkeys(r["setting"] for r in rows):
        own, other = by.get((setting, "own")), by.get((setting, "neighbour"))
        if own and other:
            out.append(
                {
                    "setting": setting,
                    "first": own["first_db"] - other["first_db"],
                    "last": own["last_db"] - other["last_db"],
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument(
        "--scenes", nargs="+", default=["own", "neighbour", "noisy"], choices=["own", "neighbour", "noisy"]
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="save the received audio there, <scene>-<setting>.wav")
    parser.add_argument("--wer", type=Path, metavar="DIR", help="only: the WER of the audio --keep saved in DIR")
    args = parser.parse_args()
    if args.wer:
        wers = asyncio.run(word_error_rates(sorted(args.wer.glob("*-*.wav"))))
        print_markdown_table([("scene", "scene", "{}"), ("setting", "setting", "{}"), ("wer", "WER %", "{:.1f}")], wers)
        if args.json:
            args.json.write_text(json.dumps({"wer": wers}, indent=1))
        return
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    rows = asyncio.run(run(args.settings, args.scenes, args.keep))
    columns: list[Column] = [
        ("setting", "setting", "{}"),
        ("scene", "scene", "{}"),
        ("speech_db", "speech dBFS", "{:.1f}"),
        ("first_db", "first sentence", "{:.1f}"),
        ("last_db", "last sentence", "{:.1f}"),
        ("floor_db", "floor dBFS", "{:.1f}"),
        ("corr", "corr", "{:.2f}"),
    ]
    print_markdown_table(columns, rows)
    print()
    print(f"Own phone minus neighbour's phone, same voice (source: {NEIGHBOUR_DB:.0f} dB):")
    print()
    print_markdown_table(
        [
            ("setting", "setting", "{}"),
            ("first", "first sentence dB", "{:.1f}"),
            ("last", "last sentence dB", "{:.1f}"),
        ],
        margins(rows),
    )
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "margins": margins(rows)}, indent=1))


if __name__ == "__main__":
    main()
