"""Policy tests: table-driven cases a policy author writes in YAML, run on a fresh kernel.

``load_tests`` reads a test file (every problem at file:line:col, as for policies),
``run_tests`` decides each case's calls with a fresh ``Kernel`` (nothing executes: results come
from the case) and returns every difference, ``render`` prints a failed case, and
``generate_tests`` writes a test file pinning a recorded run's decisions. ``callgate policy
test`` is the command line over these; see docs/policy-testing.md.
"""

from callgate.policytest._generate import Generated, generate_tests
from callgate.policytest._run import CaseOutcome, Mismatch, render, run_case, run_tests
from callgate.policytest._schema import (
    CallSpec,
    Case,
    Expect,
    LoadedTests,
    NoteSpec,
    PolicyTests,
    ResultSpec,
    Step,
    WitnessSpec,
    load_tests,
    parse_tests,
)

__all__ = [
    "CallSpec",
    "Case",
    "CaseOutcome",
    "Expect",
    "Generated",
    "LoadedTests",
    "Mismatch",
    "NoteSpec",
    "PolicyTests",
    "ResultSpec",
    "Step",
    "WitnessSpec",
    "generate_tests",
    "load_tests",
    "parse_tests",
    "render",
    "run_case",
    "run_tests",
]
