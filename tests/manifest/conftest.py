"""Fixtures for the manifest tests: the example policy's manifest and the example tool module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from callgate.manifest import build_manifest
from tests.conftest import EXAMPLE, ROOT

TOOLS_MODULE = ROOT / "examples" / "tools_module.py"


@pytest.fixture
def example_manifest(example_policy: Any) -> dict[str, Any]:
    return build_manifest(example_policy.policy, {})


@pytest.fixture
def example_path() -> Path:
    return EXAMPLE
