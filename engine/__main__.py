"""``python -m engine FILE.wav``: stream a file through the real caption pipeline and print the messages.

One JSON object per line: exactly the messages the ``captions`` data channel carries, then a last line
``{"type":"summary","sentences":[...],"text":...,"audio_s":...,"wall_s":...}``. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from dataclasses import replace

from engine.audio.pcm import load_wav
from engine.config import ENDPOINT_PRESETS, EndpointPreset, EngineConfig, SessionOptions, TranscriberConfig
from engine.protocol import dumps
from engine.settings import add_flags, member_of, values_of
from engine.speakers.models import SPEAKER_MODEL_NAMES
from engine.stream.engine import CaptionEngine
from engine.stream.runner import stream_audio


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m engine",
        description="Stream a WAV file through live captions' engine (VAD, endpointing, partial and locked "
        "captions, speaker labels, vLLM Whisper) and print the caption messages as JSON lines.",
    )
    p.add_argument("file", help="WAV file (8/16/32-bit PCM, any rate, mono or stereo)")
    p.add_argument(
        "--realtime",
        action="store_true",
        help="pace the audio at real time like a live microphone (default: as fast as possible)",
    )
    # The engine's own settings, as their config fields declare them (engine.settings), without environment
    # fallbacks: this is a tool for one file, not a service.
    add_flags(p, TranscriberConfig, "model")
    add_flags(p, EngineConfig, "default_language")
    p.add_argument("--hotword", action="append", default=[], help="a word or name to prefer (repeatable)")
    p.add_argument(
        "--preset",
        type=member_of(EndpointPreset),
        choices=values_of(EndpointPreset),
        default=EndpointPreset.BALANCED,
        help="endpointing preset: how long a pause closes a sentence (default: balanced)",
    )
    add_flags(p, TranscriberConfig, "window")
    add_flags(p, EngineConfig, "speakers")
    add_flags(p, EngineConfig, "speaker_model", choices=SPEAKER_MODEL_NAMES)  # names the config may not import
    add_flags(p, TranscriberConfig, "device")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return p


async def run(args: argparse.Namespace, engine: CaptionEngine | None = None) -> int:
    """Stream ``args.file`` and print the messages. With ``engine`` given (already started) it is used as is and
    left running; otherwise one is built from the flags, started and closed."""
    language = args.language  # None: detect per segment (``--language auto``)
    audio = load_wav(args.file)
    own = engine is None
    if engine is None:
        engine = CaptionEngine(
            EngineConfig(
                transcriber=TranscriberConfig(model=args.model, device=args.device, window=args.window),
                endpoint=ENDPOINT_PRESETS[args.preset],
                speakers=not args.no_speakers,
                speaker_model=args.speaker_model,
                default_language=language,
            )
        )
    try:
        if own:
            await engine.start()
        options = replace(SessionOptions(), language=language, hotwords=tuple(args.hotword))
        result = await stream_audio(
            engine, audio, realtime=args.realtime, options=options, on_message=lambda m: print(dumps(m), flush=True)
        )
        print(json.dumps(result.summary(), ensure_ascii=False), flush=True)
    finally:
        if own:
            await engine.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
