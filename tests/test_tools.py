"""In-process tools declared with a policy: constraints, the path gate, and ``Denied``."""

from __future__ import annotations

from pathlib import Path

import pytest

from callgate import Denied, ToolPolicy
from callgate._kernel import Kernel
from callgate._loader import LoadedPolicy, parse_policy

POLICY = parse_policy("""\
name: tools
version: 1
principal:
  name: agent
  capabilities:
    - {tool_class: function}
rules:
  - {id: allow-functions, decision: allow, match: {tool_class: function}}
run_state: {quarantine_after_denials: 50}
tools:
  write_report:
    risk: medium
    filesystem: {write: ["./uploads/**"]}
    network: deny
    constraints: {max_invocations: 2, only_after: [fetch]}
  launch:
    constraints: {forbidden: true}
""")


@pytest.fixture
def kernel(tmp_path: Path) -> Kernel:
    (tmp_path / "uploads").mkdir()
    return Kernel(POLICY, working_dir=tmp_path)


def test_a_declared_tool_runs_inside_its_globs_after_its_prerequisite(kernel: Kernel,
                                                                      tmp_path: Path) -> None:
    @kernel.tool()
    def fetch() -> str:
        return "page"

    @kernel.tool()
    def write_report(path: str, text: str) -> str:
        Path(path).write_text(text)
        return "ok"

    with pytest.raises(Denied) as info:
        write_report("./uploads/a.txt", "x")
    assert info.value.decision.reasons[0].id == "tool.only-after"
    assert fetch() == "page"
    assert write_report("./uploads/a.txt", "x") == "ok"
    # the function received the canonical path that was checked
    assert (tmp_path / "uploads" / "a.txt").read_text() == "x"


def test_a_declared_tool_is_denied_outside_its_write_globs(kernel: Kernel) -> None:
    @kernel.tool()
    def fetch() -> str:
        return "page"

    @kernel.tool()
    def write_report(path: str, text: str) -> str:
        raise AssertionError("must not run")

    fetch()
    for path in ("/etc/passwd", "./uploads/../../etc/passwd", "../outside.txt"):
        with pytest.raises(Denied) as info:
            write_report(path, "x")
        assert info.value.decision.reasons[0].id == "tool.filesystem", path


def test_max_invocations_is_enforced(kernel: Kernel) -> None:
    @kernel.tool()
    def fetch() -> str:
        return "page"

    @kernel.tool()
    def write_report(path: str, text: str) -> str:
        return "ok"

    fetch()
    write_report("./uploads/a", "x")
    write_report("./uploads/b", "x")
    with pytest.raises(Denied) as info:
        write_report("./uploads/c", "x")
    assert info.value.decision.reasons[0].id == "tool.max-invocations"


def test_a_forbidden_tool_never_runs(kernel: Kernel) -> None:
    @kernel.tool()
    def launch() -> str:
        raise AssertionError("must not run")

    with pytest.raises(Denied) as info:
        launch()
    assert info.value.decision.reasons[0].id == "tool.forbidden"


def test_a_tool_declared_in_code_gets_its_policy(kernel: Kernel) -> None:
    @kernel.tool(policy=ToolPolicy(filesystem={"read": ["./uploads/**"]}))  # type: ignore[arg-type]
    def peek(path: str) -> str:
        return "seen"

    assert peek("./uploads/x") == "seen"
    with pytest.raises(Denied):
        peek("/etc/hostname")


def test_the_example_policy_gates_write_report_layer_by_layer(example_policy: LoadedPolicy,
                                                              workdir: Path) -> None:
    k = Kernel(example_policy, working_dir=workdir)
    wr = {"tool": "write_report", "tool_class": "file", "action": "write"}
    # the principal's file grant covers ./out only: /srv is refused before the tool policy
    d = k.check({**wr, "parameters": {"path": "/srv/uploads/r.txt"}})
    assert d.reasons[0].id == "capability.constraint"
    d = k.check({**wr, "parameters": {"path": "./out/r.txt"}})
    assert d.reasons[0].id == "tool.only-after"
    k.check({"tool": "fetch", "tool_class": "http", "action": "get",
             "parameters": {"url": "https://api.github.com/"}})
    d = k.check({**wr, "parameters": {"path": "./out/r.txt"}})
    assert d.reasons[0].id == "tool.filesystem"


def test_a_function_declared_without_a_kernel_brings_its_policy(kernel: Kernel) -> None:
    from callgate import declare

    @declare(ToolPolicy(filesystem={"read": ["./uploads/**"]}), name="peek2")  # type: ignore[arg-type]
    def peek(path: str) -> str:
        return "seen"

    bound = kernel.tool()(peek)
    assert bound.name == "peek2"
    assert bound("./uploads/x") == "seen"
    with pytest.raises(Denied):
        bound("/etc/hostname")
