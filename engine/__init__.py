"""Speech half of live captions: framing, VAD, endpointing, speakers, transcription and session state.

Nothing here imports web code. Drive it from a file (``python -m engine``), a test, a benchmark or the server.
"""
