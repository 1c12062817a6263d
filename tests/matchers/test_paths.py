"""The path gate against a real directory tree with real symlinks."""

from __future__ import annotations

import fnmatch
import os
import pathlib
import select
import signal
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from callgate import CallgateError
from callgate.matchers._paths import (
    PathArg,
    PathRejected,
    canonical,
    canonical_parameters,
    check_paths,
    compile_glob,
    path_arguments,
    root_escape,
)


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """work/data with files, a symlink to /etc inside data, a symlinked parent, a fake home."""
    work = tmp_path / "work"
    data = work / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.txt").write_text("a")
    (data / "sub" / "b.txt").write_text("b")
    (data / "naïve.txt").write_text("unicode")
    (data / "etc").symlink_to("/etc")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (work / "parent_link").symlink_to(outside)
    (outside / "inner").mkdir()
    (data / "inner_link").symlink_to(outside / "inner")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("key")
    monkeypatch.setenv("HOME", str(home))
    return work


def _read(value: str) -> list[PathArg]:
    return [PathArg("path", value, "read")]


def _deny_reason(tree: Path, value: str, read: list[str] | None = None) -> str:
    verdict = check_paths(_read(value), ["./data/**"] if read is None else read, None, str(tree))
    assert verdict is not None, f"{value} was allowed"
    return verdict.reason


# --------------------------------------------------------------------------- globs


def test_double_star_matches_the_directory_itself_and_everything_below() -> None:
    glob = compile_glob("./data/**", "/w")
    assert glob.matches("/w/data")
    assert glob.matches("/w/data/a.txt")
    assert glob.matches("/w/data/x/y/z")
    assert not glob.matches("/w/database")
    assert not glob.matches("/w")
    assert not glob.matches("/w/other/data/a")


def test_double_star_in_the_middle_matches_zero_or_more_segments() -> None:
    glob = compile_glob("/r/**/x.txt", "/")
    assert glob.matches("/r/x.txt")
    assert glob.matches("/r/a/b/x.txt")
    assert not glob.matches("/r/a/y.txt")
    assert not glob.matches("/rx.txt")


def test_star_and_question_mark_stay_within_one_segment() -> None:
    glob = compile_glob("/r/*.txt", "/")
    assert glob.matches("/r/a.txt")
    assert glob.matches("/r/.hidden.txt")
    assert not glob.matches("/r/sub/a.txt")
    one = compile_glob("/r/?", "/")
    assert one.matches("/r/a")
    assert not one.matches("/r/ab")
    assert not compile_glob("/r?x", "/").matches("/r/x")


def test_character_classes_match_members_and_never_a_slash() -> None:
    assert compile_glob("/r/[abc].txt", "/").matches("/r/b.txt")
    assert not compile_glob("/r/[abc].txt", "/").matches("/r/d.txt")
    assert compile_glob("/r/[a-c]", "/").matches("/r/c")
    assert compile_glob("/r/[!a-c]", "/").matches("/r/d")
    assert not compile_glob("/r/[!a-c]", "/").matches("/r/a")
    assert not compile_glob("/r[!x]x", "/").matches("/r/x")
    assert not compile_glob("/r[/]x", "/").matches("/r/x")


def test_regex_characters_and_unclosed_brackets_in_globs_are_literal() -> None:
    assert compile_glob("/r/a+b(1).txt", "/").matches("/r/a+b(1).txt")
    assert not compile_glob("/r/a+b(1).txt", "/").matches("/r/aab1.txt")
    assert compile_glob("/r/[x", "/").matches("/r/[x")
    assert compile_glob("/r/[&&|~~]", "/").matches("/r/&")


