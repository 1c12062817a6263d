"""Helpers shared by the command-line modules: policy loading, decision JSON, JSON lines.

A policy file is loaded through the user's policy cache (``PolicyCache.default()``): a file that
validated before loads without being parsed again (see ``callgate.policy._cache``).

Input lines are read as bytes with bounds, so that no line can stop the ones after it: a line
longer than ``MAX_LINE_BYTES`` is skipped without being held whole, one that is not UTF-8 or not
JSON is reported, and nesting deeper than ``MAX_JSON_DEPTH`` is refused (``_jsonlimits``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any, NoReturn, TypeVar

import click

from callgate._errors import CallgateError, PolicyError, TemporalError
from callgate._jsonlimits import MAX_JSON_DEPTH, JSONTooDeepError, loads_bounded
from callgate._model import Decision, Reason
from callgate.kernel._behavior import compile_for
from callgate.kernel._kernel import DEFAULT_DECISION_DEADLINE_S, Kernel
from callgate.policy._cache import PolicyCache
from callgate.policy._loader import LoadedPolicy, load_policy
from callgate.policy.presets import load_preset, preset_names

#: Longest input line, in bytes; a longer one is denied (``input.too-large``) unread.
MAX_LINE_BYTES = 8 << 20

_F = TypeVar("_F", bound=Callable[..., Any])

#: ``--policy FILE`` and ``--preset NAME``: where a command's policy comes from.
policy_option = click.option("--policy", "policy", type=click.Path(dir_okay=False),
                             help="Policy YAML file.")
preset_option = click.option("--preset", type=click.Choice(preset_names()),
                             help="A shipped preset instead of a file.")
#: ``--store URL``: a PostgreSQL audit store (``postgresql://…``) in place of a SQLite file.
store_option = click.option("--store", "store_url", metavar="URL", default=None,
                            help="PostgreSQL audit store (postgresql://…) instead of a file.")


def audit_target(path: str | None, store_url: str | None, *, name: str = "--audit FILE"
                 ) -> str | None:
    """The audit log a command writes or reads: ``--store URL`` or the file, never both
    (exit 2); a ``--store`` that is not a PostgreSQL URL exits 2 too."""
    if store_url is None:
        return path
    if path is not None:
        fail(f"error: give {name} or --store URL, not both")
    if not store_url.startswith(("postgresql://", "postgres://")):
        fail("error: --store takes a postgresql:// URL (a SQLite log is given as a file)")
    return store_url


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` to stderr and exit with ``code``."""
    click.echo(message, err=True)
    sys.exit(code)


def load_cli_policy(policy: str | None, preset: str | None, *, statements: bool = True
                    ) -> LoadedPolicy:
    """Load ``--policy FILE`` or ``--preset NAME``; a load error exits 2 naming its places.

    With ``statements`` the behavior statements are compiled too (their errors are policy
    errors at file:line:col); a command that builds a ``Kernel`` next leaves that to the
    kernel, which compiles them the same way (see ``kernel_for``).
    """
    if (policy is None) == (preset is None):
        fail("give exactly one of --policy FILE or --preset NAME")
    try:
        if preset is not None:
            return load_preset(preset)
        assert policy is not None
        loaded = load_policy(policy, cache=PolicyCache.default())
        if statements:
            compile_for(loaded.policy, loaded)  # behavior statements report file:line:col too
        return loaded
    except (PolicyError, TemporalError) as exc:
        fail(f"policy error:\n{exc}")
    except CallgateError as exc:
        fail(f"error: {exc}")


def kernel_for(loaded: LoadedPolicy, **options: Any) -> Kernel:
    """A kernel for ``loaded``; a statement that does not compile exits 2 as a policy error
    (at file:line:col), any other refusal exits 2 as an error."""
    try:
        return Kernel(loaded, **options)
    except TemporalError as exc:
        fail(f"policy error:\n{exc}")
    except CallgateError as exc:
        fail(f"error: {exc}")


def decision_json(decision: Decision) -> dict[str, Any]:
    """A decision as one JSON object: verdict, reasons with ids, witness when there is one."""
    out: dict[str, Any] = {
        "verdict": decision.verdict,
        "reasons": [r.model_dump() for r in decision.reasons],
    }
    if decision.witness is not None:
        out["witness"] = decision.witness.model_dump()
    return out


def deadline_option(command: _F) -> _F:
    """The ``--deadline SECONDS`` option: how long one decision may take before it is a deny."""
    return click.option(
        "--deadline", "deadline", type=float, default=DEFAULT_DECISION_DEADLINE_S,
        show_default=True, help="Seconds a decision may take; past it the call is denied.",
    )(command)


def decide_unreadable(kernel: Kernel, reason: Reason) -> Decision:
    """An input line that is not a call: an audited deny, with the line's own reason first."""
    decision = kernel.check({"tool": "<unparsed>", "parameters": {"error": reason.message}})
    return Decision(verdict="deny", call_id=decision.call_id,
                    reasons=(reason, *decision.reasons))


def read_json_lines(stream: IO[bytes]) -> Iterator[tuple[int, dict[str, Any] | Reason]]:
    """Each non-blank line as (line number, object) or (line number, why it is not a call)."""
    number = 0
    while line := stream.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            _skip_line(stream)
            yield number, _bad("input.too-large", number,
                               f"longer than {MAX_LINE_BYTES} bytes; not read")
        elif line.strip():
            yield number, parse_line(line, number)


def parse_line(line: bytes, number: int) -> dict[str, Any] | Reason:
    """One input line as a call object, or the reason it is not one (naming the line)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _bad("input.not-utf8", number,
                    f"not UTF-8 (byte {line[exc.start]:#04x} at offset {exc.start})")
    try:
        value = loads_bounded(text, MAX_JSON_DEPTH, parse_constant=_no_constant)
    except JSONTooDeepError as exc:
        return _bad("input.too-deep", number, str(exc))
    except json.JSONDecodeError as exc:
        return _bad("input.not-json", number, f"not JSON ({exc.msg} at column {exc.colno})")
    except (ValueError, RecursionError) as exc:  # NaN/Infinity, an integer too long to read
        return _bad("input.not-json", number, f"not JSON ({exc})")
    if not isinstance(value, dict):
        return _bad("input.not-json", number, "a call must be a JSON object")
    return value


def _skip_line(stream: IO[bytes]) -> None:
    while (chunk := stream.readline(1 << 20)) and not chunk.endswith(b"\n"):
        pass


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _bad(reason_id: str, number: int, message: str) -> Reason:
    return Reason(id=reason_id, check="validate", message=f"line {number}: {message}")
