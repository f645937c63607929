"""The wheel serves the pages by itself: built from this checkout, installed with ``--no-deps`` into a folder of its
own and imported from another working directory (the checkout not on the path), it serves every page template and
every static file the pages load, from the installed package (``app/resources.py``). No model is loaded: the
server runs on the named fake recognizer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

# Runs in a child process, from another folder, with only the installed wheel (and the venv's dependencies) on the
# path. It serves the app in process and fetches each page, then every file the page links and every module each
# script imports, and checks that what was served is the installed package's file.
CHECK = r"""
import asyncio, re, sys
from pathlib import Path
from urllib.parse import urljoin

import aiohttp
from aiohttp import web

import app
from app import resources
from app.config import ServerConfig
from app.server import create_app
from engine.asr.fake import FakeTranscriber
from engine.config import EngineConfig
from engine.stream.engine import CaptionEngine

target = Path(sys.argv[1]).resolve()
for module in (app, resources):
    assert Path(module.__file__).resolve().is_relative_to(target), module.__file__
static, templates = resources.static_dir(), resources.templates_dir()
assert static.is_relative_to(target) and templates.is_relative_to(target), (static, templates)

PAGES = ["/", "/view?room=x", "/kiosk?room=x", "/join?room=x", "/embed?room=x", "/rooms/AAAAAAAAAAAAAAAA/edit"]
LINKS = re.compile(r'(?:src|href)="(/static/[^"]+)"')
IMPORTS = re.compile(r'(?:\bfrom\s*|^import\s*|\bimport\(\s*)"(\.{1,2}/[^"]+)"', re.MULTILINE)


async def main() -> None:
    engine = CaptionEngine(EngineConfig(speakers=False), transcriber=FakeTranscriber())
    await engine.start()
    runner = web.AppRunner(create_app(ServerConfig(), engine=engine))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    served: set[str] = set()
    try:
        async with aiohttp.ClientSession() as http:
            todo: list[str] = []
            for page in PAGES:
                async with http.get(base + page) as response:
                    assert response.status == 200, (page, response.status)
                    todo += LINKS.findall(await response.text())
            assert todo, "the pages link no static files"
            async with http.get(base + "/embed.js") as response:
                assert response.status == 200 and await response.read() == (static / "embed-loader.js").read_bytes()
            while todo:
                url = todo.pop()
                if url in served:
                    continue
                async with http.get(base + url) as response:
                    assert response.status == 200, (url, response.status)
                    body = await response.read()
                assert body == (static / url.removeprefix("/static/")).read_bytes(), url
                served.add(url)
                if url.endswith(".js"):
                    todo += [urljoin(url, name) for name in IMPORTS.findall(body.decode())]
    finally:
        await runner.cleanup()
        await engine.close()
    print("\n".join(sorted(served)))


asyncio.run(main())
"""


def test_the_installed_wheel_serves_every_page_and_file_they_load(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy of what the wheel is built from: the build leaves the checkout alone
    for name in ("app", "engine", "static", "templates"):
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "--quiet"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path / "dist"), str(source)],
        check=True,
        cwd=tmp_path,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("live_captions-*.whl")
    target = tmp_path / "target"
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-compile", "--target", str(target), str(wheel)],
        check=True,
        cwd=tmp_path,
        capture_output=True,
    )
    for name in ("static", "templates"):  # every file of the checkout's folders ships, not only those linked
        shipped = {p.relative_to(target / "app" / name) for p in (target / "app" / name).rglob("*") if p.is_file()}
        assert shipped == {p.relative_to(ROOT / name) for p in (ROOT / name).rglob("*") if p.is_file()}
        assert not (target / "app" / name).is_symlink()

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env["PYTHONPATH"] = str(target)  # the venv's site-packages still give the dependencies
    run = subprocess.run(
        [sys.executable, "-c", CHECK, str(target)], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    served = run.stdout.split()
    for name in (
        "/static/captions.js",
        "/static/kiosk.js",
        "/static/embed.js",
        "/static/view-page.js",
        "/static/join.js",
        "/static/js/controller.js",
        "/static/captions.css",
        "/static/kiosk.css",
        "/static/embed.css",
        "/static/join.css",
    ):
        assert name in served, served
