"""The docs stay true: commands and options they show exist, policy keys exist, named Python
objects exist, and every code block marked runnable runs.

A fenced block is runnable when the line before its fence is ``<!-- run -->``: a ``python``
block is run in a fresh interpreter inside a temporary directory holding a copy of
``examples/``; a ``console`` block's ``$ `` lines are run there by the shell and their output
compared with the lines shown (a line ``...`` stands for any number of lines).
"""

from __future__ import annotations

import importlib
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from pydantic import BaseModel

from callgate import Policy, parse_policy
from callgate.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"(?P<mark><!-- run -->\n)?```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)```", re.S)
#: YAML blocks that are not policies, by their first line: the command catalog, a manifest
#: excerpt, a pre-commit configuration and an attack scenario
NOT_POLICIES = ("curl:", "  tool-permissions:", "repos:", "name: exfil-low-entropy-ping",
                "cases:")
SHELL_BLOCKS = ("console", "bash", "sh", "shell", "")


def _blocks(lang: str | tuple[str, ...]) -> list[tuple[str, bool, str]]:
    langs = (lang,) if isinstance(lang, str) else lang
    return [(f"{page.name}:{page.read_text()[:m.start()].count(chr(10)) + 1}",
             bool(m.group("mark")), m.group("body"))
            for page in PAGES for m in FENCE.finditer(page.read_text(encoding="utf-8"))
            if m.group("lang") in langs]


def _segments(line: str) -> list[list[str]]:
    """The simple commands of a shell line, as words (redirections and their targets cut)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    segments: list[list[str]] = [[]]
    cut = False
    for token in lexer:
        if set(token) <= set("|&;()"):
            segments.append([])
            cut = False
        elif set(token) <= set("<>"):
            cut = True
        elif not cut:
            segments[-1].append(token)
    return segments


def _command_lines() -> list[tuple[str, tuple[str, ...]]]:
    found = []
    for where, _, body in _blocks(SHELL_BLOCKS):
        for raw in body.replace("\\\n", " ").splitlines():
            if not raw.strip().startswith(("$ callgate", "callgate")):
                continue
            for words in _segments(raw.strip().removeprefix("$ ")):
                if words[:1] == ["callgate"]:
                    found.append((where, tuple(words)))
    return found


@pytest.mark.parametrize(("where", "command"), _command_lines())
def test_a_command_shown_in_the_docs_exists_with_its_options(
        where: str, command: tuple[str, ...]) -> None:
    words = list(command[1:])
    ctx = click.Context(main)
    command: click.Command = main
    path = ["callgate"]
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        found = command.get_command(ctx, words[0])
        assert found is not None, f"{where}: `{' '.join(path)}` has no command {words[0]!r}"
        command, path = found, [*path, words.pop(0)]
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | {"--help"}
    for word in words:
        if word == "--":  # what follows is the command's own argument vector
            break
        if word.startswith("--"):
            option = word.split("=", 1)[0]
            assert option in known, f"{where}: `{' '.join(path)}` has no option {option}"


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds, and whether it holds a mapping of names to that model."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if getattr(annotation, "__origin__", None) is dict:
        return _model_of(annotation.__args__[1])[0], True
    for inner in getattr(annotation, "__args__", ()):
        found, mapping = _model_of(inner)
        if found is not None:
            return found, mapping
    return None, False


def _unknown_keys(model: type[BaseModel], value: Any, where: str) -> list[str]:
    """Keys of ``value`` (a mapping, or a list of mappings) that ``model`` does not have."""
    if isinstance(value, list):
        return [k for item in value for k in _unknown_keys(model, item, where)]
    if not isinstance(value, dict):
        return []
    fields = {f.alias or name: f for name, f in model.model_fields.items()}
    wrong = []
    for key, inner in value.items():
        field = fields.get(key)
        if field is None:
            wrong.append(f"{where}.{key}")
            continue
        nested, mapping = _model_of(field.annotation)
        if nested is not None and mapping and isinstance(inner, dict):
            for name, spec in inner.items():
                wrong.extend(_unknown_keys(nested, spec, f"{where}.{key}.{name}"))
        elif nested is not None:
            wrong.extend(_unknown_keys(nested, inner, f"{where}.{key}"))
    return wrong


@pytest.mark.parametrize(("where", "body"),
                         [(w, b) for w, _, b in _blocks("yaml") if not b.startswith(NOT_POLICIES)])
def test_a_policy_shown_in_the_docs_has_only_keys_the_schema_knows(where: str, body: str) -> None:
    data = yaml.safe_load(body)
    assert isinstance(data, dict), f"{where}: not a mapping"
    assert not _unknown_keys(Policy, data, "policy"), where
    if {"name", "version"} <= data.keys():  # a whole policy: it loads
        parse_policy(body, where)


def _dotted_names() -> list[tuple[str, str]]:
    found = set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"`(callgate(?:\.\w+)+)`", text):
            found.add((f"{page.name}:{text[:m.start()].count(chr(10)) + 1}", m.group(1)))
    return sorted(found)


@pytest.mark.parametrize(("where", "name"), _dotted_names())
def test_a_python_name_the_docs_give_exists(where: str, name: str) -> None:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            assert hasattr(value, attribute), f"{where}: {name} does not exist"
            value = getattr(value, attribute)
        return
    pytest.fail(f"{where}: {name} does not exist")


def _workspace(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "data").mkdir()
    return tmp_path


@pytest.mark.parametrize(("where", "body"), [(w, b) for w, run, b in _blocks("python") if run])
def test_a_runnable_python_block_runs(where: str, body: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", body], cwd=_workspace(tmp_path),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{where}:\n{done.stderr}"


def _matches(shown: list[str], real: list[str]) -> bool:
    if not shown:
        return not real
    if shown[0] == "...":
        return any(_matches(shown[1:], real[i:]) for i in range(len(real) + 1))
    return bool(real) and real[0] == shown[0] and _matches(shown[1:], real[1:])


@pytest.mark.parametrize(("where", "body"), [(w, b) for w, run, b in _blocks("console") if run])
def test_a_runnable_console_block_prints_what_it_shows(where: str, body: str,
                                                      tmp_path: Path) -> None:
    work = _workspace(tmp_path)
    cli = Path(sys.executable).parent
    for command, shown in re.findall(r"^\$ (.*)\n((?:(?!\$ ).*\n?)*)", body, re.M):
        done = subprocess.run(command, shell=True, cwd=work, capture_output=True, text=True,
                              timeout=120, check=False, env={"PATH": f"{cli}:/usr/bin:/bin"})
        real = (done.stdout + done.stderr).splitlines()
        assert _matches(shown.splitlines(), real), f"{where}: `{command}` printed:\n" + \
            "\n".join(real)


#: names of the world outside Python the docs may mention: Linux capabilities, a macOS fcntl,
#: an environment variable no source line spells
OUTSIDE = frozenset({"CAP_FSETID", "CAP_SETFCAP", "F_GETPATH", "HTTP_PROXY", "NODE_OPTIONS",
                     "TAR_OPTIONS"})


def _defined(name: str) -> bool:
    """Named in callgate's source, a constant of the standard library, or of the world."""
    if name in OUTSIDE or any(hasattr(importlib.import_module(m), name)
                              for m in ("os", "resource", "socket", "stat", "fcntl", "errno")):
        return True
    word = re.compile(rf"\b{re.escape(name)}\b")
    return any(word.search(path.read_text(encoding="utf-8"))
               for path in (ROOT / "src" / "callgate").rglob("*.py"))


