"""The permission manifest: a deterministic, reviewable document of what every tool may touch.

``build_manifest`` turns a policy and a set of tool policies into plain JSON values with one
explicit ``mode`` per stance (``unspecified`` is written out, never implied by a missing key),
``manifest_hash`` is the SHA-256 of its canonical JSON (keys sorted, no whitespace, UTF-8), and
``render`` writes it as JSON or YAML with the hash under ``sha256``. The same input gives the
same bytes on every run and machine: lists that are sets (globs, hosts, variables) are sorted and
deduplicated, lists whose order matters (rules) keep it.

Secrets never appear: the manifest holds declarations only, and every string in it passes
``redact``, which blanks URL passwords (``postgresql://user:***@host/db``), ``password=...``
style key/value secrets and the value of any ``NAME=value`` environment entry.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from callgate._errors import CallgateError
from callgate._jsonlimits import MAX_JSON_DEPTH, loads_bounded
from callgate.policy._schema import (
    Capability,
    EnvironmentPolicy,
    FilesystemPolicy,
    NetworkHosts,
    Policy,
    Rule,
    ToolPolicy,
)

if TYPE_CHECKING:
    import yaml

#: The document format version, also the key that marks a file as a manifest.
FORMAT_KEY = "callgate_manifest"
FORMAT_VERSION = 1
HASH_KEY = "sha256"
#: Manifests larger than this are refused before parsing.
MAX_MANIFEST_BYTES = 8 * 1024 * 1024
REDACTED = "***"

Format = Literal["json", "yaml"]

_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*):([^@\s/]*)@")
_KEY_VALUE_SECRET = re.compile(
    r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key)(\s*=\s*)"
    r"('[^']*'|\"[^\"]*\"|[^\s&;,]+)"
)


class ManifestError(CallgateError):
    """A manifest cannot be built, read, or trusted (its stored hash does not match)."""


def redact(text: str) -> str:
    """``text`` with URL passwords and ``password=...`` style secrets replaced by ``***``."""
    text = _URL_PASSWORD.sub(rf"\1:{REDACTED}@", text)
    return _KEY_VALUE_SECRET.sub(rf"\1\2{REDACTED}", text)


def _redact_all(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        out = {redact(str(k)): _redact_all(v) for k, v in value.items()}
        if len(out) != len(value):
            # Two names that differ only in a secret would merge and hide one entry.
            raise ManifestError("two names become the same once secrets are redacted: "
                                f"{sorted(set(out) - set(value))}")
        return out
    if isinstance(value, list | tuple):
        return [_redact_all(v) for v in value]
    return value


def _set(values: tuple[str, ...]) -> list[str]:
    return sorted(set(values))


def _globs(values: tuple[str, ...] | None) -> dict[str, Any]:
    if values is None:
        return {"mode": "unspecified"}
    if not values:
        return {"mode": "none"}
    return {"mode": "globs", "globs": _set(values)}


def _filesystem(fs: FilesystemPolicy | None) -> dict[str, Any]:
    fs = fs or FilesystemPolicy()
    entry: dict[str, Any] = {"read": _globs(fs.read), "write": _globs(fs.write)}
    if fs.follow_symlinks:  # written only when used, so older manifests compare unchanged
        entry["follow_symlinks"] = _set(fs.follow_symlinks)
    return entry


def _network(net: Literal["deny", "allow"] | NetworkHosts | None) -> dict[str, Any]:
    if net is None:
        return {"mode": "unspecified"}
    if isinstance(net, NetworkHosts):
        return {"mode": "hosts", "hosts": _set(net.hosts), "proxy": net.proxy}
    return {"mode": net}


def _variable(entry: str) -> str:
    # A variable list holds names; a "NAME=value" slip must not leak the value.
    name, sep, _ = entry.partition("=")
    return f"{name}={REDACTED}" if sep else name


def _environment(env: Literal["deny"] | EnvironmentPolicy | None) -> dict[str, Any]:
    if env is None:
        return {"mode": "unspecified"}
    if env == "deny":
        return {"mode": "deny"}
    assert isinstance(env, EnvironmentPolicy)
    return {"mode": "variables", "variables": sorted({_variable(v) for v in env.allow})}


def tool_entry(policy: ToolPolicy) -> dict[str, Any]:
    """One tool's manifest entry: every stance with an explicit mode."""
    return {
        "risk": policy.risk,
        "tool_class": policy.tool_class,
        "filesystem": _filesystem(policy.filesystem),
        "network": _network(policy.network),
        "environment": _environment(policy.environment),
        "exec": policy.exec or "unspecified",
        "constraints": {
            "max_invocations": policy.constraints.max_invocations,
            "only_after": _set(policy.constraints.only_after),
            "forbidden": policy.constraints.forbidden,
        },
        "limits": policy.limits.model_dump(mode="json"),
        "scratch": policy.scratch,
        "working_dir": policy.working_dir,
        "path_params": dict(sorted(policy.path_params.items())),
    }


def _capability(cap: Capability) -> dict[str, Any]:
    constraints = cap.constraints.model_dump(mode="json")
    for key, value in constraints.items():
        if isinstance(value, list):
            constraints[key] = sorted(set(value))
    return {"tool_class": cap.tool_class, "actions": _set(cap.actions),
            "constraints": constraints}


def _rule(rule: Rule) -> dict[str, Any]:
    match = rule.match.model_dump(mode="json", by_alias=True)
    for key in ("tool", "tool_class", "action", "taint_sources"):
        if match[key] is not None:
            match[key] = sorted(set(match[key]))
    return {"id": rule.id, "priority": rule.priority, "decision": rule.decision,
            "match": match, "reason": rule.reason}


