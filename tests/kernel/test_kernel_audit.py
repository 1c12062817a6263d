"""The kernel and its audit log: decisions written before execution, failures deny."""

from __future__ import annotations

from pathlib import Path

import pytest

from callgate import Denied
from callgate.audit import AuditStore
from callgate.kernel._kernel import Kernel
from callgate.policy._loader import LoadedPolicy
from callgate.testing import call, reason_ids


def test_the_decision_is_in_the_log_before_the_executor_runs(example_policy: LoadedPolicy,
                                                             workdir: Path) -> None:
    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    seen_kinds: list[list[str]] = []

    def executor(_: object) -> str:
        with AuditStore.open(db) as reader:
            seen_kinds.append([r.kind for r in reader.records(k.run_id)])
        return "page"

    k.register_executor("http", executor)
    k.execute(call("http", "get", url="https://api.github.com/"))
    k.close()
    assert seen_kinds == [["run-start", "decision"]]
    with AuditStore.open(db) as store:
        kinds = [r.kind for r in store.records(k.run_id)]
        assert kinds == ["run-start", "decision", "result", "run-end"]
        assert store.verify().ok


def test_denials_and_quarantine_are_audited(example_policy: LoadedPolicy, workdir: Path) -> None:
    db = workdir / "audit.db"
    with Kernel(example_policy, working_dir=workdir, audit=db) as k:
        for _ in range(5):
            k.check(call("http", "post", url="https://x.com"))
        run = k.run_id
    with AuditStore.open(db) as store:
        records = store.records(run)
    decisions = [r for r in records if r.kind == "decision"]
    assert len(decisions) == 5
    systems = [r.payload for r in records if r.kind == "system"]
    assert any("run.denial-threshold" in str(p) for p in systems)


def test_a_failed_audit_write_denies(example_policy: LoadedPolicy, workdir: Path) -> None:
    import resource
    import signal

    db = workdir / "audit.db"
    k = Kernel(example_policy, working_dir=workdir, audit=db)
    ran: list[object] = []
    k.register_executor("http", ran.append)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        # The log cannot grow (a full disk, a file size limit): the kernel cannot append the
        # decision, so the call is denied and never runs.
        size = Path(f"{db}.log").stat().st_size
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, limits[1]))
        with pytest.raises(Denied) as info:
            k.execute(call("http", "get", url="https://api.github.com/"))
        assert reason_ids(info.value.decision) == ["audit.write-failed"]
        assert ran == []
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    k.close()
    with AuditStore.open(db) as store:
        assert store.verify().ok


_CHECKER = """
import sys
from callgate.kernel._kernel import Kernel
from callgate.policy._loader import load_policy

kernel = Kernel(load_policy(sys.argv[1]), working_dir=sys.argv[2], audit=sys.argv[3])
print(kernel.run_id, flush=True)
n = 0
while True:
    n += 1
    # some calls carry a record of several pages: a kill can land inside their write()
    pad = "x" * (40_000 if n % 3 == 0 else 10)
    decision = kernel.check({"tool": "fetch", "tool_class": "http", "action": "get",
                             "parameters": {"url": f"https://api.github.com/{n}?q={pad}"}})
    print(decision.call_id, flush=True)
"""


@pytest.mark.parametrize("after", [1, 7, 40])
def test_a_decision_check_returned_survives_kill_9(example_policy: LoadedPolicy, workdir: Path,
                                                  after: int) -> None:
    import os
    import signal
    import subprocess
    import sys

    db = workdir / "audit.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHECKER, example_policy.source, str(workdir), str(db)],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()
    acknowledged = [proc.stdout.readline().strip() for _ in range(after)]
    os.kill(proc.pid, signal.SIGKILL)  # right after check returned, maybe inside the next
    proc.wait(timeout=30)
    proc.stdout.close()
    with AuditStore.open(db) as store:
        decided = {r.payload["call"]["id"] for r in store.records(run_id)
                   if r.kind == "decision"}
        assert set(acknowledged) <= decided
        assert store.verify().ok


def test_every_audit_event_carries_the_manifest_in_force(example_policy: LoadedPolicy,
                                                         workdir: Path) -> None:
    from callgate import ToolPolicy

    db = workdir / "audit.db"
    with Kernel(example_policy, working_dir=workdir, audit=db) as k:
        first = k.manifest_hash
        k.check(call("http", "get", url="https://api.github.com/"))

        @k.tool(policy=ToolPolicy(filesystem={"read": ["./data/**"]}))  # type: ignore[arg-type]
        def peek(path: str) -> str:
            return "x"

        second = k.manifest_hash
        k.check(call("http", "get", url="https://api.github.com/"))
        run = k.run_id
    assert first != second
    with AuditStore.open(db) as store:
        hashes = [r.payload["manifest_hash"] for r in store.records(run)]
    assert hashes[:2] == [first, first]
    assert hashes[2:] == [second] * (len(hashes) - 2)
