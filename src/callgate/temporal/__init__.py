"""Behavioural policies: Vigil's temporal language over typed events, checked two ways.

``compile_behavior`` turns a policy's ``behavior`` statements into a ``BehaviorSet``; its
``monitor()`` decides pending calls online with state updated once per event, and its
``check_trace`` judges a finished trace with the incremental engine or the Z3 reference
(``engine="smt"``). ``load_trace`` reads a recorded JSONL trace; ``check_command`` is the
``callgate check`` command.
"""

from callgate.temporal.behavior import BehaviorSet, compile_behavior, merge_violations
from callgate.temporal.cli import check_command
from callgate.temporal.monitor import Monitor, Violation
from callgate.temporal.nodes import Statement
from callgate.temporal.parser import parse_statement
from callgate.temporal.patterns import OBSERVATION_LIMIT
from callgate.temporal.trace import MAX_TRACE_PROBLEMS, load_trace

__all__ = [
    "MAX_TRACE_PROBLEMS",
    "OBSERVATION_LIMIT",
    "BehaviorSet",
    "Monitor",
    "Statement",
    "Violation",
    "check_command",
    "compile_behavior",
    "load_trace",
    "merge_violations",
    "parse_statement",
]

