"""Behavioral policies: Vigil's temporal language over typed events, checked two ways.

``compile_behavior`` turns a policy's ``behavior`` statements into a ``BehaviorSet``; its
``monitor()`` decides pending calls online with state updated once per event, and its
``check_trace`` judges a finished trace with the incremental engine or the Z3 reference
(``engine="smt"``). ``load_trace`` reads a recorded JSONL trace. The language holds no command
line: ``callgate check`` lives in ``callgate.cli``.
"""

from callgate.temporal._behavior import BehaviorSet, compile_behavior, merge_violations
from callgate.temporal._monitor import Monitor, Violation
from callgate.temporal._nodes import Statement
from callgate.temporal._parser import parse_statement
from callgate.temporal._patterns import OBSERVATION_LIMIT
from callgate.temporal._trace import MAX_TRACE_PROBLEMS, load_trace

__all__ = [
    "MAX_TRACE_PROBLEMS",
    "OBSERVATION_LIMIT",
    "BehaviorSet",
    "Monitor",
    "Statement",
    "Violation",
    "compile_behavior",
    "load_trace",
    "merge_violations",
    "parse_statement",
]



def __getattr__(name: str) -> object:
    # ``check_command`` was exported here before the command line became its own package.
    if name == "check_command":
        from callgate._aliases import moved_attribute

        return moved_attribute("callgate.cli._check", name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
