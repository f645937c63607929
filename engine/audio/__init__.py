"""Audio in: 16 kHz mono PCM (framing, resampling, WAV) and voice activity detection (Silero, batched across
sessions). First stage of the data path: ``pcm`` -> ``vad`` -> ``engine.stream``."""
