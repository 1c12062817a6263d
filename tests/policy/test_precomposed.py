"""The shipped policies are validated from their precomposed values, exactly as from their YAML.

``composed.jsonl`` holds what composing each policy under ``packs/`` and ``presets/`` gives; the
loader takes a shipped text from it and composes any other text, or a shipped one whose values
have a problem (so that the problem is reported at its place), as before.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import pytest

from callgate import PolicyError
from callgate.policy import _compose, _loader, _precomposed, parse_policy
from callgate.policy.presets import load_preset, preset_names


def shipped_policies() -> list[Traversable]:
    found: list[Traversable] = []
    stack = [resources.files("callgate.policy").joinpath(f) for f in _precomposed.FOLDERS]
    while stack:
        folder = stack.pop()
        for item in folder.iterdir():
            if item.is_dir() and item.name not in ("tests", "__pycache__"):
                stack.append(item)
            elif item.name.endswith(".yaml"):
                found.append(item)
    return sorted(found, key=str)


SHIPPED = shipped_policies()


def composed(text: str) -> tuple[Any, dict[Any, Any]]:
    builder = _compose.Builder()
    return builder.build(_compose.compose(text, "<test>", _loader.MAX_DEPTH), ()), \
        builder.places()


def test_the_shipped_table_is_the_shipped_policies_composed() -> None:
    table = resources.files("callgate.policy").joinpath(_precomposed.TABLE).read_text("utf-8")
    assert table == _precomposed.table_text(), \
        "a shipped policy or _compose.py changed: python -c 'import " \
        "callgate.policy._precomposed as p; p.write_table()'"


def test_the_table_holds_the_built_in_pack_and_every_preset() -> None:
    names = {f.name for f in SHIPPED}
    assert {"sequences.yaml", *(f"{p}.yaml" for p in preset_names())} <= names
    assert len(SHIPPED) == len(_precomposed.table_text().splitlines()) - 1


@pytest.mark.parametrize("policy", SHIPPED, ids=lambda f: f.name)
def test_a_shipped_policy_from_the_table_is_the_policy_from_its_yaml(
        policy: Traversable, monkeypatch: pytest.MonkeyPatch) -> None:
    text = policy.read_text(encoding="utf-8")
    found = _precomposed.precomposed(text)
    assert found is not None
    assert found == composed(text)
    from_table = parse_policy(text, "shipped.yaml")
    monkeypatch.setattr(_precomposed, "precomposed", lambda text: None)
    from_yaml = parse_policy(text, "shipped.yaml")
    assert from_table.policy == from_yaml.policy
    assert from_table._places == from_yaml._places
    assert from_table.raw_span(("name",)) == from_yaml.raw_span(("name",))


def test_a_shipped_text_is_not_composed(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> Any:
        raise AssertionError("composed")

    monkeypatch.setattr(_compose, "compose", refuse)
    assert load_preset("strict").policy.name == "strict"
    from callgate.kernel._behavior import builtin_pack

    builtin_pack.cache_clear()
    assert builtin_pack()


def test_any_other_text_is_composed() -> None:
    assert _precomposed.precomposed("name: mine\nversion: 1\n") is None
    assert parse_policy("name: mine\nversion: 1\n").policy.name == "mine"


def test_a_table_made_by_another_compose_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    text = SHIPPED[0].read_text(encoding="utf-8")
    assert _precomposed.precomposed(text) is not None
    monkeypatch.setattr(_precomposed, "_compose_digest", lambda: "0" * 64)
    assert _precomposed.precomposed(text) is None


@pytest.mark.parametrize("table", [b"", b"{}\n", b"not json\n", b'{"compose_sha256": 1}\n'])
def test_a_missing_or_damaged_table_is_not_used(table: bytes, tmp_path: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / _precomposed.TABLE).write_bytes(table)
    monkeypatch.setattr(_precomposed, "_HERE", tmp_path)
    assert _precomposed.precomposed(SHIPPED[0].read_text(encoding="utf-8")) is None


def test_a_damaged_line_of_the_table_is_not_used(tmp_path: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    text = SHIPPED[0].read_text(encoding="utf-8")
    lines = _precomposed.table_text().splitlines(keepends=True)
    digest = _precomposed._digest(text.encode())
    cut = [line[:40] + "\n" if digest in line else line for line in lines]
    (tmp_path / _precomposed.TABLE).write_text("".join(cut))
    monkeypatch.setattr(_precomposed, "_HERE", tmp_path)
    assert _precomposed.precomposed(text) is None


BAD = "name: bad\nversion: 1\nrules:\n  - id: a\n    decision: maybe\n"
REPEATED = ("name: bad\nversion: 1\nrules:\n  - {id: a, decision: allow}\n"
            "  - {id: a, decision: deny}\n")
REGEX = ("name: bad\nversion: 1\nrules:\n  - id: a\n    decision: deny\n    match:\n"
         "      parameters: {path: {pattern: '(a)\\1'}}\n")


@pytest.mark.parametrize(("text", "line"), [(BAD, 5), (REPEATED, 5), (REGEX, 7)])
def test_a_problem_in_values_from_the_table_is_reported_at_its_place(
        text: str, line: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # as if the text were shipped: its values come from the table, its problem from the YAML
    monkeypatch.setattr(_precomposed, "precomposed", composed)
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, "bad.yaml")
    assert [p.line for p in raised.value.problems] == [line]


def test_values_nested_past_the_loaders_bound_are_composed_and_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    deep = "name: deep\nversion: 1\nmcp: " + "{a: " * _loader.MAX_DEPTH + "1" + \
        "}" * _loader.MAX_DEPTH + "\n"

    def unbounded(text: str) -> tuple[Any, dict[Any, Any]]:
        builder = _compose.Builder()
        return builder.build(_compose.compose(text, "<test>", 1_000), ()), builder.places()

    monkeypatch.setattr(_precomposed, "precomposed", unbounded)
    with pytest.raises(PolicyError, match="nesting deeper than"):
        parse_policy(deep, "deep.yaml")
