"""The command catalog: coverage, and the hand-written command lines under tests/data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from callgate.abstraction import Abstractor, default_catalog, ground_words

DATA = Path(__file__).parents[1] / "data" / "abstraction"
REQUIRED = ["rm", "cp", "mv", "cat", "head", "tail", "tee", "touch", "mkdir", "chmod", "chown",
    "ln", "find", "sed", "tar", "zip", "unzip", "dd", "truncate", "shred", "curl", "wget", "ssh",
    "scp", "rsync", "nc", "git", "pip", "npm", "uv", "make", "cargo", "go", "python", "node",
    "bash", "sh", "perl", "ruby", "docker", "kubectl", "aws", "gcloud", "az", "terraform",
    "databricks", "wrangler", "sbatch", "psql", "sqlite3", "mysql", "clang", "gcc", "afl-fuzz",
    "libfuzzer"]


def _cases() -> list[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    cases = []
    for path in sorted(DATA.glob("commands_*.yaml")):
        for item in yaml.safe_load(path.read_text(encoding="utf-8")):
            if isinstance(item, list):
                cases.append((item[0], [(item[1], item[2])]))
            else:
                cases.append((item["cmd"], [(a, args) for a, args in item["events"]]))
    return cases


CASES = _cases()


def test_catalog_covers_the_required_programs_and_at_least_sixty() -> None:
    catalog = default_catalog()
    names = {spec.name for spec in catalog.programs.values()}
    missing = [p for p in REQUIRED if p not in catalog.programs]
    assert missing == []
    assert len(names) >= 60


def test_there_are_at_least_three_hundred_hand_written_command_lines() -> None:
    assert len(CASES) >= 300


@pytest.mark.parametrize(("command", "expected"), CASES, ids=[c[0][:60] for c in CASES])
def test_hand_written_command_line_grounds_as_expected(
    command: str, expected: list[tuple[str, dict[str, Any]]]
) -> None:
    events = Abstractor(resolve_scripts=False).abstract(
        {"tool": "Bash", "parameters": {"command": command}}
    )
    got = [(e.action, dict(e.args)) for e in events]
    assert [a for a, _ in got] == [a for a, _ in expected], got
    for (_, args), (_, want) in zip(got, expected, strict=True):
        for name, value in want.items():
            assert args.get(name) == value, f"{name}: {args.get(name)!r} != {value!r} in {args}"


def test_unknown_program_still_gets_argv_flags_options_and_positionals() -> None:
    action, args = ground_words(["frobnicate", "-xv", "--level=3", "--", "in", "-out"])
    assert action == "frobnicate"
    assert args["flags"] == ["-x", "-v", "--level"]
    assert args["options"] == {"--level": "3"}
    assert args["positionals"] == ["in", "-out"]


def test_versioned_program_names_map_to_their_catalog_entry() -> None:
    assert ground_words(["/usr/bin/python3.12", "x.py"])[0] == "python"
    assert ground_words(["pip3", "install", "x"])[0] == "pip"
    assert ground_words(["g++-13", "-o", "a", "a.cc"])[0] == "gcc"


def test_programs_built_on_lookup_are_those_the_data_names_aliases_included() -> None:
    from importlib import resources

    from callgate.abstraction import _catalog

    data = _catalog.catalog_data(resources.files("callgate.abstraction"))
    programs = _catalog.parse_catalog(data).programs
    expected: dict[str, Any] = {}
    for name, body in data["programs"].items():
        for key in (name, *(body or {}).get("aliases", ())):
            expected[key] = name
    assert list(programs) == list(expected)
    for key, name in expected.items():
        spec = programs[key]
        assert spec.name == name
        assert spec is programs[name]  # an alias is the very entry of its program
        assert spec == _catalog._program(name, data["programs"][name] or {}, {})
    assert "no-such-program" not in programs and programs.get("no-such-program") is None
