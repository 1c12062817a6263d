"""The command-line tests reuse the fixtures of the packages whose commands they drive, and
each test gets its own policy cache (``XDG_CACHE_HOME``), never the user's."""

from pathlib import Path

import pytest

from tests.audit.conftest import kit, template
from tests.manifest.conftest import example_manifest, example_path

__all__ = ["example_manifest", "example_path", "kit", "template"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``XDG_CACHE_HOME`` for the test, in-process and in the commands it runs."""
    home = tmp_path_factory.mktemp("xdg-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home / "callgate"