def test_glob_root_through_a_symlink_is_followed_only_when_the_policy_says_so(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real"
    (real / "x").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(real)
    pattern = str(tmp_path / "alias" / "**")
    followed = compile_glob(pattern, "/", True)
    assert followed.root == os.path.realpath(real)
    assert followed.matches(canonical(str(tmp_path / "alias" / "x"), "/"))
    held = compile_glob(pattern, "/")
    assert held.root == str(tmp_path / "alias")
    assert not held.matches(canonical(str(tmp_path / "alias" / "x"), "/"))


def test_glob_characters_in_the_working_directory_are_literal(tmp_path: Path) -> None:
    work = tmp_path / "run[1]*"
    (work / "data").mkdir(parents=True)
    glob = compile_glob("./data/**", str(work))
    assert glob.root == str((work / "data").resolve())
    assert glob.matches(canonical("data/x.txt", str(work)))
    assert not glob.matches(str((tmp_path / "run1x" / "data" / "x.txt").resolve()))


def test_glob_tilde_expands_to_the_home_directory(tree: Path) -> None:
    glob = compile_glob("~/.ssh/**", str(tree))
    assert glob.matches(os.path.realpath(tree.parent / "home" / ".ssh" / "id_rsa"))


def test_root_double_star_matches_the_filesystem_root_and_all_paths() -> None:
    glob = compile_glob("/**", "/")
    assert glob.matches("/")
    assert glob.matches("/etc/passwd")


def test_globs_with_dot_dot_after_a_wildcard_are_rejected() -> None:
    with pytest.raises(PathRejected, match="after a wildcard"):
        compile_glob("/data/*/../../etc", "/")


def test_compiled_globs_are_cached() -> None:
    assert compile_glob("/cache/**", "/") is compile_glob("/cache/**", "/")


# --------------------------------------------------------------------------- canonical


def test_canonical_joins_relative_paths_and_collapses_dot_dot(tree: Path) -> None:
    assert canonical("data/sub/../a.txt", str(tree)) == str((tree / "data" / "a.txt").resolve())
    assert canonical("./data/../../outside", str(tree)) == str(tree.parent.resolve() / "outside")


def test_canonical_resolves_symlinks(tree: Path) -> None:
    assert canonical("./data/etc/hosts", str(tree)) == os.path.realpath("/etc/hosts")
    assert canonical("parent_link/secret.txt", str(tree)) == str(
        (tree.parent / "outside" / "secret.txt").resolve()
    )


def test_canonical_expands_home_but_not_other_users(tree: Path) -> None:
    home = (tree.parent / "home").resolve()
    assert canonical("~/.ssh/id_rsa", str(tree)) == str(home / ".ssh" / "id_rsa")
    assert canonical("~root/x", str(tree)) == str(tree.resolve() / "~root" / "x")
    assert canonical("a.txt", "~/proj") == str(home / "proj" / "a.txt")


def test_canonical_strips_local_file_urls_with_percent_decoding(tree: Path) -> None:
    assert canonical("file:///etc/passwd", str(tree)) == "/etc/passwd"
    assert canonical("FILE://localhost/etc/passwd", str(tree)) == "/etc/passwd"
    spaced = tree / "data" / "a b.txt"
    spaced.write_text("x")
    assert canonical(f"file://{tree}/data/a%20b.txt", str(tree)) == str(spaced.resolve())


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("file://evil.com/etc/passwd", "remote host"),
        ("file:///tmp/x%00y", "NUL"),
        ("file:etc/passwd", "absolute"),
        ("file:///etc/passwd?x=1", "query"),
        ("file:///etc/%ff", "UTF-8"),
        ("data/a\x00.txt", "NUL"),
        ("..\\..\\etc\\passwd", "backslash"),
        ("", "empty"),
    ],
)
def test_canonical_refuses_ambiguous_or_remote_paths(tree: Path, value: str, fragment: str) -> None:
    with pytest.raises(PathRejected, match=fragment) as info:
        canonical(value, str(tree))
    assert isinstance(info.value, CallgateError)


def test_canonical_refuses_a_relative_working_directory() -> None:
    with pytest.raises(PathRejected, match="not absolute"):
        canonical("a.txt", "relative/dir")


def test_canonical_refuses_unencodable_unicode(tree: Path) -> None:
    with pytest.raises(PathRejected, match="cannot be resolved"):
        canonical("data/\ud800", str(tree))


# --------------------------------------------------------------------------- finding paths


def test_nested_paths_are_found_with_their_key_path() -> None:
    params = {"opts": {"files": ["/etc/shadow"]}, "files": [1, 2, {"src": "a.txt"}]}
    found = path_arguments(params)
    assert PathArg("opts.files[0]", "/etc/shadow", "read") in found
    assert PathArg("files[2].src", "a.txt", "read") in found


