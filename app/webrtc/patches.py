"""Every process-wide change this server makes to aiortc and aioice, in one place: applied, undone, version-checked.

aiortc and aioice offer no hooks for what the server needs, so four of their attributes are replaced for the whole
process (both libraries look them up at call time, so each peer connection made afterwards uses the replacement):

- ``aioice.ice.get_host_addresses``: the host addresses offered (``--ice-host``), ``app.webrtc.ice.host_addresses``;
- ``aioice.ice.Connection.get_component_candidates``: host candidates bound within ``--udp-ports``,
  ``app.webrtc.ice.ranged_candidates``;
- ``aiortc.rtcdtlstransport.RTCCertificate._create_ssl_context``: ECDHE-RSA suites for peers with RSA certificates
  (GStreamer's WHIP clients), ``app.webrtc.dtls.with_rsa_suites``;
- ``aiortc.rtcpeerconnection.RTCRtpReceiver``: audio decoded on arrival at 16 kHz mono,
  ``app.webrtc.rtp_audio.AudioReceiver``.

What each replacement does lives with its concept (the modules named); this module is the only one that assigns into
the libraries. The replaced attributes are private internals, so each ``Patch`` names the library version it was
written for, and installing any patch on another installed version raises ``RuntimeError`` before anything is
replaced: re-read the library's code for that attribute, then move ``written_for`` and the pin in pyproject.toml.

One server per process is the model: ``create_app`` calls ``install`` once; calling it again with another policy
replaces the previous one, and ``undo`` restores the libraries' own attributes (tests).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import aioice.ice
import aiortc.rtcpeerconnection
from aiortc.rtcdtlstransport import RTCCertificate

from ..config import AudioDecoder, IceConfig
from .dtls import with_rsa_suites
from .ice import host_addresses, ranged_candidates
from .opus import opus_available
from .rtp_audio import AudioReceiver

log = logging.getLogger(__name__)

AIOICE_VERSION = "0.13.0"  # the versions the patches below were written for (pyproject.toml pins the same)
AIORTC_VERSION = "1.16.0"


@dataclass(frozen=True)
class Patch:
    """One library attribute this server replaces: ``owner.attribute`` (a module or class), in the distribution
    ``package``, whose code the replacement was written against at version ``written_for``."""

    target: str  # its dotted name, for messages
    package: str
    written_for: str
    owner: Any
    attribute: str


HOST_ADDRESSES = Patch("aioice.ice.get_host_addresses", "aioice", AIOICE_VERSION, aioice.ice, "get_host_addresses")
COMPONENT_CANDIDATES = Patch(
    "aioice.ice.Connection.get_component_candidates",
    "aioice",
    AIOICE_VERSION,
    aioice.ice.Connection,
    "get_component_candidates",
)
SSL_CONTEXT = Patch(
    "aiortc.rtcdtlstransport.RTCCertificate._create_ssl_context",
    "aiortc",
    AIORTC_VERSION,
    RTCCertificate,
    "_create_ssl_context",
)
RTP_RECEIVER = Patch(
    "aiortc.rtcpeerconnection.RTCRtpReceiver", "aiortc", AIORTC_VERSION, aiortc.rtcpeerconnection, "RTCRtpReceiver"
)
PATCHES = (HOST_ADDRESSES, COMPONENT_CANDIDATES, SSL_CONTEXT, RTP_RECEIVER)

# The libraries' own attributes, taken when this module is first imported (before any patch is applied).
_ORIGINALS: dict[Patch, Any] = {patch: getattr(patch.owner, patch.attribute) for patch in PATCHES}


def installed_version(package: str) -> str:
    """The installed version of the distribution ``package``."""
    return metadata.version(package)


def check_version(patch: Patch) -> None:
    """Raise ``RuntimeError`` unless the installed ``patch.package`` is the version the patch was written for."""
    found = installed_version(patch.package)
    if found != patch.written_for:
        raise RuntimeError(
            f"{patch.package} {found} is installed, but app/webrtc/patches.py replaces {patch.target}, written for "
            f"{patch.package} {patch.written_for}: check that replacement against {patch.package} {found}, then "
            f"update its version there and the pin in pyproject.toml"
        )


def original(patch: Patch) -> Any:
    """The library's own attribute that ``patch`` replaces."""
    return _ORIGINALS[patch]


def _apply(replacements: dict[Patch, Any]) -> None:
    for patch in replacements:  # all checked first: a refused install replaces nothing
        check_version(patch)
    for patch, value in replacements.items():
        setattr(patch.owner, patch.attribute, value)


def install_ice(config: IceConfig) -> None:
    """The host-address and UDP port-range policy (``app.webrtc.ice``) for every peer connection made from now on."""
    _apply(
        {
            HOST_ADDRESSES: host_addresses(config.hosts, original(HOST_ADDRESSES)),
            COMPONENT_CANDIDATES: (
                original(COMPONENT_CANDIDATES)
                if config.udp_ports is None
                else ranged_candidates(*config.udp_ports, original(COMPONENT_CANDIDATES))
            ),
        }
    )


def install_dtls() -> None:
    """DTLS handshakes accept peers with RSA certificates too (``app.webrtc.dtls``). Idempotent."""
    _apply({SSL_CONTEXT: with_rsa_suites(original(SSL_CONTEXT))})


def install_audio_receiver(mode: AudioDecoder) -> None:
    """``direct``: peer connections created from now on receive audio through ``AudioReceiver``
    (``app.webrtc.rtp_audio``; aiortc's receiver, with a warning, where libopus cannot be loaded); ``aiortc``:
    through aiortc's own receiver. Raises ``ValueError`` for another mode."""
    if mode not in tuple(AudioDecoder):
        raise ValueError(f"audio decoder must be one of {', '.join(AudioDecoder)}, got {mode!r}")
    receiver = original(RTP_RECEIVER)
    if mode == AudioDecoder.DIRECT:
        if opus_available():
            receiver = AudioReceiver
        else:
            log.warning("libopus could not be loaded: audio is decoded by aiortc at 48 kHz and resampled")
    _apply({RTP_RECEIVER: receiver})


def install(config: IceConfig, audio_decoder: AudioDecoder) -> None:
    """All of this server's patches: the ICE policy of ``config``, the DTLS suites and the ``audio_decoder``'s
    receiver. Once, before the first peer connection."""
    install_ice(config)
    install_dtls()
    install_audio_receiver(audio_decoder)


def undo() -> None:
    """Give aiortc and aioice their own attributes back."""
    for patch in PATCHES:
        setattr(patch.owner, patch.attribute, original(patch))
