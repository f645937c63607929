"""Transport half of live captions: HTTP, WebRTC signalling and ingest, data-channel captions, pages.

Nothing here imports torch or vLLM; speech work belongs to ``engine``.
"""
