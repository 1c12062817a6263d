"""Policy loading: validated policies, and every problem reported at its exact file:line:col."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate import PolicyError, Problem
from callgate.policy._loader import MAX_DEPTH, MAX_POLICY_BYTES, load_policy, parse_policy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "research-agent.yaml"


def problems_of(text: str) -> list[Problem]:
    with pytest.raises(PolicyError) as info:
        parse_policy(textwrap.dedent(text), "policy.yaml")
    return info.value.problems


def only(text: str) -> Problem:
    problems = problems_of(text)
    assert len(problems) == 1, problems
    return problems[0]


# --- the example -------------------------------------------------------------------


def test_example_policy_loads_with_every_section() -> None:
    loaded = load_policy(EXAMPLE)
    policy = loaded.policy
    assert loaded.source == str(EXAMPLE)
    assert policy.name == "research-agent" and policy.version == 1
    assert policy.principal is not None
    http = policy.principal.capabilities[0]
    assert http.constraints.allowed_hosts == ("api.github.com", "*.example.org")
    assert http.constraints.max_calls_per_minute == 30
    assert [r.decision for r in policy.rules] == ["deny", "require-approval", "allow"]
    assert policy.rules[0].match.taint_sources == ("web", "rag", "email")
    assert policy.rules[1].match.action == ("write",)
    tool = policy.tools["write_report"]
    assert tool.network == "deny" and tool.constraints.max_invocations == 3
    assert tool.constraints.only_after == ("fetch",)
    assert policy.run_state.quarantine_after_denials == 5


def test_locate_gives_one_based_line_and_column_of_any_node() -> None:
    loaded = load_policy(EXAMPLE)
    assert loaded.locate(()) == (1, 1)
    assert loaded.locate(("rules", 1, "decision")) == (24, 15)
    assert loaded.locate(("rules", 1)) == (21, 5)
    assert loaded.locate(("principal", "capabilities", 0, "actions", 0)) == (7, 17)
    assert loaded.locate(("tools", "write_report", "network")) == (36, 14)


def test_locate_returns_none_for_absent_paths() -> None:
    loaded = load_policy(EXAMPLE)
    assert loaded.locate(("rules", 7)) is None
    assert loaded.locate(("behavior",)) is None


# --- raw spans for the behavioral-language parser ----------------------------------------

SPANS = """\
name: spans
version: 1
behavior:
  - id: one-line
    rule: abs(send_email)
  - id: multi
    rule: prec(read_file,
      send_email)
      and more
  - id: block
    rule: |
      resp(a, b)
        and x
  - id: quoted
    rule: "quoted \\n text"
