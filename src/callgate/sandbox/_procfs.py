"""The ``/proc`` entries a sandboxed tool never sees: kernel state that is not its own.

Every backend gives the tool a read-only ``/proc`` (writing ``/proc/sys``, ``sysrq-trigger``,
``/proc/irq`` … changes the host; uid 0 may write them without any capability). These entries
are also covered for reading, as container runtimes do: kernel memory and key material,
timers and scheduler state of the whole machine, hardware buses.
"""

from __future__ import annotations

import functools
import os

#: Covered by an empty mode-000 file or directory when they exist on this kernel.
PROC_HIDDEN: tuple[str, ...] = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/key-users",
    "/proc/kmsg",
    "/proc/kpagecgroup",
    "/proc/kpagecount",
    "/proc/kpageflags",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/sysrq-trigger",
    "/proc/timer_list",
    "/proc/timer_stats",
)


@functools.cache
def proc_hidden() -> tuple[str, ...]:
    """The entries of ``PROC_HIDDEN`` this kernel has (a cover needs something to cover)."""
    return tuple(path for path in PROC_HIDDEN if os.path.lexists(path))
