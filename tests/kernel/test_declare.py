"""In-process tools declared with a policy: constraints, the path gate, and ``Denied``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate import Denied, PolicyError, ToolPolicy
from callgate.kernel._kernel import Kernel
from callgate.matchers._paths import canonical
from callgate.policy._loader import LoadedPolicy, parse_policy

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
    path_params: {path: write}
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


# --- path roles and what the function receives ----------------------------------------------


def _open_policy(tools: str = "") -> LoadedPolicy:
    return parse_policy(
        "name: t\nversion: 1\nprincipal: {name: a, capabilities: [{tool_class: function}]}\n"
        "rules: [{id: ok, decision: allow, match: {tool_class: function}}]\n" + tools)


def test_a_tool_declaring_writes_without_a_role_for_its_path_is_refused_before_any_call(
    tmp_path: Path,
) -> None:
    (tmp_path / "secret.txt").write_text("keep")
    tools = "tools:\n  save: {filesystem: {read: ['./**'], write: ['./out/**']}}\n"
    k = Kernel(_open_policy(tools), working_dir=tmp_path)
    with pytest.raises(PolicyError, match="'path' have no role"):
        @k.tool()
        def save(path: str, text: str) -> None:
            Path(path).write_text(text)

        save(str(tmp_path / "secret.txt"), "overwritten")
    assert (tmp_path / "secret.txt").read_text() == "keep"


def test_path_params_as_a_list_is_refused_for_a_tool_that_declares_writes() -> None:
    with pytest.raises(PolicyError, match="must give each path parameter its role"):
        _open_policy("tools:\n  t: {filesystem: {write: ['./out/**']}, path_params: [path]}\n")
    assert ToolPolicy.model_validate({"path_params": ["where"]}).path_params == {"where": "read"}


def test_a_path_declared_for_writing_outside_the_write_globs_is_denied_before_the_tool_runs(
    tmp_path: Path,
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "secret.txt").write_text("keep")
    k = Kernel(_open_policy(), working_dir=tmp_path)
    ran: list[str] = []

    @k.tool(policy=ToolPolicy.model_validate({
        "filesystem": {"read": ["./**"], "write": ["./out/**"]},
        "path_params": {"path": "write", "template": "read"}}))
    def save(path: str, template: str) -> None:
        ran.append(path)

    for target in ("secret.txt", "./secret.txt", str(tmp_path / "secret.txt"), "out/../x"):
        with pytest.raises(Denied) as info:
            save(target, "./secret.txt")
        assert info.value.decision.reasons[0].id == "tool.filesystem", target
    save("out/r.txt", "./secret.txt")  # the read role admits the read-only area
    assert ran == [str(tmp_path.resolve() / "out" / "r.txt")]
    # a path under a parameter without a role, in a writing tool, is judged as a write
    d = k.check({"tool": "save", "tool_class": "function", "action": "call",
                 "parameters": {"path": "out/r.txt", "template": "x", "extra": "./secret.txt"}})
    assert d.verdict == "deny" and d.reasons[0].id == "tool.filesystem"


def test_an_escaping_root_in_a_tool_declared_in_code_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").symlink_to("/etc")
    k = Kernel(_open_policy(), working_dir=tmp_path)
    with pytest.raises(PolicyError, match="leads through a symlink"):
        k.tool(policy=ToolPolicy.model_validate({"filesystem": {"write": ["./out/**"]},
                                                 "path_params": {"path": "write"}}))(
            lambda path: None)


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The kernel works in tmp/work; the process's current directory is tmp/elsewhere."""
    for place in ("work/data", "elsewhere/data"):
        (tmp_path / place).mkdir(parents=True)
    (tmp_path / "work" / "data" / "a.txt").write_text("checked")
    (tmp_path / "elsewhere" / "data" / "a.txt").write_text("NOT checked")
    monkeypatch.chdir(tmp_path / "elsewhere")
    return tmp_path / "work"


def _reader(k: Kernel) -> tuple[Any, list[Any]]:
    received: list[Any] = []

    @k.tool(policy=ToolPolicy.model_validate({"filesystem": {"read": ["./data/**"]}}))
    def lookup(query: Any, path: Any = None, options: Any = None) -> str:
        received.append((query, path, options))
        return "".join(Path(q).read_text() for q in (query, path) if isinstance(q, str))

    return lookup, received


def test_a_relative_path_in_any_parameter_reaches_the_function_as_the_path_checked(
    elsewhere: Path,
) -> None:
    lookup, received = _reader(Kernel(_open_policy(), working_dir=elsewhere))
    real = str(elsewhere.resolve() / "data" / "a.txt")
    assert lookup("./data/a.txt") == "checked"
    assert lookup("./data/a.txt", Path("data/a.txt"), {"more": ["../work/data/a.txt"]}) == \
        "checkedchecked"
    assert received[0] == (real, None, None)
    assert received[1] == (real, real, {"more": [real]})


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["data", "a.txt", "..", ".", "work", "x"]), min_size=1,
                max_size=5), st.sampled_from(["./", "../", "", "../work/"]))
def test_generated_relative_spellings_are_received_canonical_or_refused(
    elsewhere: Path, segments: list[str], lead: str
) -> None:
    k = Kernel(_open_policy(), working_dir=elsewhere)
    received: list[tuple[str, str]] = []

    @k.tool(policy=ToolPolicy.model_validate({"filesystem": {"read": ["./**"]}}))
    def record(query: str, path: str) -> None:
        received.append((query, path))

    spelling = lead + "/".join(segments)
    try:
        record(spelling, spelling)
    except Denied:
        assert not received
        return
    expected = canonical(spelling, str(elsewhere))
    query, path = received[0]
    assert path == expected  # a path-named parameter is always a checked path
    # free text is a path when it is shaped like one; then it is handed over as checked
    shaped = spelling.startswith(("./", "../")) or spelling in (".", "..")
    assert query == (expected if shaped else spelling)


def test_tools_taking_args_kwargs_or_positional_only_paths_get_the_checked_paths(
        tmp_path: Path) -> None:
    # these signatures were called with every argument as a keyword: TypeError or a lost value
    (tmp_path / "uploads").mkdir()
    k = Kernel(POLICY, working_dir=tmp_path)
    def writes(role: str) -> ToolPolicy:
        return ToolPolicy.model_validate({"filesystem": {"write": ["./uploads/**"]},
                                          "path_params": {role: "write"}})

    inside = str(tmp_path.resolve() / "uploads" / "a.txt")

    @k.tool(policy=writes("path"))
    def by_position(path: str, /, text: str) -> str:
        return path

    @k.tool(policy=writes("paths"))
    def spread(*paths: str) -> tuple[str, ...]:
        return paths

    @k.tool(policy=writes("path"))
    def by_keyword(**kw: str) -> dict[str, str]:
        return kw

    assert by_position("./uploads/a.txt", "x") == inside
    assert tuple(spread("./uploads/a.txt")) == (inside,)
    assert by_keyword(path="./uploads/a.txt") == {"path": inside}
    for tool, args, kwargs in ((spread, ("./b.txt",), {}), (by_keyword, (), {"path": "./b.txt"}),
                               (by_position, ("./b.txt", "x"), {})):
        with pytest.raises(Denied):
            tool(*args, **kwargs)