def test_ordinary_text_with_slashes_is_not_a_path() -> None:
    params = {
        "text": "and/or",
        "note": "see https://x/y",
        "plan": "a/b testing rollout",
        "count": 3,
        "flag": None,
    }
    assert path_arguments(params) == []


def test_multi_line_free_text_is_content_not_a_path() -> None:
    code = "/* header */\nint main(void) { return 0; }\n"
    assert path_arguments({"content": code}) == []
    # Under a path-named key the value is a path however it looks.
    assert [a.value for a in path_arguments({"path": code})] == [code, code.strip()]


def test_path_shaped_text_is_a_path_under_any_key() -> None:
    params = {
        "q": "/etc/passwd",
        "h": "~/.ssh/id_rsa",
        "u": "file:///etc",
        "r": "../up",
        "d": "./x",
    }
    assert [a.value for a in path_arguments(params)] == [
        "/etc/passwd",
        "~/.ssh/id_rsa",
        "file:///etc",
        "../up",
        "./x",
    ]


@pytest.mark.parametrize("key", ["path", "file_path", "filename", "out_dir", "cwd", "config_file"])
def test_relative_values_of_path_named_parameters_are_paths(key: str) -> None:
    assert [a.value for a in path_arguments({key: "notes.txt"})] == ["notes.txt"]


def test_declared_path_parameters_are_paths_even_when_relative() -> None:
    assert path_arguments({"blob": "x/y"}) == []
    assert path_arguments({"blob": "x/y"}, extra_path_params=["blob"]) == [
        PathArg("blob", "x/y", "read")
    ]


def test_intent_follows_key_names_and_the_action() -> None:
    params = {"src": "a", "dest": "b", "write_to": "./c", "output_path": "d", "path": "e"}
    intents = {a.key: a.intent for a in path_arguments(params, default_intent="write")}
    assert intents == {
        "src": "read",
        "dest": "write",
        "write_to": "write",
        "output_path": "write",
        "path": "write",
    }
    assert {a.key: a.intent for a in path_arguments(params)}["path"] == "read"


def test_padded_paths_are_also_checked_without_their_padding() -> None:
    found = path_arguments({"content": " /etc/passwd\n"})
    assert [a.value for a in found] == [" /etc/passwd\n", "/etc/passwd"]
    both = path_arguments({"path": " a.txt"})
    assert [a.value for a in both] == [" a.txt", "a.txt"]


def test_bytes_and_pathlike_values_are_paths() -> None:
    found = path_arguments({"a": b"/etc/passwd", "b": pathlib.PurePosixPath("/etc/shadow")})
    assert [a.value for a in found] == ["/etc/passwd", "/etc/shadow"]


def test_parameters_nested_too_deep_are_rejected() -> None:
    deep: object = "/etc/passwd"
    for _ in range(40):
        deep = [deep]
    with pytest.raises(PathRejected, match="nest deeper"):
        path_arguments({"x": deep})


def test_canonical_parameters_rewrites_path_named_values_at_any_depth(tree: Path) -> None:
    params = {
        "path": "data/sub/../a.txt",
        "jobs": [{"dest": "parent_link/secret.txt"}, ("~/.ssh/id_rsa", 3)],
        "note": "./data/a.txt",
        "count": 2,
    }
    out = canonical_parameters(params, str(tree), extra_path_params=["jobs"])
    assert out["path"] == str((tree / "data" / "a.txt").resolve())
    assert out["jobs"][0]["dest"] == str((tree.parent / "outside" / "secret.txt").resolve())
    assert out["jobs"][1] == (str((tree.parent / "home" / ".ssh" / "id_rsa").resolve()), 3)
    assert out["note"] == "./data/a.txt"  # free text is checked, not rewritten
    assert out["count"] == 2
    assert params["path"] == "data/sub/../a.txt"  # the input is not modified


def test_canonical_parameters_rejects_what_canonical_rejects(tree: Path) -> None:
    with pytest.raises(PathRejected, match="NUL"):
        canonical_parameters({"opts": {"file": "a\x00b"}}, str(tree))


