"""The widening verifier: what does the current manifest allow that the baseline did not?

Every stance is ordered from narrow to wide and every change is judged by what it admits, not
by its text: a new glob inside an old one, a host below an old ``*.`` pattern, a lower limit, a
new deny rule all pass; anything the verifier cannot prove narrower is reported. A stance moved
to ``unspecified`` (not enforced) is always a widening.

Findings for a tool carry that tool's current risk as their severity; findings about the
principal and the rules carry ``high``. Rule ids name what widened, e.g. ``tool.exec.widened``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from callgate.manifest._coverage import host_covers, uncovered_globs, uncovered_hosts
from callgate.manifest._findings import Finding
from callgate.policy._manifest import ManifestError
from callgate.policy._schema import RISK_ORDER

_NETWORK_RANK = {"deny": 0, "hosts": 1, "allow": 2, "unspecified": 3}
_ENV_RANK = {"deny": 0, "variables": 1, "unspecified": 2}
_STRICTNESS = {"allow": 0, "require-approval": 1, "deny": 2}
_MATCH_SETS = ("tool", "tool_class", "action", "taint_sources")
POLICY_SEVERITY = "high"

Add = Callable[[str, str], None]


def _show(values: list[str]) -> str:
    return ", ".join(values)


def _globs_of(stance: Mapping[str, Any]) -> list[str]:
    return list(stance.get("globs") or [])


def _absolute_only(globs: list[str]) -> list[str]:
    return [g for g in globs if g.startswith(("/", "~"))]


def _check_globs(old: Mapping[str, Any], new: Mapping[str, Any], key: str,
                 same_base: bool, add: Add) -> None:
    """Compare one glob stance (``unspecified`` / ``none`` / ``globs``)."""
    old_mode, new_mode = old["mode"], new["mode"]
    if new_mode == "unspecified":
        if old_mode != "unspecified":
            add(f"tool.{key}.unspecified", f"{key} moved from {old_mode} to unspecified "
                "(no longer enforced)")
        return
    if new_mode == "none" or old_mode == "unspecified":
        return
    before = _globs_of(old) if same_base else _absolute_only(_globs_of(old))
    wider = uncovered_globs(before, _globs_of(new))
    if wider:
        add(f"tool.{key}.widened", f"{key} covers more than before: {_show(wider)}")


def _effective_read(fs: Mapping[str, Any]) -> dict[str, Any]:
    # Write globs admit reads too (the path gate reads the union), so compare the union.
    read, write = fs["read"], fs["write"]
    if read["mode"] == "unspecified":
        return {"mode": "unspecified"}
    globs = _globs_of(read) + _globs_of(write)
    return {"mode": "globs", "globs": globs} if globs else {"mode": "none"}


def _check_filesystem(old: Mapping[str, Any], new: Mapping[str, Any], add: Add) -> None:
    same_base = old.get("working_dir") == new.get("working_dir")
    old_fs, new_fs = old["filesystem"], new["filesystem"]
    _check_globs(old_fs["write"], new_fs["write"], "filesystem.write", same_base, add)
    _check_globs(_effective_read(old_fs), _effective_read(new_fs), "filesystem.read",
                 same_base, add)
    followed = sorted(set(new_fs.get("follow_symlinks", ())) -
                      set(old_fs.get("follow_symlinks", ())))
    if followed:
        add("tool.filesystem.follow_added", f"roots now followed through symlinks: "
            f"{_show(followed)}")


def _check_network(old: Mapping[str, Any], new: Mapping[str, Any], add: Add) -> None:
    before, after = old["network"], new["network"]
    old_mode, new_mode = before["mode"], after["mode"]
    if new_mode == "unspecified" and old_mode != "unspecified":
        add("tool.network.unspecified", f"network moved from {old_mode} to unspecified")
    elif _NETWORK_RANK[new_mode] > _NETWORK_RANK[old_mode]:
        add("tool.network.widened", f"network opened from {old_mode} to {new_mode}")
    elif new_mode == old_mode == "hosts":
        wider = uncovered_hosts(before.get("hosts") or [], after.get("hosts") or [])
        if wider:
            add("tool.network.widened", f"network hosts extended: {_show(wider)}")
        if before.get("proxy") != after.get("proxy"):
            add("tool.network.proxy_changed", "network egress proxy changed from "
                f"{before.get('proxy')} to {after.get('proxy')}")


def _env_mode(env: Mapping[str, Any]) -> str:
    # An empty variable list passes nothing: the same as deny.
    if env["mode"] == "variables" and not env.get("variables"):
        return "deny"
    return str(env["mode"])


def _check_environment(old: Mapping[str, Any], new: Mapping[str, Any], add: Add) -> None:
    before, after = old["environment"], new["environment"]
    old_mode, new_mode = _env_mode(before), _env_mode(after)
    if new_mode == "unspecified" and old_mode != "unspecified":
        add("tool.environment.unspecified", f"environment moved from {old_mode} to "
            "unspecified (inherits everything)")
    elif _ENV_RANK[new_mode] > _ENV_RANK[old_mode]:
        add("tool.environment.widened", f"environment opened from {old_mode} to {new_mode}: "
            f"{_show(list(after.get('variables') or []))}")
    elif new_mode == old_mode == "variables":
        added = sorted(set(after["variables"]) - set(before["variables"]))
        if added:
            add("tool.environment.widened", f"environment variables added: {_show(added)}")


def _check_exec(old: Mapping[str, Any], new: Mapping[str, Any], add: Add) -> None:
    before, after = old["exec"], new["exec"]
    if after in (before, "deny"):
        return
    if after == "allow":
        add("tool.exec.widened", f"exec opened from {before} to allow")
    else:
        add("tool.exec.unspecified", f"exec moved from {before} to unspecified")


def _looser(old: int | None, new: int | None) -> bool:
    """Whether an upper bound got looser (``None`` is no bound)."""
    return old is not None and (new is None or new > old)


def _bound(value: int | None) -> str:
    return "unlimited" if value is None else str(value)


def _check_constraints(old: Mapping[str, Any], new: Mapping[str, Any], add: Add) -> None:
    before, after = old["constraints"], new["constraints"]
    if _looser(before["max_invocations"], after["max_invocations"]):
        add("tool.constraints.loosened", "max_invocations raised from "
            f"{before['max_invocations']} to {_bound(after['max_invocations'])}")
    dropped = sorted(set(before["only_after"]) - set(after["only_after"]))
    if dropped:
        add("tool.constraints.loosened", f"only_after no longer requires {_show(dropped)}")
    if before["forbidden"] and not after["forbidden"]:
        add("tool.constraints.loosened", "no longer forbidden")


def _check_limits(old: Mapping[str, Any], new: Mapping[str, Any], add: Add) -> None:
    before, after = old["limits"], new["limits"]
    for key in sorted(set(before) | set(after)):
        if _looser(before.get(key), after.get(key)):
            add("tool.limits.loosened", f"limits.{key} raised from {before.get(key)} to "
                f"{_bound(after.get(key))}")


def _check_misc(old: Mapping[str, Any], new: Mapping[str, Any], add: Add) -> None:
    if RISK_ORDER[new["risk"]] > RISK_ORDER[old["risk"]]:
        add("tool.risk.raised", f"risk raised from {old['risk']} to {new['risk']}")
    if old.get("tool_class") != new.get("tool_class"):
        add("tool.class.changed", f"tool class changed from {old.get('tool_class')} to "
            f"{new.get('tool_class')} (other grants and rules apply)")
    if new["scratch"] and not old["scratch"]:
        add("tool.scratch.enabled", "scratch space enabled (a writable private /tmp)")
    before, after = _roles(old["path_params"]), _roles(new["path_params"])
    dropped = sorted(set(before) - set(after))
    if dropped:
        add("tool.path_params.removed", f"parameters no longer checked as paths: "
            f"{_show(dropped)}")
    demoted = sorted(n for n, role in after.items() if role == "read" and before.get(n) == "write")
    if demoted:
        add("tool.path_params.loosened", f"parameters now judged as reads, not writes: "
            f"{_show(demoted)}")


def _roles(entry: Mapping[str, str] | list[str]) -> Mapping[str, str]:
    """Path parameters by role; a list (an older manifest) means every one is read."""
    return {name: "read" for name in entry} if isinstance(entry, list) else entry


_TOOL_CHECKS = (_check_misc, _check_filesystem, _check_network, _check_environment,
                _check_exec, _check_constraints, _check_limits)


def _compare_tool(name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Finding]:
    found: list[Finding] = []

    def add(rule_id: str, message: str) -> None:
        found.append(Finding(str(new["risk"]), rule_id, name, message))

    for check in _TOOL_CHECKS:
        check(old, new, add)
    return found


def _subset(outer: list[str] | None, inner: list[str] | None) -> bool:
    """Whether list-constraint ``inner`` admits no more than ``outer`` (``None`` = anything)."""
    return outer is None or (inner is not None and set(inner) <= set(outer))


def _constraint_widenings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if key == "follow_symlinks":
            followed = sorted(set(after or ()) - set(before or ()))
            if followed:
                out.append(f"{key} extended: {_show(followed)}")
        elif key == "max_calls_per_minute":
            if _looser(before, after):
                out.append(f"{key} raised from {before} to {_bound(after)}")
        elif before is not None and after is None:
            out.append(f"{key} removed (no limit)")
        elif before is not None and after is not None:
            if key == "allowed_paths":
                wider = uncovered_globs(before, after)
            elif key == "allowed_hosts":
                wider = [h for h in after if not any(host_covers(o, h) for o in before)]
            else:
                wider = sorted(set(after) - set(before))
            if wider:
                out.append(f"{key} extended: {_show(wider)}")
    return out


def _capability_widenings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why ``new`` admits more than ``old`` (empty when ``old`` covers it)."""
    if old["tool_class"] != new["tool_class"]:
        return [f"tool class {new['tool_class']}"]
    why: list[str] = []
    if old["actions"] and not set(new["actions"] or ["*"]) <= set(old["actions"]):
        extra = sorted(set(new["actions"]) - set(old["actions"])) or ["every action"]
        why.append(f"actions {_show(extra)}")
    return why + _constraint_widenings(old["constraints"], new["constraints"])