"""


def _position(text: str, line: int, column: int, offset_in: str, offset: int) -> tuple[int, int]:
    """The file position of ``offset`` in a span starting at line/column (as a parser would)."""
    before = offset_in[:offset]
    if "\n" not in before:
        return line, column + offset
    return line + before.count("\n"), offset - before.rfind("\n")


def test_raw_span_of_a_plain_scalar_is_its_text_and_start() -> None:
    loaded = parse_policy(SPANS)
    assert loaded.raw_span(("behavior", 0, "rule")) == ("abs(send_email)", 5, 11)


def test_raw_span_of_a_multiline_plain_scalar_maps_every_offset_to_the_file() -> None:
    loaded = parse_policy(SPANS)
    span = loaded.raw_span(("behavior", 1, "rule"))
    assert span is not None
    raw, line, column = span
    assert raw.startswith("prec(read_file,\n") and raw.endswith("and more")
    assert (line, column) == (7, 11)
    lines = SPANS.splitlines()
    for offset, char in enumerate(raw):
        if char == "\n":
            continue
        at_line, at_col = _position(SPANS, line, column, raw, offset)
        assert lines[at_line - 1][at_col - 1] == char
    # the parsed value folds lines; the raw span keeps them, so error places stay exact
    assert loaded.policy.behavior[1].rule == "prec(read_file, send_email) and more"


def test_raw_span_of_a_block_scalar_starts_at_its_first_content_line() -> None:
    loaded = parse_policy(SPANS)
    assert loaded.raw_span(("behavior", 2, "rule")) == ("      resp(a, b)\n        and x", 12, 1)
    assert loaded.locate(("behavior", 2, "rule")) == (11, 11)


def test_raw_span_of_a_quoted_scalar_is_the_text_between_the_quotes() -> None:
    loaded = parse_policy(SPANS)
    assert loaded.raw_span(("behavior", 3, "rule")) == ("quoted \\n text", 15, 12)


def test_raw_span_is_none_for_collections_and_absent_nodes() -> None:
    loaded = parse_policy(SPANS)
    assert loaded.raw_span(("behavior",)) is None
    assert loaded.raw_span(("behavior", 9, "rule")) is None


# --- schema problems at exact places -------------------------------------------------------


def test_unknown_key_is_reported_at_the_key_with_a_suggestion() -> None:
    problem = only("""\
        name: p
        version: 1
        rules:
          - id: r
            priorty: 5
            decision: allow
        """)
    assert (problem.source, problem.line, problem.column) == ("policy.yaml", 5, 5)
    assert problem.field == "rules[0].priorty"
    assert "unknown key 'priorty'" in problem.message
    assert "did you mean 'priority'" in problem.message


def test_unknown_top_level_key_lists_the_allowed_keys() -> None:
    problem = only("name: p\nversion: 1\nzzz: 1\n")
    assert (problem.line, problem.column) == (3, 1)
    assert "allowed keys: name, version" in problem.message


def test_wrong_type_is_reported_at_the_value() -> None:
    problem = only("""\
        name: p
        version: 1
        rules:
          - id: r
            priority: high
            decision: allow
        """)
    assert (problem.line, problem.column, problem.field) == (5, 15, "rules[0].priority")
    assert "integer" in problem.message and "'high'" in problem.message


def test_bad_enum_value_is_reported_at_the_value() -> None:
    problem = only("""\
        name: p
        version: 1
        rules:
          - id: r
            decision: perhaps
        """)
    assert (problem.line, problem.column, problem.field) == (5, 15, "rules[0].decision")
    assert "'allow', 'deny' or 'require-approval'" in problem.message


def test_missing_required_key_is_reported_at_its_mapping() -> None:
    problem = only("name: p\nversion: 1\nrules:\n  - id: r\n    reason: x\n")
    assert (problem.line, problem.column, problem.field) == (4, 5, "rules[0].decision")
    assert problem.message == "missing required key 'decision'"


def test_every_problem_is_reported_at_once_in_file_order() -> None:
    problems = problems_of("""\
        name: p
        version: [1]
        rules:
          - id: a
            decision: maybe
            match: {tool_class: [1], parameters: {url: {pattern: "(?<=a)b"}}}
          - id: a
            decision: allow
        tools:
          t:
            network: sometimes
            risk: extreme
        run_state: {quarantine_after_denials: 0, windw: 3}
        """)
    places = [(p.line, p.column, p.field) for p in problems]
    assert places == [
        (2, 10, "version"),
        (5, 15, "rules[0].decision"),
        (6, 26, "rules[0].match.tool_class[0]"),
        (6, 58, "rules[0].match.parameters.url.pattern"),
        (7, 9, "rules[1].id"),
        (11, 14, "tools.t.network"),
        (12, 11, "tools.t.risk"),
        (13, 39, "run_state.quarantine_after_denials"),
        (13, 42, "run_state.windw"),
    ]
    assert "duplicate id 'a'" in problems[4].message
    assert "refused regex" in problems[3].message


def test_a_union_mismatch_is_one_problem_naming_each_accepted_form() -> None:
    problem = only("name: p\nversion: 1\ntools:\n  t:\n    network: maybe\n")
    assert (problem.line, problem.column) == (5, 14)
    assert problem.message == "must be 'deny' or 'allow' or a mapping (got 'maybe')"


def test_a_union_member_with_the_right_shape_reports_its_own_error() -> None:
    problem = only("name: p\nversion: 1\ntools:\n  t:\n    network: {proxy: 'http://p'}\n")
    assert problem.message == "missing required key 'hosts'"
    assert (problem.line, problem.column, problem.field) == (5, 14, "tools.t.network.hosts")


def test_a_pattern_without_a_linear_meaning_is_refused_at_the_pattern() -> None:
    problem = only("""\
        name: p
        version: 1
        rules:
          - id: r
            match:
              parameters:
                url: {pattern: '(?<=a)b'}
            decision: deny
        """)
    assert (problem.line, problem.column) == (7, 24)
    assert problem.field == "rules[0].match.parameters.url.pattern"
    assert problem.message.startswith("refused regex: lookahead and lookbehind")


def test_duplicate_rule_id_is_reported_at_the_repeat() -> None:
    problem = only("name: p\nversion: 1\nrules:\n  - {id: x, decision: allow}\n"
                   "  - {id: x, decision: deny}\n")
    assert (problem.line, problem.column, problem.field) == (5, 10, "rules[1].id")


# --- YAML-level refusals -------------------------------------------------------------------


def test_malformed_yaml_is_reported_at_the_parser_error() -> None:
    problem = only("name: p\nversion: 1\nrules:\n  - id: r\n   decision: allow\n")
    assert problem.message.startswith("invalid YAML:")
    assert (problem.line, problem.column) == (5, 4)


def test_unclosed_flow_sequence_is_malformed_yaml() -> None:
    problem = only("name: p\nversion: 1\nrules: [a, b\n")
    assert problem.message.startswith("invalid YAML:") and problem.line == 4


def test_duplicate_key_is_refused_at_the_second_key() -> None:
    problem = only("name: p\nversion: 1\nrules: []\nname: q\n")
    assert (problem.line, problem.column, problem.field) == (4, 1, "name")
    assert problem.message == "duplicate key 'name' (first given at line 1)"


def test_duplicate_key_in_a_nested_mapping_is_refused() -> None:
    problem = only("name: p\nversion: 1\nrules:\n  - id: r\n    decision: deny\n"
                   "    decision: allow\n")
    assert (problem.line, problem.column, problem.field) == (6, 5, "rules[0].decision")


def test_alias_bomb_is_refused_at_the_first_alias() -> None:
    layers = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        layers.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    problem = only("\n".join(layers) + "\n")
    assert (problem.line, problem.column) == (2, 8)
    assert "aliases" in problem.message


def test_even_a_single_alias_is_refused() -> None:
    problem = only("name: &n p\nversion: 1\nprincipal: {name: *n}\n")
    assert (problem.line, problem.column) == (3, 19)


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    depth = MAX_DEPTH + 5
    problem = only(f"name: p\nversion: 1\nx: {'[' * depth}{']' * depth}\n")
    assert problem.line == 3 and "nesting deeper" in problem.message


def test_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("name: p\nversion: 1\n# " + "x" * MAX_POLICY_BYTES + "\n")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    (problem,) = info.value.problems
    assert problem.source == str(path) and problem.line is None
    assert "larger than" in problem.message


def test_oversized_text_is_refused() -> None:
    with pytest.raises(PolicyError, match="larger than"):
        parse_policy("#" * (MAX_POLICY_BYTES + 1))


def test_object_constructing_tags_are_refused() -> None:
    problem = only("name: !!python/object/apply:os.system [id]\nversion: 1\n")
    assert (problem.line, problem.column) == (1, 7)
    assert "unsupported YAML tag" in problem.message


def test_explicit_standard_tags_use_the_same_strict_spellings() -> None:
    problem = only("name: p\nversion: 1\nrun_state: {behavioral_rules: !!bool yes}\n")
    assert (problem.line, problem.column) == (3, 31)
    assert problem.message == "'yes' is not a valid bool"
    assert parse_policy("name: !!str 5\nversion: !!int 0x1f\n").policy.version == 31


def test_integer_beyond_python_digit_limit_is_a_problem_not_a_crash() -> None:
    problem = only("name: p\nversion: " + "9" * 5000 + "\n")
    assert (problem.line, problem.column, problem.field) == (2, 10, "version")


def test_control_characters_are_reported_at_their_place() -> None:
    problem = only("name: p\x07\nversion: 1\n")
    assert (problem.line, problem.column) == (1, 8)


def test_several_documents_are_refused() -> None:
    problem = only("name: p\nversion: 1\n---\nname: q\n")
    assert problem.line == 3


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n"])
def test_empty_policy_is_refused(text: str) -> None:
    assert "empty" in only(text).message


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text\n", "42\n"])
def test_non_mapping_top_level_is_refused(text: str) -> None:
    problem = only(text)
    assert (problem.line, problem.column) == (1, 1) and "mapping" in problem.message


# --- YAML 1.1 surprises do not happen ------------------------------------------------------


def test_yaml11_boolean_words_stay_strings_as_keys_and_values() -> None:
    loaded = parse_policy("""\