# --------------------------------------------------------------------------- checking


def test_paths_inside_the_allowed_globs_are_allowed(tree: Path) -> None:
    args = path_arguments({"path": "./data/a.txt", "more": [str(tree / "data" / "sub" / "b.txt")]})
    assert check_paths(args, ["./data/**"], None, str(tree)) is None
    assert check_paths(_read("data/naïve.txt"), ["./data/**"], None, str(tree)) is None


def test_dot_dot_traversal_out_of_the_glob_is_denied_naming_both_forms(tree: Path) -> None:
    reason = _deny_reason(tree, "./data/../../etc/passwd")
    outside = (tree.parent / "etc" / "passwd").resolve()
    assert reason == f"path {outside} (from ./data/../../etc/passwd) is outside the allowed paths"
    deep = "./data/" + "../" * 40 + "etc/passwd"
    assert (
        _deny_reason(tree, deep) == f"path /etc/passwd (from {deep}) is outside the allowed paths"
    )
    assert "outside" in _deny_reason(tree, "../outside/secret.txt")


def test_a_symlink_inside_the_allowed_directory_pointing_out_is_denied(tree: Path) -> None:
    reason = _deny_reason(tree, "./data/etc/hosts")
    assert reason == (
        f"path ./data/etc/hosts resolves through a symlink to {os.path.realpath('/etc/hosts')}, "
        "outside the allowed paths"
    )


def test_a_symlinked_parent_directory_is_judged_by_its_target(tree: Path) -> None:
    reason = _deny_reason(tree, "parent_link/secret.txt")
    assert reason.startswith("path parent_link/secret.txt resolves through a symlink to ")
    assert reason.endswith("outside/secret.txt, outside the allowed paths")
    # A glob whose root is the link does not follow it out of the working directory ...
    args = _read("parent_link/secret.txt")
    assert check_paths(args, ["./parent_link/**"], None, str(tree)) is not None
    # ... unless the policy lists it under follow_symlinks.
    follow = ["./parent_link/**"]
    assert check_paths(args, follow, None, str(tree), follow) is None


def test_dot_dot_after_a_symlink_climbs_from_the_link_target(tree: Path) -> None:
    # Lexically "data/inner_link/../secret.txt" is data/secret.txt; really it is outside.
    value = "data/inner_link/../secret.txt"
    assert canonical(value, str(tree)) == str((tree.parent / "outside" / "secret.txt").resolve())
    assert "resolves through a symlink" in _deny_reason(tree, value)


def test_home_and_file_url_paths_outside_the_globs_are_denied(tree: Path) -> None:
    assert "id_rsa" in _deny_reason(tree, "~/.ssh/id_rsa")
    assert _deny_reason(tree, "file:///etc/passwd").startswith("path /etc/passwd (from file:")
    assert "remote host" in _deny_reason(tree, "file://evil.com/etc/passwd")


def test_nested_arguments_holding_paths_are_checked(tree: Path) -> None:
    args = path_arguments({"opts": {"files": ["./data/a.txt", "/etc/shadow"]}})
    verdict = check_paths(args, ["./data/**"], None, str(tree))
    assert verdict is not None
    assert (verdict.key, verdict.value) == ("opts.files[1]", "/etc/shadow")


def test_backslash_paths_are_denied_as_ambiguous(tree: Path) -> None:
    assert "backslash" in _deny_reason(tree, "..\\..\\etc\\passwd")
    assert "NUL" in _deny_reason(tree, "data/a.txt\x00.png")


def test_unicode_lookalike_directories_do_not_match(tree: Path) -> None:
    (tree / "dаta").mkdir()  # Cyrillic а
    assert "outside" in _deny_reason(tree, "dаta/a.txt")


def test_unspecified_globs_check_nothing_and_empty_globs_allow_nothing(tree: Path) -> None:
    args = [PathArg("p", "/etc/passwd", "read"), PathArg("q", "/etc/x", "write")]
    assert check_paths(args, None, None, str(tree)) is None
    verdict = check_paths(args, [], None, str(tree))
    assert verdict is not None and verdict.key == "p"
    write_denied = check_paths(args, None, [], str(tree))
    assert write_denied is not None and write_denied.key == "q"


