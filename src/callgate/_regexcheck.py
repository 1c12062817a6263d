"""The load-time check of a policy pattern, under its earlier name.

Patterns are no longer judged for backtracking: every one runs on a linear-time engine
(``callgate._regex``), and the check is whether it can run there with Python's meaning.
"""

from __future__ import annotations

from callgate._regex import MAX_PATTERN_LENGTH, check_pattern

check_regex = check_pattern

__all__ = ["MAX_PATTERN_LENGTH", "check_regex"]
