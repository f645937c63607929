"""Recognition: the ``Transcriber`` interface the scheduler calls, its vLLM back end (in-process ``AsyncLLM``),
the vLLM plugin with a Whisper that runs its encoder on a window sized to the request (``windows``), the guard
that drops hallucinated text, and ``FakeTranscriber``, a named fake for tests and pipeline benches."""
