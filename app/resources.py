"""The pages' files as package resources: ``templates/`` (Jinja) and ``static/`` (CSS, JS).

In the repository both folders live at the top level; ``app/templates`` and ``app/static`` are symbolic links to
them, and ``pyproject.toml``'s package data copies their files into the wheel as ``app/templates/`` and
``app/static/``. So a checkout, an editable install and an installed wheel find them the same way, through
``importlib.resources``, whatever the working directory.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path


def templates_dir() -> Path:
    """The folder of the page templates (``index.html``, ``kiosk.html``, ...), as a file-system path."""
    return _folder("templates")


def static_dir() -> Path:
    """The folder served at ``/static`` (``captions.js``, ``js/*.js``, the style sheets), as a file-system path."""
    return _folder("static")


_PACKAGE = "app"


@functools.cache  # looked up once, as the app is made: a page's request never touches the file system for it
def _folder(name: str) -> Path:
    folder = resources.files(_PACKAGE) / name
    # Jinja's loader and aiohttp's static route need real folders: pip unpacks wheels, so the package's resources
    # are files; an importer that hands out something else (a zip file) is not supported.
    if not isinstance(folder, Path) or not folder.is_dir():
        raise RuntimeError(f"the {_PACKAGE} package has no {name}/ folder at {folder} (a broken install?)")
    return folder.resolve()
