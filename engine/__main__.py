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
from engine.config import ENDPOINT_PRESETS, WINDOW_MODES, EngineConfig, SessionOptions, TranscriberConfig
from engine.protocol import dumps
from engine.speakers.models import DEFAULT_SPEAKER_MODEL, SPEAKER_MODEL_NAMES
from engine.stream.engine import CaptionEngine
from engine.stream.runner import stream_audio


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m engine",
        description="Stream a WAV file through live captions' engine (VAD, endpointing, partial and locked "
                    "captions, speaker labels, vLLM Whisper) and print the caption messages as JSON lines.",
    )
    p.add_argument("file", help="WAV file (8/16/32-bit PCM, any rate, mono or stereo)")
    p.add_argument("--realtime", action="store_true",
                   help="pace the audio at real time like a live microphone (default: as fast as possible)")
    p.add_argument("--model", default=None,
                   help="embedded name (whisper-base [default], whisper-tiny.en), a local Hugging Face folder, "
                        "or a hub id such as openai/whisper-large-v3-turbo (needs network access)")
    p.add_argument("--language", default="en", help="language code, or 'auto' to detect per segment (default: en)")
    p.add_argument("--hotword", action="append", default=[], help="a word or name to prefer (repeatable)")
    p.add_argument("--preset", choices=sorted(ENDPOINT_PRESETS), default="balanced",
                   help="endpointing preset: how long a pause closes a sentence (default: balanced)")
    p.add_argument("--window", choices=sorted(WINDOW_MODES), default="fit",
                   help="Whisper encoder window: 'fit' (per request, default) or 'stock' (always 30 s)")
    p.add_argument("--no-speakers", action="store_true", help="skip speaker labels")
    p.add_argument("--speaker-model", choices=SPEAKER_MODEL_NAMES, default=DEFAULT_SPEAKER_MODEL,
                   help=f"speaker-embedding model (default: {DEFAULT_SPEAKER_MODEL})")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return p


async def run(args: argparse.Namespace, engine: CaptionEngine | None = None) -> int:
    """Stream ``args.file`` and print the messages. With ``engine`` given (already started) it is used as is and
    left running; otherwise one is built from the flags, started and closed."""
    language = None if args.language in ("auto", "") else args.language
    audio = load_wav(args.file)
    own = engine is None
    if engine is None:
        engine = CaptionEngine(EngineConfig(
            transcriber=TranscriberConfig(model=args.model, device=args.device, window=args.window),
            endpoint=ENDPOINT_PRESETS[args.preset],
            speakers=not args.no_speakers,
            speaker_model=args.speaker_model,
            default_language=language,
        ))
    try:
        if own:
            await engine.start()
        options = replace(SessionOptions(), language=language, hotwords=tuple(args.hotword))
        result = await stream_audio(engine, audio, realtime=args.realtime, options=options,
                                    on_message=lambda m: print(dumps(m), flush=True))
        print(json.dumps(result.summary(), ensure_ascii=False), flush=True)
    finally:
        if own:
            await engine.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