def test_writes_need_a_write_glob_and_reads_accept_write_globs(tree: Path) -> None:
    write = [PathArg("dest", "data/new.txt", "write")]
    verdict = check_paths(write, ["./data/**"], [], str(tree))
    assert verdict is not None and verdict.reason.endswith("for writing")
    assert check_paths(write, [], ["./data/**"], str(tree)) is None
    assert check_paths(_read("data/a.txt"), [], ["./data/**"], str(tree)) is None


def test_a_malformed_glob_denies_instead_of_raising(tree: Path) -> None:
    verdict = check_paths(_read("data/a.txt"), ["./data/[z-a]"], None, str(tree))
    assert verdict is not None and "malformed" in verdict.reason


# --------------------------------------------------------------------------- properties


@pytest.fixture(scope="module")
def maze(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree whose symlinks lead up, sideways, out, to /etc and to themselves."""
    base = tmp_path_factory.mktemp("maze")
    data = base / "work" / "data"
    (data / "d1" / "d2").mkdir(parents=True)
    (data / "f.txt").write_text("f")
    (base / "outside").mkdir()
    (data / "up").symlink_to("..")
    (data / "d1" / "sideways").symlink_to("../d1/d2")
    (data / "out").symlink_to(base / "outside")
    (data / "etc").symlink_to("/etc")
    (data / "loop").symlink_to("loop")
    return base / "work"


_SEGMENTS = st.sampled_from(
    ["data", "d1", "d2", "f.txt", "up", "sideways", "out", "etc", "loop", "..", ".", "x"]
)


@settings(max_examples=300, deadline=None)
@given(segments=st.lists(_SEGMENTS, min_size=1, max_size=8), absolute=st.booleans())
def test_allowed_paths_always_lie_under_an_allowed_root_after_realpath(
    maze: Path, segments: list[str], absolute: bool
) -> None:
    value = "/".join(segments)
    if absolute:
        value = f"{maze}/{value}"
    root = os.path.realpath(maze / "data")
    verdict = check_paths(_read(value), ["./data/**"], None, str(maze))
    real = os.path.realpath(os.path.join(maze, value))
    inside = os.path.commonpath([real, root]) == root
    assert (verdict is None) == inside


@settings(max_examples=400, deadline=None)
@given(segments=st.lists(_SEGMENTS, min_size=1, max_size=8), absolute=st.booleans(),
       trailing=st.booleans())
def test_canonical_resolves_exactly_as_realpath_through_every_kind_of_symlink(
    maze: Path, segments: list[str], absolute: bool, trailing: bool
) -> None:
    # An existing path is resolved by the kernel (O_PATH + its descriptor's name), any other by
    # realpath's walk: the two must never disagree, or a path would be judged somewhere else.
    value = "/".join(segments) + ("/" if trailing else "")
    if absolute:
        value = f"{maze}/{value}"
    assert canonical(value, str(maze)) == os.path.realpath(os.path.join(maze, value))


def test_a_forked_child_resolves_paths_in_its_own_descriptor_table(tmp_path: Path) -> None:
    # The descriptor of /proc/self/fd a process holds lists that process's table; a child that
    # kept its parent's would read the name of whatever the parent holds at the same number.
    mine, other = tmp_path / "mine.txt", tmp_path / "other.txt"
    mine.write_text("x")
    other.write_text("y")
    expected = os.path.realpath(mine)
    assert canonical(str(mine), str(tmp_path)) == expected  # the parent's is open now
    go_read, go_write = os.pipe()
    done_read, done_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: resolve once the parent holds `other` at the lowest free number
        try:
            os.read(go_read, 1)
            os.write(done_write, canonical(str(mine), str(tmp_path)).encode())
        finally:
            os._exit(0)
    held = os.open(other, os.O_RDONLY)  # the number the child's own open of `mine` gets
    ready: list[int] = []
    try:
        os.write(go_write, b"1")
        ready, _, _ = select.select([done_read], [], [], 60)  # a child that fails cannot hang us
        answer = os.read(done_read, 4096).decode() if ready else "(no answer from the child)"
    finally:
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        for fd in (held, go_read, go_write, done_read, done_write):
            os.close(fd)
    assert answer == expected


def test_canonical_of_a_fifo_neither_blocks_nor_opens_it(tmp_path: Path) -> None:
    # O_PATH opens no file for I/O: a FIFO with no writer resolves at once, as with lstat.
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "to-pipe").symlink_to("pipe")
    assert canonical("to-pipe", str(tmp_path)) == os.path.realpath(tmp_path / "pipe")


def test_canonical_of_a_path_in_a_deleted_directory_is_realpaths(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    os.rmdir(gone)
    assert canonical("gone/x", str(tmp_path)) == os.path.realpath(gone / "x")


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.lists(st.text("ab*?.", min_size=1, max_size=4), min_size=1, max_size=3),
    path=st.lists(st.text("ab.", min_size=1, max_size=4), min_size=1, max_size=3),
)
def test_single_star_globs_agree_with_segmentwise_fnmatch(
    pattern: list[str], path: list[str]
) -> None:
    # Whole "**" segments cross directories by design; "a**" stays within its segment.
    assume(not any(seg in (".", "..", "**") for seg in pattern + path))
    glob = compile_glob("/r/" + "/".join(pattern), "/")
    expected = len(pattern) == len(path) and all(
        fnmatch.fnmatchcase(p, g) for p, g in zip(path, pattern, strict=True)
    )
    assert glob.matches("/r/" + "/".join(path)) == expected


# --------------------------------------------------------------------------- symlinked roots


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working directory with a root leading out (data -> /etc) and one staying in."""
    work = tmp_path / "proj"
    (work / "releases" / "v2").mkdir(parents=True)
    (work / "releases" / "v2" / "app.txt").write_text("v2")
    (work / "current").symlink_to("releases/v2")
    (work / "data").symlink_to("/etc")
    (tmp_path / "elsewhere").mkdir()
    (work / "build").symlink_to(tmp_path / "elsewhere")
    return work


@pytest.mark.parametrize("pattern", ["./data/**", "data/*.conf", "./data", "./data/new/**",
                                     "./build/**", "./releases/../data/**"])
def test_a_relative_root_symlinked_out_of_the_working_directory_escapes(
    project: Path, pattern: str
) -> None:
    why = root_escape(pattern, str(project))
    assert why is not None and "leads through a symlink" in why and repr(pattern) in why


def test_an_absolute_root_whose_written_place_is_a_symlink_escapes(project: Path) -> None:
    why = root_escape(str(project / "data" / "**"), "/")
    assert why is not None and os.path.realpath("/etc") in why


@pytest.mark.parametrize("pattern", ["./current/**", "./releases/**", "./missing/**", "**",
                                     "./*.txt", "../proj/releases/**", "~/x/**"])
def test_roots_that_stay_where_they_were_written_do_not_escape(
    project: Path, pattern: str
) -> None:
    assert root_escape(pattern, str(project)) is None


def test_follow_symlinks_allows_a_root_to_lead_out_by_its_written_spelling(project: Path) -> None:
    assert root_escape("./data/**", str(project), follow=["./data/**"]) is None
    assert root_escape("./data/**", str(project), follow=["data/**"]) is not None


def test_a_root_created_as_a_symlink_after_compilation_grants_nothing_through_it(
    tmp_path: Path,
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    glob = compile_glob("./late/**", str(work))  # the root does not exist yet
    (work / "late").symlink_to("/etc")
    assert not glob.matches(canonical("./late/hostname", str(work)))
    verdict = check_paths([PathArg("path", "./late/hostname", "write")], ["./late/**"],
                          ["./late/**"], str(work))
    assert verdict is not None and "resolves through a symlink" in verdict.reason


def test_a_root_already_symlinked_out_when_compiled_stays_at_its_written_place(
    project: Path,
) -> None:
    for intent in ("read", "write"):
        verdict = check_paths([PathArg("path", "./data/hostname", intent)], ["./data/**"],
                              ["./data/**"], str(project))
        assert verdict is not None, intent


def test_an_in_project_symlinked_root_allows_what_it_leads_to(project: Path) -> None:
    args = [PathArg("path", "./current/app.txt", "read")]
    assert check_paths(args, ["./current/**"], None, str(project)) is None
