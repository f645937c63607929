"""The process-wide changes to aiortc and aioice (app.webrtc.patches): refused on another library version,
undone to the libraries' own attributes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.config import AudioDecoder, IceConfig
from app.webrtc import patches


@pytest.fixture(autouse=True)
def reinstalled() -> Iterator[None]:
    yield
    patches.install(IceConfig(), AudioDecoder.DIRECT)  # what every other test of this process expects


def current() -> dict[patches.Patch, object]:
    return {patch: getattr(patch.owner, patch.attribute) for patch in patches.PATCHES}


def test_each_patch_was_written_for_the_installed_version() -> None:
    for patch in patches.PATCHES:
        patches.check_version(patch)


def test_another_library_version_is_refused_before_anything_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    patches.undo()
    before = current()
    monkeypatch.setattr(patches, "installed_version", lambda package: "9.9.9")
    with pytest.raises(RuntimeError) as refused:
        patches.install(IceConfig(hosts=("127.0.0.1",), udp_ports=(47300, 47309)), AudioDecoder.DIRECT)
    message = str(refused.value)
    assert "aioice 9.9.9 is installed" in message and f"aioice {patches.AIOICE_VERSION}" in message
    assert "aioice.ice.get_host_addresses" in message
    assert current() == before
    with pytest.raises(RuntimeError, match=f"aiortc 9.9.9 is installed.*aiortc {patches.AIORTC_VERSION}"):
        patches.install_dtls()


def test_undo_restores_the_libraries_own_attributes() -> None:
    patches.undo()
    originals = current()
    assert originals == {patch: patches.original(patch) for patch in patches.PATCHES}
    patches.install(IceConfig(hosts=("127.0.0.1",), udp_ports=(47300, 47309)), AudioDecoder.DIRECT)
    assert all(value is not originals[patch] for patch, value in current().items())
    patches.undo()
    assert current() == originals
