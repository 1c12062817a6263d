"""Replay a recorded run through a fresh kernel: the same decisions, or where and why not.

The audit log is the recording (``callgate.kernel._recording`` says what the kernel writes for
it). ``read_recording`` verifies a log and reads one run; ``replay`` feeds it through a kernel
built from the recorded policy, or another one (the what-if), and compares every decision;
``render`` writes the comparison for a reviewer. See ``docs/replay.md``.
"""

from __future__ import annotations

from callgate.replay._engine import Change, ReplayOutcome, replay
from callgate.replay._recorded import Recording, ReplayError, read_recording
from callgate.replay._render import render

__all__ = ["Change", "Recording", "ReplayError", "ReplayOutcome", "read_recording", "render",
           "replay"]
