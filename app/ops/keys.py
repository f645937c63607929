"""The operational parts' application keys."""

from __future__ import annotations

from aiohttp import web

from .admission import Admission
from .metrics import ServerMetrics
from .streams import LiveStreams

ADMISSION = web.AppKey("admission", Admission)  # the --max-sessions cap
FILE_JOBS = web.AppKey("file_jobs", Admission)  # the --max-file-jobs cap (uploaded files transcribing at once)
METRICS = web.AppKey("metrics", ServerMetrics)  # the app's Prometheus registry and event metrics
STREAMS = web.AppKey("streams", LiveStreams)  # the live streams that are not peers (FunASR, file jobs)
