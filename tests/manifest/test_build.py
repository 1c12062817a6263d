"""Building, hashing and rendering the manifest: explicit modes, same bytes, no secrets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from callgate import Capability, CapabilityConstraints, Policy, Principal, ToolPolicy
from callgate.manifest import (
    ManifestError,
    build_manifest,
    load_manifest,
    manifest_hash,
    manifest_of,
    parse_manifest,
    redact,
    render,
)
from callgate.policy._loader import parse_policy
from callgate.policy._manifest import is_manifest_file
from tests.manifest.conftest import TOOLS_MODULE


def entry(**spec: Any) -> dict[str, Any]:
    manifest = build_manifest(None, {"t": ToolPolicy.model_validate(spec)})
    tool: dict[str, Any] = manifest["tools"]["t"]
    return tool


def test_every_stance_is_written_out_with_an_explicit_mode() -> None:
    tool = entry()
    assert tool["filesystem"] == {"read": {"mode": "unspecified"},
                                  "write": {"mode": "unspecified"}}
    assert tool["network"] == {"mode": "unspecified"}
    assert tool["environment"] == {"mode": "unspecified"}
    assert tool["exec"] == "unspecified"
    assert tool["risk"] == "medium"


def test_declared_stances_appear_as_declared() -> None:
    tool = entry(filesystem={"read": [], "write": ["./out/**", "./b/**", "./out/**"]},
                 network={"hosts": ["b.org", "a.org"], "proxy": "http://127.0.0.1:3128"},
                 environment={"allow": ["PATH", "HOME"]}, exec="deny",
                 constraints={"max_invocations": 2, "only_after": ["fetch"]},
                 limits={"cpu_seconds": 5})
    assert tool["filesystem"] == {"read": {"mode": "none"},
                                  "write": {"mode": "globs", "globs": ["./b/**", "./out/**"]}}
    assert tool["network"] == {"mode": "hosts", "hosts": ["a.org", "b.org"],
                               "proxy": "http://127.0.0.1:3128"}
    assert tool["environment"] == {"mode": "variables", "variables": ["HOME", "PATH"]}
    assert tool["exec"] == "deny"
    assert tool["constraints"] == {"max_invocations": 2, "only_after": ["fetch"],
                                   "forbidden": False}
    assert tool["limits"]["cpu_seconds"] == 5
    assert entry(network="deny", environment="deny")["network"] == {"mode": "deny"}
    assert entry(environment="deny")["environment"] == {"mode": "deny"}


def test_example_policy_manifest_holds_principal_rules_in_evaluation_order_and_tools(
        example_manifest: dict[str, Any]) -> None:
    assert example_manifest["policy"] == {"name": "research-agent", "version": "1"}
    caps = example_manifest["principal"]["capabilities"]
    assert [c["tool_class"] for c in caps] == ["http", "file", "shell"]
    assert caps[0]["constraints"]["allowed_hosts"] == ["*.example.org", "api.github.com"]
    assert [r["id"] for r in example_manifest["rules"]] == [
        "deny-tainted-shell", "approve-writes", "allow-reads"]
    assert list(example_manifest["tools"]) == ["write_report"]


def test_same_input_renders_the_same_bytes_whatever_the_declaration_order() -> None:
    a = ToolPolicy(filesystem={"write": ["/b/**", "/a/**"]}, environment={"allow": ["Y", "X"]})
    b = ToolPolicy(filesystem={"write": ["/a/**", "/b/**"]}, environment={"allow": ["X", "Y"]})
    first = render(build_manifest(None, {"one": a, "two": ToolPolicy()}), "json")
    second = render(build_manifest(None, {"two": ToolPolicy(), "one": b}), "json")
    assert first == second
    assert render(build_manifest(None, {"one": a}), "yaml") == render(
        build_manifest(None, {"one": b}), "yaml")


def test_json_keys_are_sorted_and_the_hash_covers_the_content(
        example_manifest: dict[str, Any]) -> None:
    text = render(example_manifest, "json")
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert data["sha256"] == manifest_hash(example_manifest)
    assert text.endswith("\n")


def test_hash_changes_with_any_content_change() -> None:
    base = build_manifest(None, {"t": ToolPolicy()})
    wider = build_manifest(None, {"t": ToolPolicy(exec="allow")})
    assert manifest_hash(base) != manifest_hash(wider)
    assert manifest_hash(base) == manifest_hash({**base, "sha256": "ignored"})


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_rendered_manifest_reads_back_equal(fmt: str, example_manifest: dict[str, Any]) -> None:
    back = parse_manifest(render(example_manifest, fmt))  # type: ignore[arg-type]
    assert {k: v for k, v in back.items() if k != "sha256"} == example_manifest


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_tampered_baseline_is_an_error(fmt: str, tmp_path: Path,
                                       example_manifest: dict[str, Any]) -> None:
    path = tmp_path / f"manifest.{fmt}"
    text = render(example_manifest, fmt)  # type: ignore[arg-type]
    path.write_text(text.replace("/srv/uploads/**", "/**"))
    with pytest.raises(ManifestError, match="hash mismatch"):
        load_manifest(path)


def test_baseline_without_hash_or_marker_is_an_error(tmp_path: Path,
                                                     example_manifest: dict[str, Any]) -> None:
    no_hash = tmp_path / "a.json"
    no_hash.write_text(json.dumps(example_manifest))
    with pytest.raises(ManifestError, match="no 'sha256'"):
        load_manifest(no_hash)
    with pytest.raises(ManifestError, match="not a callgate manifest"):
        parse_manifest('{"tools": {}}')
    with pytest.raises(ManifestError, match="not a readable manifest"):
        parse_manifest("{not json")
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path / "missing.json")


def test_manifest_files_are_told_apart_from_policy_files(tmp_path: Path,
                                                         example_path: Path,
                                                         example_manifest: dict[str, Any]
                                                         ) -> None:
    yaml_manifest = tmp_path / "m.yaml"
    yaml_manifest.write_text(render(example_manifest, "yaml"))
    assert is_manifest_file(yaml_manifest)
    assert is_manifest_file(tmp_path / "m.json")
    assert not is_manifest_file(example_path)
    assert not is_manifest_file("pkg.tools")


def test_unknown_format_is_refused(example_manifest: dict[str, Any]) -> None:
    with pytest.raises(ManifestError, match="unknown manifest format"):
        render(example_manifest, "toml")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- secrets

DSN = "postgresql://app:hunter2@db.internal:5432/prod"


def test_dsn_password_anywhere_in_a_policy_is_redacted() -> None:
    policy = parse_policy(f"""
