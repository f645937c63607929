"""Operations: what an operator and a load balancer see and control. Admission (how many live sessions and file
jobs at once), the live streams a stop must finish, Prometheus metrics (``GET /metrics``), liveness and readiness
probes (``GET /health``, ``GET /ready``) and the access log."""

from __future__ import annotations

from aiohttp import web

from . import metrics_routes, probes
from .access_log import install as install_access_log
from .admission import LOADING_RETRY_AFTER_S, RETRY_AFTER_S, Admission, Refusal, RefusalReason, Slot
from .keys import ADMISSION, FILE_JOBS, METRICS, STREAMS
from .metrics import ServerMetrics
from .publishers import Admitted, NoRoom, Refused, admit_publisher, silent_microphones
from .streams import LiveStreams

__all__ = [
    "ADMISSION",
    "FILE_JOBS",
    "LOADING_RETRY_AFTER_S",
    "METRICS",
    "RETRY_AFTER_S",
    "STREAMS",
    "Admission",
    "Admitted",
    "LiveStreams",
    "NoRoom",
    "Refusal",
    "RefusalReason",
    "Refused",
    "ServerMetrics",
    "Slot",
    "add_routes",
    "admit_publisher",
    "install_access_log",
    "silent_microphones",
]


def add_routes(app: web.Application) -> None:
    """``GET /health``, ``GET /ready`` and ``GET /metrics``."""
    probes.add_routes(app)
    metrics_routes.add_routes(app)
