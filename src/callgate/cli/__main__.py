"""``python -m callgate.cli``: the ``callgate`` command."""

from callgate.cli import main

main()