def build_manifest(policy: Policy | None, tools: Mapping[str, ToolPolicy]) -> dict[str, Any]:
    """The manifest of ``policy`` (principal, rules, tools, run state, behavior) plus ``tools``.

    A tool named both in ``policy.tools`` and in ``tools`` must be declared identically;
    otherwise ``ManifestError`` (the runtime refuses such a redeclaration too). Rules appear in
    evaluation order (priority, then file order). The result carries no hash; see
    ``manifest_hash`` and ``render``.
    """
    merged: dict[str, ToolPolicy] = dict(policy.tools) if policy is not None else {}
    for name, declared in tools.items():
        if name in merged and merged[name] != declared:
            raise ManifestError(f"tool {name!r} is declared differently in the policy file "
                                "and in code")
        merged[name] = declared
    principal = policy.principal if policy is not None else None
    rules = policy.rules if policy is not None else ()
    ordered = sorted(enumerate(rules), key=lambda p: (p[1].priority, p[0]))
    document: dict[str, Any] = {
        FORMAT_KEY: FORMAT_VERSION,
        "policy": None if policy is None else {"name": policy.name,
                                               "version": str(policy.version)},
        "principal": None if principal is None else {
            "name": principal.name,
            "capabilities": [_capability(c) for c in principal.capabilities],
        },
        "rules": [_rule(r) for _, r in ordered],
        "tools": {name: tool_entry(merged[name]) for name in sorted(merged)},
        "run_state": None if policy is None else policy.run_state.model_dump(mode="json"),
        "behavior": [] if policy is None else [
            {"id": b.id, "rule": b.rule, "enforce": b.enforce}
            for b in sorted(policy.behavior, key=lambda b: b.id)],
    }
    redacted: dict[str, Any] = _redact_all(document)
    return redacted


def _canonical(manifest: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in manifest.items() if k != HASH_KEY}
    return json.dumps(body, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def manifest_hash(manifest: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the manifest's canonical JSON, ignoring any stored ``sha256`` key."""
    return hashlib.sha256(_canonical(manifest)).hexdigest()


@functools.cache
def _dumper() -> type[yaml.SafeDumper]:
    """The YAML dumper of manifests (made when first used: PyYAML costs 10 ms to import)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        """Plain YAML: no anchors or aliases, whatever repeats."""

        def ignore_aliases(self, data: Any) -> bool:
            return True

    return Dumper


def render(manifest: Mapping[str, Any], fmt: Format = "json") -> str:
    """The manifest with its ``sha256`` as JSON or YAML text, keys sorted, ending in a newline."""
    if fmt not in ("json", "yaml"):
        raise ManifestError(f"unknown manifest format {fmt!r} (use json or yaml)")
    body = {k: v for k, v in manifest.items() if k != HASH_KEY}
    body[HASH_KEY] = manifest_hash(body)
    if fmt == "json":
        return json.dumps(body, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    import yaml

    text: str = yaml.dump(body, Dumper=_dumper(), sort_keys=True, allow_unicode=True,
                          default_flow_style=False, width=1000)
    return text


def _safe_yaml(text: str, source: str) -> Any:
    # Rendered manifests never hold anchors; refusing aliases rules out expansion bombs, and a
    # bound on nesting keeps the (recursive) composer from running out of stack.
    import yaml

    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise ManifestError(f"{source}: YAML aliases are not allowed in a manifest")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_JSON_DEPTH:
                    raise ManifestError(f"{source}: nests deeper than {MAX_JSON_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source}: not a readable manifest: {exc}") from exc


def parse_manifest(text: str, source: str = "<manifest>") -> dict[str, Any]:
    """Read a rendered manifest (JSON or YAML) and check its stored hash against its content.

    Raises ``ManifestError`` when the text is not a manifest, when the hash is missing, or when
    it does not match (the file was edited after it was generated).
    """
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{source}: manifest larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        data = loads_bounded(text) if text.lstrip().startswith("{") else _safe_yaml(text, source)
    except ValueError as exc:
        raise ManifestError(f"{source}: not a readable manifest: {exc}") from exc
    if not isinstance(data, dict) or data.get(FORMAT_KEY) != FORMAT_VERSION:
        raise ManifestError(f"{source}: not a callgate manifest (no '{FORMAT_KEY}: "
                            f"{FORMAT_VERSION}' key)")
    stored = data.get(HASH_KEY)
    if not isinstance(stored, str):
        raise ManifestError(f"{source}: manifest has no '{HASH_KEY}' hash")
    actual = manifest_hash(data)
    if stored != actual:
        raise ManifestError(f"{source}: manifest hash mismatch: stored {stored}, content hashes "
                            f"to {actual} (edited after generation?)")
    if not isinstance(data.get("tools"), dict):
        raise ManifestError(f"{source}: manifest 'tools' must be a mapping")
    return data


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read a manifest file and verify its hash; see ``parse_manifest``."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read manifest: {exc}") from exc
    return parse_manifest(text, str(path))


def is_manifest_file(path: str | Path) -> bool:
    """Whether ``path`` names a rendered manifest rather than a policy file or module."""
    target = Path(path)
    if target.suffix == ".json":
        return True
    if target.suffix not in (".yaml", ".yml") or not target.is_file():
        return False
    try:
        head = target.read_text(encoding="utf-8", errors="replace")[:MAX_MANIFEST_BYTES]
    except OSError:
        return False
    # A policy file cannot hold this key (unknown keys are errors), so its presence decides.
    return re.search(rf"(?m)^{FORMAT_KEY}\s*:", head) is not None
