"""The shared real-speech corpus and how transcripts are scored against it, for tests and benchmarks alike.

``speechdata.corpus`` finds ``shared/data/speech`` (or ``LIVE_CAPTIONS_SPEECH_DIR``) and reads its clips, reference
transcripts and reference speaker turns; ``speechdata.wer`` normalises text and counts word errors. ``tests/`` and
``bench/`` both import it; neither imports the other's helpers. It is not part of the installed package (the wheel
holds ``engine`` and ``app`` only).
"""
