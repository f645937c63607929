"""Live sessions: the endpointer cuts speech segments out of the VAD's probabilities, the session turns them into
partial and locked captions, the scheduler shares the recognizer between sessions (finals first), and
``CaptionEngine`` (``engine.py``) owns the shared pieces and every session. ``runner`` streams a file through a
session (CLI, tests, benches)."""
