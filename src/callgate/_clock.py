"""The wall clock as text: the UTC date and time of day of a second, formatted once.

A decision stamps its call (``kernel._validate.now_iso``) and its audit record
(``audit._store``) with the time; both write the date and time of day of the current second
from here and add the fraction themselves.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime

__all__ = ["utc_second"]


@functools.lru_cache(maxsize=8)
def utc_second(second: int) -> str:
    """``second`` (since the epoch) as ``YYYY-MM-DDTHH:MM:SS`` in UTC, as ``isoformat`` writes
    it."""
    return datetime.fromtimestamp(second, UTC).isoformat()[:19]
