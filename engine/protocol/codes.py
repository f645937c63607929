"""The error codes of the wire (``ErrorCode``) and the error a client message that breaks the protocol raises."""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Every machine-readable error code this server puts on the wire: the data channel's ``error`` messages and
    the ``{"error": {"code", ...}}`` bodies of its HTTP API (docs/protocol.md lists them). One enum for both, since
    the two share codes (``loading``, ``busy``, ``engine``, ``bad_message``, ``too_large``) and a client reads them
    the same way. (Other services' protocols spoken here, Deepgram's and OpenAI's, keep their own codes.)"""

    # On the data channel, and in HTTP error bodies.
    BAD_MESSAGE = "bad_message"  # not JSON, not an object, unknown type, bad field
    TOO_LARGE = "too_large"  # message (or request body) over its limit
    BAD_STATE = "bad_state"  # e.g. start after stop
    ENGINE = "engine"  # the recognizer failed; captions may be missing (a new session: not until a restart)
    OVERLOADED = "overloaded"  # audio arrives faster than it can be processed; some was skipped
    BUSY = "busy"  # no new session now: full, at the operator's cap, or stopping (``reason`` says which)
    LOADING = "loading"  # the model is still loading
    # In HTTP error bodies only.
    UNAUTHORIZED = "unauthorized"  # no token, or not the one this needs (401, or 403 for a room's own token)
    BAD_PARAMETER = "bad_parameter"  # a query parameter is wrong (``param`` names it)
    BAD_SDP = "bad_sdp"  # an SDP offer that cannot be used
    NO_ROOM = "no_room"  # no such room
    NO_SESSION = "no_session"  # no such WHIP session
    NO_SENTENCE = "no_sentence"  # no such sentence in the room (or it was deleted)
    NO_OUTPUT = "no_output"  # no such output of the room
    NO_SEGMENT = "no_segment"  # an HLS segment not listed (yet)
    NO_VIEWER_TOKEN = "no_viewer_token"  # a private room's viewer token was not kept
    ROOM_ENDED = "room_ended"  # the room has ended (no new output)
    TOO_MANY_OUTPUTS = "too_many_outputs"  # the room has as many outputs as it may
    STORAGE = "storage"  # the transcript store cannot be read (or written)


class ProtocolError(ValueError):
    """A client message that breaks the protocol; ``code`` goes on the wire."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        super().__init__(message)
