"""WebRTC ingest: a browser (or any WebRTC client) sends its microphone here and reads its captions back.

The path of one packet: ``offer`` (``POST /offer``: signalling, admission, a room to publish into) creates a
``peer.PeerSession``, which owns the peer connection, the caption data channel and one engine session; ``rtp_audio``
and ``opus`` decode the audio straight to 16 kHz mono, ``ingest`` paces it into the session, and the session's
messages go back over the data channel and into the session's room. ``ice`` and ``stun_turn`` decide how the two
ends reach each other (host candidates, STUN/TURN, TURN credentials), ``dtls`` the handshake's certificate.
Other ingests that ride on WebRTC (WHIP, in ``app.compat``) use ``PeerSession`` through this package.
"""

from __future__ import annotations

from ..config import IceConfig
from . import dtls, ice, rtp_audio
from .ice import is_loopback
from .keys import PEERS
from .offer import MAX_OFFER_BYTES, add_routes
from .peer import PeerSession
from .stun_turn import ice_servers, link_headers, page_config

__all__ = ["MAX_OFFER_BYTES", "PEERS", "PeerSession", "add_routes", "ice_servers", "install", "is_loopback",
           "link_headers", "page_config"]


def install(config: IceConfig, audio_decoder: str) -> None:
    """Set this process's WebRTC policies (aioice's address filter, the DTLS certificate, the Opus decoder):
    once, before the first peer connection."""
    ice.install(config)
    dtls.install()
    rtp_audio.install(audio_decoder)
