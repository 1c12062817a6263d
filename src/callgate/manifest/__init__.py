"""The permission manifest, the widening verifier, and the declare-vs-do check.

    manifest = build_manifest(policy, {"write_report": ToolPolicy(...)})
    text = render(manifest, "json")              # deterministic, with its sha256
    findings = verify_manifest(load_manifest("callgate-manifest.json"), manifest)
    findings += lint_module("myagent/tools.py")  # tools that do more than they declare

Each finding prints as ``[severity] rule-id tool: message``. The command-line forms are
``callgate manifest generate|verify`` and ``callgate lint-tools`` (``manifest.cli``).
"""

from callgate.manifest._coverage import glob_covers, host_covers
from callgate.manifest._discover import load_target, manifest_of
from callgate.manifest._findings import Finding
from callgate.manifest._lint_tools import lint_module
from callgate.manifest._verify import verify_manifest
from callgate.policy._manifest import (
    ManifestError,
    build_manifest,
    load_manifest,
    manifest_hash,
    parse_manifest,
    redact,
    render,
)

__all__ = [
    "Finding",
    "ManifestError",
    "build_manifest",
    "glob_covers",
    "host_covers",
    "lint_module",
    "load_manifest",
    "load_target",
    "manifest_hash",
    "manifest_of",
    "parse_manifest",
    "redact",
    "render",
    "verify_manifest",
]