def _describe(cap: Mapping[str, Any]) -> str:
    return f"{cap['tool_class']} ({_show(cap['actions']) or 'every action'})"


def _compare_principal(old: Mapping[str, Any] | None,
                       new: Mapping[str, Any] | None) -> list[Finding]:
    if new is None:
        return []
    before = list(old["capabilities"]) if old is not None else []
    found: list[Finding] = []
    for cap in new["capabilities"]:
        reasons = [_capability_widenings(o, cap) for o in before]
        if any(not r for r in reasons):
            continue
        same_class: list[list[str]] = [r for o, r in zip(before, reasons, strict=True)
                      if o["tool_class"] == cap["tool_class"]]
        closest: list[str] = min(same_class, key=len) if same_class else ["no baseline grant"]
        detail = "; ".join(closest)
        found.append(Finding(POLICY_SEVERITY, "principal.capability.widened", "principal",
                             f"capability {_describe(cap)} allows more than the baseline: "
                             f"{detail}"))
    return found


def _param_covers(outer: Mapping[str, Any], inner: Mapping[str, Any] | None) -> bool:
    """Whether parameter condition ``inner`` holds only where ``outer`` holds."""
    if inner is None:
        return all(outer.get(k) is None for k in ("pattern", "in", "not_in"))
    if outer.get("pattern") is not None and outer["pattern"] != inner.get("pattern"):
        return False
    if not _subset(outer.get("in"), inner.get("in")):
        return False
    excluded = outer.get("not_in")
    return excluded is None or set(excluded) <= set(inner.get("not_in") or [])