name: p
version: 1
principal:
  name: agent
  capabilities:
    - tool_class: database
      constraints: {{allowed_databases: ["{DSN}", "host=db password=s3cret dbname=x"]}}
rules:
  - id: r
    decision: deny
    reason: never connect to {DSN}
    match: {{parameters: {{dsn: {{in: ["{DSN}"]}}}}}}
tools:
  q:
    network: {{hosts: [db.internal], proxy: "http://proxy:pw0rd@127.0.0.1:3128"}}
""").policy
    text = render(build_manifest(policy, {}), "json") + render(build_manifest(policy, {}), "yaml")
    for secret in ("hunter2", "s3cret", "pw0rd"):
        assert secret not in text
    assert "postgresql://app:***@db.internal:5432/prod" in text
    assert "password=***" in text


def test_environment_values_never_appear() -> None:
    tool = entry(environment={"allow": ["HOME", "API_TOKEN=sk-live-123"]})
    assert tool["environment"]["variables"] == ["API_TOKEN=***", "HOME"]
    assert "sk-live-123" not in render(build_manifest(None, {"t": ToolPolicy(
        environment={"allow": ["API_TOKEN=sk-live-123"]})}), "yaml")


@given(password=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.~!$",
                        min_size=4, max_size=20))
def test_redact_blanks_any_url_password(password: str) -> None:
    out = redact(f"see https://user:{password}@example.org/x and more")
    assert out == "see https://user:***@example.org/x and more"


def test_redact_leaves_plain_text_alone() -> None:
    for text in ("./out/**", "https://example.org/a", "api.github.com", "user@example.org",
                 "the token: is not a key/value pair"):
        assert redact(text) == text


# --------------------------------------------------------------------------- sources


def test_module_tools_are_found_with_their_declared_class() -> None:
    manifest = manifest_of(str(TOOLS_MODULE))
    tools = manifest["tools"]
    assert sorted(tools) == ["git_status", "read_notes", "write_report"]
    assert tools["git_status"]["tool_class"] == "shell"
    assert tools["git_status"]["exec"] == "allow"
    assert manifest["policy"] is None


def test_policy_file_combined_with_module(tmp_path: Path, example_path: Path) -> None:
    policy = tmp_path / "agent.yaml"
    policy.write_text("name: agent\nversion: 2\nprincipal: {name: bot}\n"
                      "tools: {fetch: {network: allow}}\n")
    manifest = manifest_of(str(TOOLS_MODULE), str(policy))
    assert sorted(manifest["tools"]) == ["fetch", "git_status", "read_notes", "write_report"]
    assert manifest["principal"]["name"] == "bot"
    # The example policy declares write_report differently from the module: refused.
    with pytest.raises(ManifestError, match="declared differently"):
        manifest_of(str(TOOLS_MODULE), str(example_path))


def test_tool_declared_differently_in_file_and_code_is_an_error() -> None:
    policy = Policy(name="p", version=1, tools={"t": ToolPolicy(exec="deny")},
                    principal=Principal(name="a", capabilities=(Capability(
                        tool_class="file", constraints=CapabilityConstraints()),)))
    with pytest.raises(ManifestError, match="declared differently"):
        build_manifest(policy, {"t": ToolPolicy(exec="allow")})
    assert build_manifest(policy, {"t": ToolPolicy(exec="deny")})["tools"]["t"]["exec"] == "deny"


def test_module_that_fails_to_import_is_a_manifest_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken_tools.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ManifestError, match="RuntimeError: boom"):
        manifest_of(str(broken))
    with pytest.raises(ManifestError, match="cannot import"):
        manifest_of("no_such_module_for_callgate_tests")


def test_yaml_aliases_in_a_manifest_are_refused() -> None:
    bomb = "callgate_manifest: 1\na: &a [x, x]\nb: [*a, *a]\ntools: {}\nsha256: x\n"
    with pytest.raises(ManifestError, match="aliases"):
        parse_manifest(bomb)


def test_an_edited_module_is_judged_as_it_is_now(tmp_path: Path) -> None:
    module = tmp_path / "edited_tools.py"
    source = ("from callgate import ToolPolicy, declare\n\n"
              "@declare(ToolPolicy(exec='{}'))\ndef run() -> None:\n    pass\n")
    module.write_text(source.format("deny"))
    assert manifest_of(str(module))["tools"]["run"]["exec"] == "deny"
    module.write_text(source.format("allow"))
    assert manifest_of(str(module))["tools"]["run"]["exec"] == "allow"


def test_names_that_collide_after_redaction_are_refused_not_merged() -> None:
    tools = {"fetch?token=a": ToolPolicy(), "fetch?token=b": ToolPolicy(exec="allow")}
    with pytest.raises(ManifestError, match="same once secrets are redacted"):
        build_manifest(None, tools)