name: p
version: 1
rules:
  - id: r
    match: {tool: on, action: [yes, no], tool_class: off}
    decision: deny
tools:
  on: {risk: low}
  yes: {risk: high}
""")
    match = loaded.policy.rules[0].match
    assert match.tool == ("on",) and match.action == ("yes", "no")
    assert match.tool_class == ("off",)
    assert set(loaded.policy.tools) == {"on", "yes"}


def test_true_and_false_are_booleans_in_boolean_places() -> None:
    loaded = parse_policy("name: p\nversion: 1\nrun_state: {behavioral_rules: false}\n")
    assert loaded.policy.run_state.behavioral_rules is False


def test_dates_and_sexagesimals_stay_text() -> None:
    loaded = parse_policy("name: p\nversion: 2024-01-01\nrules:\n  - id: 1:20\n    decision: deny")
    assert loaded.policy.version == "2024-01-01"
    assert loaded.policy.rules[0].id == "1:20"


def test_numeric_keys_stay_text() -> None:
    loaded = parse_policy("name: p\nversion: 1\ntools:\n  1: {risk: low}\n")
    assert set(loaded.policy.tools) == {"1"}


# --- files and working_dir -----------------------------------------------------------------


def test_missing_file_is_a_policy_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "nope.yaml")
    (problem,) = info.value.problems
    assert problem.source.endswith("nope.yaml") and "cannot read" in problem.message


def test_directory_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy(tmp_path)


def test_invalid_utf8_is_reported_at_its_byte(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"name: p\nversion: 1\nrules: [\xff]\n")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    (problem,) = info.value.problems
    assert (problem.line, problem.column) == (3, 9)


def test_relative_working_dir_resolves_against_the_policy_file(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "p.yaml"
    path.write_text("name: p\nversion: 1\nworking_dir: ../work\n")
    loaded = load_policy(path)
    assert loaded.policy.working_dir == str((tmp_path / "work").resolve())


def test_relative_working_dir_in_text_resolves_against_base_dir(tmp_path: Path) -> None:
    loaded = parse_policy("name: p\nversion: 1\nworking_dir: w\n", base_dir=tmp_path)
    assert loaded.policy.working_dir == str((tmp_path / "w").resolve())


def test_absent_working_dir_stays_absent(tmp_path: Path) -> None:
    assert parse_policy("name: p\nversion: 1\n", base_dir=tmp_path).policy.working_dir is None


# --- invariants ----------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"#,? \n\tx1")), max_size=120))
def test_any_text_either_loads_or_raises_policy_error_with_places_inside_it(text: str) -> None:
    try:
        parse_policy(text)
    except PolicyError as exc:
        assert exc.problems
        line_count = text.count("\n") + 1
        for problem in exc.problems:
            assert problem.line is None or 1 <= problem.line <= line_count + 1


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
               min_size=1, max_size=30))
def test_any_quoted_tool_name_round_trips_as_the_same_string(name: str) -> None:
    escaped = name.replace("'", "''")
    loaded = parse_policy(f"name: p\nversion: 1\ntools:\n  '{escaped}': {{risk: low}}\n")
    assert list(loaded.policy.tools) == [name]


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 2000), st.sampled_from(["allow", "x", "on", ""])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["id", "decision", "match", "tool", "risk", "hosts", "zz"]),
                      inner, max_size=3),
    max_leaves=8,
)
_SECTIONS = st.fixed_dictionaries(
    {"name": st.sampled_from(["p", ""]), "version": _SCALARS},
    optional={
        "rules": st.lists(st.dictionaries(
            st.sampled_from(["id", "priority", "match", "decision", "reason", "bogus"]), _VALUES,
            max_size=4), max_size=3),
        "tools": st.dictionaries(st.sampled_from(["t", "on"]), _VALUES, max_size=2),
        "principal": _VALUES,
        "run_state": _VALUES,
        "behavior": _VALUES,
    },
)


@settings(max_examples=150, deadline=None)
@given(_SECTIONS)
def test_every_schema_problem_in_a_yaml_document_gets_a_line_and_column(doc: dict) -> None:
    text = yaml.safe_dump(doc, sort_keys=False)
    try:
        parse_policy(text)
    except PolicyError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.line is not None and problem.column is not None, problem
            assert 1 <= problem.line <= text.count("\n") + 1


# --- declared roots that a symlink leads elsewhere ----------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose data, build and src roots lead out, and whose current stays in."""
    work = tmp_path / "proj"
    (work / "releases" / "v2").mkdir(parents=True)
    (work / "current").symlink_to("releases/v2")
    (work / "data").symlink_to("/etc")
    (tmp_path / "elsewhere").mkdir()
    (work / "build").symlink_to(tmp_path / "elsewhere")
    (work / "src").symlink_to("/etc")
    return work