def match_covers(outer: Mapping[str, Any], inner: Mapping[str, Any]) -> bool:
    """Whether every call rule match ``inner`` fits also fits ``outer`` (proved, or False)."""
    if not all(_subset(outer.get(k), inner.get(k)) for k in _MATCH_SETS):
        return False
    params_in = inner.get("parameters") or {}
    return all(_param_covers(cond, params_in.get(name))
               for name, cond in (outer.get("parameters") or {}).items())


def _rule_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, str] | None:
    if _STRICTNESS[new["decision"]] < _STRICTNESS[old["decision"]]:
        return "rule.decision.loosened", f"decision loosened from {old['decision']} to " \
            f"{new['decision']}"
    decision, before, after = new["decision"], old["match"], new["match"]
    if decision == "allow" and not match_covers(before, after):
        return "rule.match.widened", "allow rule matches calls it did not match before"
    if decision == "deny" and not match_covers(after, before):
        return "rule.match.narrowed", "deny rule no longer matches calls it matched before"
    if decision == "require-approval" and not (match_covers(before, after)
                                               and match_covers(after, before)):
        return "rule.match.changed", "require-approval rule matches different calls (some " \
            "may have been denied, others may now reach later rules)"
    return None


def _reorderings(old: list[Mapping[str, Any]], new: list[Mapping[str, Any]]) -> list[Finding]:
    """Pairs of kept rules where a less strict rule now comes before a stricter one."""
    old_pos = {r["id"]: i for i, r in enumerate(old)}
    kept = [r for r in new if r["id"] in old_pos]
    found: list[Finding] = []
    for i, early in enumerate(kept):
        for late in kept[i + 1:]:
            flipped = old_pos[early["id"]] > old_pos[late["id"]]
            if flipped and _STRICTNESS[early["decision"]] < _STRICTNESS[late["decision"]]:
                found.append(Finding(POLICY_SEVERITY, "rule.reordered", f"rule:{early['id']}",
                                     f"now evaluated before {late['decision']} rule "
                                     f"{late['id']!r}"))
    return found


