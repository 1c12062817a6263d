"""The package facade exports exactly its public names."""

from __future__ import annotations

import pytest

import callgate.abstraction as abstraction


def test_all_lists_exactly_the_public_names_once() -> None:
    public = {n for n in vars(abstraction) if not n.startswith("_") and n != "annotations"}
    modules = {n for n in public if type(getattr(abstraction, n)).__name__ == "module"}
    assert set(abstraction.__all__) == public - modules
    assert len(abstraction.__all__) == len(set(abstraction.__all__))


@pytest.mark.interpreted
def test_public_names_have_docstrings() -> None:
    for name in abstraction.__all__:
        value = getattr(abstraction, name)
        if callable(value):
            assert value.__doc__, name
