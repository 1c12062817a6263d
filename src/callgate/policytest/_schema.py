"""The policy test file: its schema, and loading it with every problem at file:line:col.

A test file is YAML read by the policy loader's rules (``validate_document``): unknown keys,
wrong types, a call step without ``expect`` or a denied call given a result are all reported
together, each at its place. Its cases are tables of steps: a call with the decision it must
get (and the result the host reports when it is allowed), or a note (an event that is not a
call, such as the user's prompt).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from callgate._errors import PolicyError, Problem
from callgate._model import Verdict
from callgate.policy._loader import validate_document

#: Test files larger than this are refused before parsing (a generated file pins a whole run).
MAX_TESTS_BYTES = 16 * 1024 * 1024
#: Deeper nesting than this is refused: a case's steps plus parameters up to the kernel's 32.
MAX_TESTS_DEPTH = 40


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CallSpec(_Strict):
    """A tool call as ``callgate decide`` reads it; ``taint`` lists the sources it carries."""

    tool: str = Field(min_length=1)
    tool_class: str = Field(min_length=1)
    action: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=dict)
    taint: tuple[str, ...] = ()


class WitnessSpec(_Strict):
    """The statement a decision must name, and its offending events (steps, from 1) if given."""

    statement: str = Field(min_length=1)
    events: tuple[int, ...] | None = None


class Expect(_Strict):
    """What a call's decision must be. An absent key is not compared; ``witness: null`` means
    the decision has no witness."""

    verdict: Verdict
    reasons: tuple[str, ...] | None = None
    witness: WitnessSpec | None = None


class ResultSpec(_Strict):
    """What the host reports an allowed call returned (nothing is executed)."""

    status: Literal["ok", "error"] = "ok"
    output: Any = None
    error: str | None = None
    taint: tuple[str, ...] = ()


class NoteSpec(_Strict):
    """An event of the run that is not a call (``Kernel.note``): a prompt, say."""

    action: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    output: str | None = None
    taint: tuple[str, ...] = ()


class Step(_Strict):
    """One step of a case: ``call`` with ``expect`` (and maybe ``result``), or ``note``."""

    call: CallSpec | None = None
    expect: Expect | None = None
    result: ResultSpec | None = None
    note: NoteSpec | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        if (self.call is None) == (self.note is None):
            raise ValueError("a step has exactly one of call or note")
        if self.note is not None and (self.expect is not None or self.result is not None):
            raise ValueError("a note has no expect or result")
        if self.call is not None and self.expect is None:
            raise ValueError("a call step needs expect (at least its verdict)")
        if self.result is not None and self.expect is not None \
                and self.expect.verdict == "deny":
            raise ValueError("a call expected to be denied has no result")
        return self


class Case(_Strict):
    """A named case: ``steps``, or a one-call case written with ``call``/``expect``/``result``.

    ``obligations``, when given, are the statement ids still open after the last step (``[]``:
    none).
    """

    name: str = Field(min_length=1)
    description: str | None = None
    steps: tuple[Step, ...] | None = None
    call: CallSpec | None = None
    expect: Expect | None = None
    result: ResultSpec | None = None
    obligations: tuple[str, ...] | None = None

    @model_validator(mode="after")
    def _steps_or_call(self) -> Case:
        if (self.steps is None) == (self.call is None):
            raise ValueError("a case has either steps or one call (with expect)")
        if self.steps == ():
            raise ValueError("a case's steps cannot be empty")
        if self.steps is not None and (self.expect is not None or self.result is not None):
            raise ValueError("expect and result belong to a step when a case has steps")
        if self.call is not None:
            Step(call=self.call, expect=self.expect, result=self.result)  # the step's checks
        return self

    def all_steps(self) -> tuple[Step, ...]:
        """The case's steps (the one-call form as one step)."""
        if self.steps is not None:
            return self.steps
        return (Step(call=self.call, expect=self.expect, result=self.result),)


class PolicyTests(_Strict):
    """A test file: the cases, and the working directory relative paths resolve against."""

    working_dir: str | None = None
    cases: tuple[Case, ...]

    @model_validator(mode="after")
    def _some_case(self) -> PolicyTests:
        # checked here, not as a length bound: a bound would also report every bad case again
        if not self.cases:
            raise ValueError("a test file needs at least one case")
        return self


@dataclass(frozen=True)
class LoadedTests:
    """A validated test file, with where each case is written and the working directory."""

    tests: PolicyTests
    source: str
    working_dir: str
    places: Mapping[int, tuple[int, int]] = field(default_factory=dict)

    def where(self, case_index: int) -> str:
        """``file:line:col`` of case ``case_index``."""
        place = self.places.get(case_index)
        return self.source if place is None else f"{self.source}:{place[0]}:{place[1]}"


def load_tests(path: str | os.PathLike[str]) -> LoadedTests:
    """Read and validate a policy test file; ``PolicyError`` lists every problem at its place.

    The working directory is the file's ``working_dir`` (relative to the file), else the file's
    own directory.
    """
    source = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_TESTS_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise PolicyError([Problem(f"cannot read test file: {reason}", source)]) from exc
    if len(data) > MAX_TESTS_BYTES:
        raise PolicyError([Problem(f"test file is larger than {MAX_TESTS_BYTES} bytes", source)])
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PolicyError([Problem("test file is not valid UTF-8", source)]) from exc
    return parse_tests(text, source, base_dir=Path(source).parent)


def parse_tests(text: str, source: str = "<tests>", *,
                base_dir: str | os.PathLike[str] | None = None) -> LoadedTests:
    """Validate test YAML given as text (see ``load_tests``); ``base_dir`` defaults to the
    current directory."""
    if not text.strip():
        raise PolicyError([Problem("the test file is empty (it needs cases)", source)])
    tests, places = validate_document(text, source, PolicyTests, max_depth=MAX_TESTS_DEPTH)
    _refuse_repeated_names(tests, places, source)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    working_dir = (base / tests.working_dir) if tests.working_dir is not None else base
    case_places = {i: places[("cases", i)][:2] for i in range(len(tests.cases))
                   if ("cases", i) in places}
    return LoadedTests(tests, source, str(working_dir.resolve()), case_places)


def _refuse_repeated_names(tests: PolicyTests, places: Mapping[Any, Any], source: str) -> None:
    seen: dict[str, int] = {}
    problems = []
    for i, case in enumerate(tests.cases):
        if case.name in seen:
            line, column = places[("cases", i, "name")][:2]
            problems.append(Problem(f"duplicate case name {case.name!r} "
                                    f"(also cases[{seen[case.name]}])",
                                    source, line, column, f"cases[{i}].name"))
        seen.setdefault(case.name, i)
    if problems:
        raise PolicyError(problems)