def _compare_rules(old: list[Mapping[str, Any]], new: list[Mapping[str, Any]]) -> list[Finding]:
    before = {r["id"]: r for r in old}
    after = {r["id"]: r for r in new}
    found: list[Finding] = []
    for rule in new:
        subject = f"rule:{rule['id']}"
        if rule["id"] not in before:
            if rule["decision"] != "deny":
                found.append(Finding(POLICY_SEVERITY, "rule.added", subject,
                                     f"new {rule['decision']} rule"))
            continue
        change = _rule_change(before[rule["id"]], rule)
        if change is not None:
            found.append(Finding(POLICY_SEVERITY, change[0], subject, change[1]))
    for rule in old:
        if rule["id"] not in after and rule["decision"] != "allow":
            found.append(Finding(POLICY_SEVERITY, "rule.removed", f"rule:{rule['id']}",
                                 f"{rule['decision']} rule removed"))
    return found + _reorderings(old, new)


def _compare_run_state(old: Mapping[str, Any] | None,
                       new: Mapping[str, Any] | None) -> list[Finding]:
    if old is None or new is None:
        return []  # no policy on one side: no run-state settings to compare
    why: list[str] = []
    if new["quarantine_after_denials"] > old["quarantine_after_denials"]:
        why.append(f"quarantine_after_denials raised from {old['quarantine_after_denials']} to "
                   f"{new['quarantine_after_denials']}")
    if old["behavioral_rules"] and not new["behavioral_rules"]:
        why.append("behavioral_rules turned off")
    return [Finding(POLICY_SEVERITY, "run_state.loosened", "run_state", w) for w in why]


def _compare_behavior(old: list[Mapping[str, Any]],
                      new: list[Mapping[str, Any]]) -> list[Finding]:
    after = {b["id"]: b for b in new}
    found: list[Finding] = []
    for statement in old:
        subject = f"behavior:{statement['id']}"
        current = after.get(statement["id"])
        if current is None:
            found.append(Finding(POLICY_SEVERITY, "behavior.removed", subject,
                                 "behavioral statement removed"))
            continue
        if current["rule"] != statement["rule"]:
            found.append(Finding(POLICY_SEVERITY, "behavior.changed", subject,
                                 "statement rewritten (not provably as strict)"))
        before_mode, mode = statement["enforce"], current["enforce"]
        if before_mode not in (mode, "alert"):
            found.append(Finding(POLICY_SEVERITY, "behavior.loosened", subject,
                                 f"enforce changed from {before_mode} to {mode}"))
    return found


def _compare(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> list[Finding]:
    found: list[Finding] = []
    old_tools, new_tools = baseline["tools"], current["tools"]
    for name in sorted(new_tools):
        tool = new_tools[name]
        if name not in old_tools:
            found.append(Finding(str(tool["risk"]), "tool.added", name,
                                 f"new tool (risk {tool['risk']})"))
        else:
            found.extend(_compare_tool(name, old_tools[name], tool))
    found.extend(_compare_principal(baseline.get("principal"), current.get("principal")))
    found.extend(_compare_rules(list(baseline.get("rules") or []),
                                list(current.get("rules") or [])))
    found.extend(_compare_run_state(baseline.get("run_state"), current.get("run_state")))
    found.extend(_compare_behavior(list(baseline.get("behavior") or []),
                                   list(current.get("behavior") or [])))
    return found


def verify_manifest(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> list[Finding]:
    """Every way ``current`` allows more than ``baseline``; an empty list means no widening.

    Both are manifests as ``build_manifest`` makes them (check a stored baseline's hash with
    ``load_manifest`` first). A manifest of the wrong shape raises ``ManifestError``.
    """
    try:
        return _compare(baseline, current)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ManifestError(f"manifest has an unexpected shape: {type(exc).__name__}: "
                            f"{exc}") from exc