def _shown(pattern: str) -> list[tuple[str, str]]:
    found = set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(pattern, text):
            found.add((f"{page.name}:{text[:m.start()].count(chr(10)) + 1}", m.group(1)))
    return sorted(found)


@pytest.mark.parametrize(("where", "name"), _shown(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`"))
def test_a_constant_the_docs_name_is_defined(where: str, name: str) -> None:
    assert _defined(name), f"{where}: {name} is not defined anywhere in src/callgate"


#: files the docs name as a user's own, as examples
USERS_FILES = frozenset({"secretary.py", "myagent/tools.py"})


@pytest.mark.parametrize(("where", "name"), [
    (w, n) for w, n in _shown(r"`((?:[\w./]+/)?_?\w+\.py)`") if n not in USERS_FILES])
def test_a_source_file_the_docs_name_exists(where: str, name: str) -> None:
    candidates = [ROOT / name, ROOT / "src" / name, *(ROOT / "src" / "callgate").rglob(
        Path(name).name), *(ROOT / "benchmarks").glob(Path(name).name),
        *(ROOT / "examples").glob(Path(name).name), *(ROOT / "tests").rglob(Path(name).name)]
    assert any(c.is_file() and c.as_posix().endswith(name) for c in candidates), \
        f"{where}: no file {name}"


def test_the_docs_run_commands_through_the_cli_not_module_paths() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert "python -m callgate" not in text, f"{page.name}: use the `callgate` command"


def test_the_policy_file_reference_describes_every_top_level_key() -> None:
    reference = (ROOT / "docs" / "policy-file.md").read_text(encoding="utf-8")
    for name, field in Policy.model_fields.items():
        key = field.alias or name
        assert re.search(rf"`{key}`|^#+ .*\b{key}\b|^{key}:", reference, re.M), \
            f"docs/policy-file.md does not describe the `{key}` key"