def _load_in(project: Path, body: str) -> list[Problem] | None:
    path = project / "policy.yaml"
    path.write_text("name: p\nversion: 1\nworking_dir: .\n" + textwrap.dedent(body))
    try:
        load_policy(path)
    except PolicyError as exc:
        return exc.problems
    return None


def test_roots_symlinked_out_of_the_working_directory_are_load_errors_at_their_place(
    project: Path,
) -> None:
    problems = _load_in(project, """\
        principal:
          name: a
          capabilities:
            - tool_class: file
              constraints: {allowed_paths: ["./current/**", "./data/**"]}
        tools:
          t:
            filesystem:
              read: [./src/**]
              write: [./build/**]
        executors:
          retrieval_root: ./data
          databases: {main: ./build/app.db}
        """)
    assert problems is not None
    places = [(p.line, p.column, p.field) for p in problems]
    assert places == [
        (8, 53, "principal.capabilities[0].constraints.allowed_paths[1]"),
        (12, 14, "tools.t.filesystem.read[0]"),
        (13, 15, "tools.t.filesystem.write[0]"),
        (15, 19, "executors.retrieval_root"),
        (16, 21, "executors.databases.main"),
    ]
    assert all("leads through a symlink" in p.message for p in problems)
    assert str(problems[0]).startswith(f"{project / 'policy.yaml'}:8:53: the root of './data/**'")


def test_follow_symlinks_opts_a_root_in_by_its_written_spelling(project: Path) -> None:
    assert _load_in(project, """\
        principal:
          name: a
          capabilities:
            - tool_class: file
              constraints: {allowed_paths: ["./data/**"], follow_symlinks: ["./data/**"]}
        tools:
          t: {filesystem: {read: [./src/**], write: [./build/**], follow_symlinks: [./build/**,
              ./src/**]}}
        executors: {retrieval_root: ./data, follow_symlinks: [./data]}
        """) is None


def test_a_follow_symlinks_entry_must_name_a_pattern_beside_it(project: Path) -> None:
    problems = _load_in(project, """\
        tools:
          t: {filesystem: {read: [./current/**], follow_symlinks: [./data/**]}}
        """)
    assert problems is not None and len(problems) == 1
    assert "follow_symlinks names './data/**'" in problems[0].message


def test_roots_that_do_not_exist_yet_or_stay_inside_load(project: Path) -> None:
    assert _load_in(project, """\
        tools:
          t: {filesystem: {read: [./current/**, ./releases/*], write: [./not-yet/**, out.txt]}}
        """) is None
