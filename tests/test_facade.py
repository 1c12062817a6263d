"""The public facade: ``__all__`` is exactly what the package exports, sorted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import callgate

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_sorted_and_names_every_public_export() -> None:
    public = {n for n in dir(callgate) if not n.startswith("_")} - {"annotations",
                                                                    "TYPE_CHECKING"}
    modules = {n for n in public if type(getattr(callgate, n)).__name__ == "module"}
    assert sorted(callgate.__all__) == callgate.__all__
    assert set(callgate.__all__) == public - modules


def test_importing_the_package_loads_no_model_until_a_name_is_used() -> None:
    code = ("import sys, callgate; assert 'pydantic' not in sys.modules, 'eager'; "
            "callgate.Kernel; assert 'pydantic' in sys.modules; "
            "assert callgate.Kernel is __import__('callgate.kernel').kernel.Kernel")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Kernal'"):
        callgate.Kernal  # noqa: B018 (the lookup is what is tested)


def test_the_readme_python_example_runs_as_printed(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"## The Python API in ten lines\n\n```python\n(.*?)```", readme, re.S)
    assert code is not None
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "research-agent.yaml").write_text(
        (ROOT / "examples" / "research-agent.yaml").read_text())
    (tmp_path / "data").mkdir()
    proc = subprocess.run([sys.executable, "-c", code.group(1)], cwd=tmp_path, text=True,
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "allow"
    assert lines[1].startswith("deny: [capability.constraint] path")
    assert "outside the allowed paths" in lines[1]
