"""DTLS interoperability: let aiortc complete handshakes with peers whose certificate is RSA.

aiortc (1.x) offers only ECDHE-ECDSA cipher suites, which is all browsers need (their certificates are ECDSA). As
the DTLS client facing a peer with an RSA certificate, such as GStreamer 1.22's ``webrtcbin`` (what GStreamer's
WHIP clients publish with), the handshake then fails with a fatal alert: the peer has no suite it can use. This
adds the ECDHE-RSA suites after aiortc's own, so a browser negotiates exactly as before. ``with_rsa_suites`` wraps
one aiortc internal (``RTCCertificate._create_ssl_context``), which ``app.webrtc.patches.install_dtls`` replaces
process-wide (aiortc's certificates are); the WHIP test with GStreamer's client fails if that internal changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiortc.rtcdtlstransport import RTCCertificate

CIPHERS = (
    b"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-SHA:"
    b"ECDHE-ECDSA-AES256-SHA:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-CHACHA20-POLY1305:"
    b"ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-SHA:ECDHE-RSA-AES256-SHA"
)

SslContextFactory = Callable[..., Any]  # RTCCertificate._create_ssl_context(self, srtp_profiles): an OpenSSL context


def with_rsa_suites(original: SslContextFactory) -> SslContextFactory:
    """``original`` (aiortc's method), with ``CIPHERS`` set on the context it makes."""

    def create_ssl_context(self: RTCCertificate, *args: Any, **kwargs: Any) -> Any:
        context = original(self, *args, **kwargs)
        context.set_cipher_list(CIPHERS)
        return context

    return create_ssl_context
