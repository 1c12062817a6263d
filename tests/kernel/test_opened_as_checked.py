"""``Kernel.opened_as_checked``: the arguments a host hands to another process are the ones the
kernel checked, paths canonical, wherever that process resolves relative paths."""

from __future__ import annotations

import os
from pathlib import Path

from callgate import Kernel
from callgate.policy import parse_policy


def _kernel(tmp: Path, grant: str) -> Kernel:
    policy = parse_policy(f"""\
name: p
version: 1
working_dir: {tmp}
principal:
  name: agent
  capabilities:
    - {grant}
rules:
  - {{id: allow, match: {{tool_class: mcp}}, decision: allow}}
""")
    return Kernel(policy, audit=None, guards=[])


def _limited(tmp: Path) -> str:
    return f'{{tool_class: mcp, constraints: {{allowed_paths: ["{tmp}/**"]}}}}'


def test_paths_are_made_canonical_where_the_kernel_checks_them(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    kernel = _kernel(tmp_path, _limited(tmp_path))
    given = {"path": "link/a.txt", "note": "./b.txt", "paths": ["c.txt"], "text": "plain words",
             "count": 3}
    opened = kernel.opened_as_checked("mcp__fs__read", "mcp", given)
    real = os.path.realpath(tmp_path / "real")
    assert opened == {"path": f"{real}/a.txt", "note": f"{os.path.realpath(tmp_path)}/b.txt",
                      "paths": [f"{os.path.realpath(tmp_path)}/c.txt"], "text": "plain words",
                      "count": 3}
    assert given["path"] == "link/a.txt"  # the caller's mapping is not changed


def test_without_a_path_check_the_arguments_go_through_as_given(tmp_path: Path) -> None:
    kernel = _kernel(tmp_path, "{tool_class: mcp}")
    given = {"path": "a.txt", "note": "./b.txt"}
    assert kernel.opened_as_checked("mcp__fs__read", "mcp", given) == given


def test_a_path_that_cannot_be_canonical_is_left_for_the_check_to_refuse(tmp_path: Path) -> None:
    kernel = _kernel(tmp_path, _limited(tmp_path))
    given = {"path": "bad\x00name"}
    opened = kernel.opened_as_checked("mcp__fs__read", "mcp", given)
    assert opened == given
    decision = kernel.check({"tool": "mcp__fs__read", "tool_class": "mcp", "action": "call",
                             "parameters": opened})
    assert decision.verdict == "deny"
