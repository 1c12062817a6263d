"""Policy to sandbox spec: exact roots (no widening), credential masks, environment, refusals."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate import SandboxError
from callgate.sandbox._spec import (
    build_spec,
    expand_glob,
    is_within,
    literal_root,
    off_path,
    sensitive_paths,
)

from .conftest import policy, readable_copy_of_the_package

#: The package source; copied where a process of another uid can read it (the checkout itself
#: may sit in a directory only root can enter, such as one made by ``mktemp -d``).


def spec_for(tmp_path: Path, environ: dict[str, str] | None = None, **fields: object):
    return build_spec(policy(**fields), working_dir=str(tmp_path), environ=environ or {})


def test_trailing_double_star_names_exactly_the_directory(tmp_path: Path):
    assert literal_root("./build/**", str(tmp_path)) == str(tmp_path / "build")
    assert literal_root("/usr/**", "/anywhere") == "/usr"
    assert literal_root("/**", "/anywhere") == "/"


def test_write_glob_binds_its_directory_and_creates_it_inside_the_working_dir(tmp_path: Path):
    spec = spec_for(tmp_path, filesystem={"write": ["./build/**"]})
    assert spec.write_roots == (str(tmp_path / "build"),)
    assert (tmp_path / "build").is_dir()


def test_missing_file_write_root_is_left_out_rather_than_made_a_directory(tmp_path: Path):
    spec = spec_for(tmp_path, filesystem={"write": ["./report.txt"]})
    assert spec.write_roots == ()
    assert not (tmp_path / "report.txt").exists()
    (tmp_path / "report.txt").write_text("")
    assert spec_for(tmp_path, filesystem={"write": ["./report.txt"]}).write_roots == (
        str(tmp_path / "report.txt"),
    )


def test_missing_write_root_outside_the_working_dir_is_left_out(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    spec = spec_for(work, filesystem={"write": [f"{tmp_path}/elsewhere/**"]})
    assert spec.write_roots == ()
    assert not (tmp_path / "elsewhere").exists()


def test_middle_wildcard_expands_to_existing_matches_not_to_the_parent(tmp_path: Path):
    for name in ("a", "b"):
        (tmp_path / "srv" / name / "out").mkdir(parents=True)
    (tmp_path / "srv" / "c").mkdir()
    spec = spec_for(tmp_path, filesystem={"write": [f"{tmp_path}/srv/*/out/**"]})
    assert spec.write_roots == (
        str(tmp_path / "srv" / "a" / "out"),
        str(tmp_path / "srv" / "b" / "out"),
    )


def test_file_wildcard_expands_to_the_matching_files(tmp_path: Path):
    (tmp_path / "src").mkdir()
    for name in ("a.py", "b.py", "c.txt"):
        (tmp_path / "src" / name).write_text("")
    assert expand_glob("./src/*.py", str(tmp_path)) == [
        str(tmp_path / "src" / "a.py"),
        str(tmp_path / "src" / "b.py"),
    ]


def test_roots_are_resolved_so_a_symlink_cannot_redirect_them(tmp_path: Path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    spec = spec_for(tmp_path, filesystem={"read": ["./link/**"]})
    assert spec.read_roots == (str(tmp_path / "real"),)


def test_read_roots_inside_write_roots_are_not_bound_twice(tmp_path: Path):
    (tmp_path / "build" / "cache").mkdir(parents=True)
    spec = spec_for(tmp_path, filesystem={"read": ["./build/cache/**"], "write": ["./build/**"]})
    assert spec.read_roots == ()
    assert spec.write_roots == (str(tmp_path / "build"),)


_NAMES = st.sampled_from(["a", "b", "c", "out"])


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tree=st.lists(st.lists(_NAMES, min_size=1, max_size=3), max_size=6),
    patterns=st.lists(
        st.lists(st.one_of(_NAMES, st.just("*")), min_size=1, max_size=3), min_size=1, max_size=3
    ),
)
def test_write_roots_are_never_wider_than_their_glob(tmp_path: Path, tree, patterns):
    base = tmp_path / f"case-{len(list(tmp_path.iterdir()))}"
    for parts in tree:
        (base.joinpath(*parts)).mkdir(parents=True, exist_ok=True)
    base.mkdir(exist_ok=True)
    globs = ["./" + "/".join(parts) + "/**" for parts in patterns]
    spec = spec_for(base, filesystem={"write": globs})
    literals = [literal_root(g, str(base)) for g in globs]
    for root in spec.write_roots:
        assert is_within(root, str(base))
        assert any(
            root.count("/") == lit.count("/") and fnmatch.fnmatch(root, lit) for lit in literals
        ), (root, literals)


def test_ssh_under_a_visible_home_is_masked(tmp_path: Path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".aws").mkdir()
    masked = sensitive_paths((str(home),), (str(home),))
    assert masked == (str(home / ".aws"), str(home / ".ssh"))


def test_credentials_outside_the_visible_roots_need_no_mask(tmp_path: Path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (tmp_path / "src").mkdir()
    src = str(tmp_path / "src")
    masked = sensitive_paths((src,), (src,))
    assert masked == ()


def test_dotenv_files_below_a_declared_root_are_masked(tmp_path: Path):
    (tmp_path / "app" / "config").mkdir(parents=True)
    (tmp_path / "app" / ".env").write_text("A=1")
    (tmp_path / "app" / "config" / ".env.production").write_text("B=2")
    (tmp_path / "app" / "environment.txt").write_text("not secret")
    spec = spec_for(tmp_path, filesystem={"read": ["./app/**"]})
    assert spec.masked == (
        str(tmp_path / "app" / ".env"),
        str(tmp_path / "app" / "config" / ".env.production"),
    )


def test_a_credential_declared_by_name_is_not_masked_but_its_siblings_are(tmp_path: Path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text("")
    (home / ".ssh" / "id_rsa").write_text("")
    spec = spec_for(
        tmp_path,
        {"HOME": str(home)},
        filesystem={"read": [f"{home}/**", f"{home}/.ssh/known_hosts"]},
    )
    assert spec.masked == (str(home / ".ssh" / "id_rsa"),)


def test_off_path_hides_everything_except_the_way_to_the_kept_paths(tmp_path: Path):
    for parts in (("a", "keep"), ("a", "drop"), ("b",), ("a", "keep", "inner")):
        tmp_path.joinpath(*parts).mkdir(parents=True, exist_ok=True)
    (tmp_path / "file").write_text("")
    hidden = off_path(str(tmp_path), [str(tmp_path / "a" / "keep")])
    assert hidden == [str(tmp_path / "a" / "drop"), str(tmp_path / "b"), str(tmp_path / "file")]


def test_environment_holds_only_declared_variables(tmp_path: Path):
    environ = {"PATH": "/usr/bin", "HOME": "/h", "TOKEN": "t"}
    spec = spec_for(tmp_path, environ, environment={"allow": ["PATH", "MISSING"]})
    assert dict(spec.env) == {"PATH": "/usr/bin"}
    assert spec.withheld_env == frozenset({"HOME", "TOKEN"})
    assert dict(spec_for(tmp_path, environ, environment="deny").env) == {}
    assert dict(spec_for(tmp_path, environ).env) == {}


def test_network_is_unshared_unless_allowed(tmp_path: Path):
    assert spec_for(tmp_path).network is False
    assert spec_for(tmp_path, network="deny").network is False
    assert spec_for(tmp_path, network="allow").network is True


def test_host_allow_list_is_refused_because_the_sandbox_cannot_force_the_proxy(tmp_path: Path):
    hosts = {"hosts": ["pypi.org"], "proxy": "http://127.0.0.1:3128"}
    with pytest.raises(SandboxError, match="egress proxy"):
        spec_for(tmp_path, network=hosts)


def test_exec_deny_is_refused_for_a_subprocess_tool(tmp_path: Path):
    with pytest.raises(SandboxError, match="exec"):
        spec_for(tmp_path, exec="deny")


def test_working_dir_of_the_policy_resolves_against_the_given_one(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    assert spec_for(tmp_path, working_dir="sub").working_dir == str(tmp_path / "sub")
    assert os.path.isabs(spec_for(tmp_path).working_dir)


_SECRET_NAMES = st.sampled_from([".env", ".env.local", ".ssh", "id_ed25519", "credentials.json",
                                 ".netrc", "secrets.yaml", ".aws"])


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(depth=st.integers(min_value=0, max_value=12), name=_SECRET_NAMES,
       branch=st.integers(min_value=0, max_value=3))
def test_a_credential_at_any_depth_below_a_declared_root_is_masked(
    tmp_path: Path, depth: int, name: str, branch: int
):
    base = tmp_path / f"case-{len(list(tmp_path.iterdir()))}"
    parent = base.joinpath(*[f"d{branch}{level}" for level in range(depth)])
    parent.mkdir(parents=True)
    (parent / name).write_text("secret")
    spec = spec_for(base, filesystem={"read": ["./**"]})
    assert str(parent / name) in spec.masked


def test_a_scan_that_exceeds_its_limit_refuses_and_names_the_root(tmp_path: Path):
    (tmp_path / "app" / "many").mkdir(parents=True)
    for index in range(50):
        (tmp_path / "app" / "many" / f"f{index}").touch()
    (tmp_path / "app" / "late" ).mkdir()
    (tmp_path / "app" / "late" / ".env").write_text("A=1")
    with pytest.raises(SandboxError, match=f"{tmp_path / 'app'}.*more than 40"):
        build_spec(policy(filesystem={"read": ["./app/**"]}), working_dir=str(tmp_path),
                   environ={}, scan_limit=40)
    spec = build_spec(policy(filesystem={"read": ["./app/**"]}), working_dir=str(tmp_path),
                      environ={}, scan_limit=60)
    assert spec.masked == (str(tmp_path / "app" / "late" / ".env"),)


def test_a_directory_the_scan_cannot_list_is_masked_whole():
    # Root lists every directory, so the scan runs as uid 65534 for a directory it may enter
    # (mode 0111: names inside can be opened) but not list.
    if os.geteuid() != 0:
        pytest.skip("needs root to run the scan as another uid")
    with tempfile.TemporaryDirectory(prefix="callgate-scan-") as top:
        os.chmod(top, 0o755)
        locked = Path(top) / "app" / "locked"
        locked.mkdir(parents=True)
        (locked / ".env").write_text("A=1")
        os.chmod(locked.parent, 0o755)
        os.chmod(locked, 0o111)
        code = ("from callgate.sandbox._spec import sensitive_paths; "
                f"print(sensitive_paths(({str(locked.parent)!r},), ()))")
        done = subprocess.run(
            ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
             sys.executable, "-c", code],
            capture_output=True, text=True, timeout=30, check=False,
                env={"PYTHONPATH": readable_copy_of_the_package(Path(top))})
    assert done.stdout.strip() == repr((str(locked),)), done.stderr


def test_the_shared_definition_masks_gcloud_config_but_not_ordinary_names(tmp_path: Path):
    (tmp_path / "home" / ".config" / "gcloud").mkdir(parents=True)
    (tmp_path / "home" / ".config" / "other").mkdir()
    (tmp_path / "home" / "environment.txt").write_text("")
    (tmp_path / "home" / "secretary.py").write_text("")
    spec = spec_for(tmp_path, filesystem={"read": ["./home/**"]})
    assert spec.masked == (str(tmp_path / "home" / ".config" / "gcloud"),)


def test_a_declared_root_named_like_a_secret_does_not_mask_its_whole_content(tmp_path: Path):
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "readme.txt").write_text("")
    spec = spec_for(tmp_path, filesystem={"read": ["./secrets/**"]})
    assert spec.masked == ()


@pytest.mark.parametrize("field", ["read", "write"])
def test_a_root_that_leads_out_through_a_symlink_is_refused_before_it_is_created(
    tmp_path: Path, field: str
):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (work / "data").symlink_to(outside)
    with pytest.raises(SandboxError, match="symlink"):
        spec_for(work, filesystem={field: ["./data/new/**"]})
    assert not (outside / "new").exists()
    followed = spec_for(work, filesystem={field: ["./data/**"], "follow_symlinks": ["./data/**"]})
    assert str(outside) in (*followed.read_roots, *followed.write_roots)


def test_a_symlink_that_stays_inside_the_working_directory_is_fine(tmp_path: Path):
    (tmp_path / "releases" / "v2").mkdir(parents=True)
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "v2")
    spec = spec_for(tmp_path, filesystem={"read": ["./current/**"]})
    assert spec.read_roots == (str(tmp_path / "releases" / "v2"),)


def test_tilde_user_is_a_relative_name_as_in_the_path_gate(tmp_path: Path):
    assert literal_root("~nobody/x/**", str(tmp_path)) == str(tmp_path / "~nobody" / "x")


def test_a_declared_root_inside_the_runtime_directories_is_not_scanned(tmp_path: Path):
    # /usr is shown to every tool anyway; declaring it must not exhaust the scan.
    spec = build_spec(policy(filesystem={"read": ["/usr/**", "./**"]}), working_dir=str(tmp_path),
                      environ={}, scan_limit=10)
    assert "/usr" in spec.read_roots


def test_a_tool_working_dir_that_leads_out_through_a_symlink_is_refused_before_anything(
    tmp_path: Path
):
    # The tool's working_dir is what its relative roots are written against: with
    # ./sub -> outside, "./**" would bind outside and "./build/**" would be created there.
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (work / "sub").symlink_to(outside)
    fs = {"read": ["./**"], "write": ["./build/**"]}
    for spelled in ("sub", "./sub", "./sub/", str(work / "sub"), "./x/../sub"):
        with pytest.raises(SandboxError, match="symlink"):
            spec_for(work, working_dir=spelled, filesystem=fs)
    assert not (outside / "build").exists()
    (work / "current").symlink_to(work / "releases")
    (work / "releases").mkdir()
    inside = spec_for(work, working_dir="./current", filesystem=fs)
    assert inside.working_dir == str(work / "releases")
