"""WebRTC ingest: a browser (or any WebRTC client) sends its microphone here and reads its captions back.

The path of one packet: ``offer`` (``POST /offer``: signalling, admission, a room to publish into) creates a
``peer.PeerSession``, which owns the peer connection, the caption data channel and one engine session; ``rtp_audio``
and ``opus`` decode the audio straight to 16 kHz mono, ``ingest`` paces it into the session, and the session's
messages go back over the data channel and into the session's room. ``ice`` and ``stun_turn`` decide how the two
ends reach each other (host candidates, STUN/TURN, TURN credentials), ``dtls`` the handshake's certificate.
``patches`` is where the process-wide changes to aiortc and aioice are applied (``install``), each checked against
the library version it was written for.
Other ingests that ride on WebRTC (WHIP, in ``app.compat``) use ``PeerSession`` through this package.
"""

from __future__ import annotations

from .ice import is_loopback
from .keys import PEERS
from .offer import MAX_OFFER_BYTES, add_routes
from .patches import install
from .peer import PeerSession
from .stun_turn import ice_servers, link_headers, page_config

__all__ = [
    "MAX_OFFER_BYTES",
    "PEERS",
    "PeerSession",
    "add_routes",
    "ice_servers",
    "install",
    "is_loopback",
    "link_headers",
    "page_config",
]
