"""Where agents meet callgate: thin translation layers over the public API.

Each integration turns its host's calls into ``ToolCall`` values for a ``Kernel`` and the
kernel's ``Decision`` back into the host's answer; none holds policy logic of its own.
"""
