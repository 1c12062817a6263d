"""Hypothesis strategies: small random traces and random statements of every form."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from callgate._model import Event

ACTIONS = ("a", "b", "c", "d")
VALUES: tuple[Any, ...] = ("1", "2", "M", 1, 2.0, "xM1", True)
#: Many distinct values: an argument that takes them cannot stay part of an event's kind.
WIDE_VALUES: tuple[Any, ...] = (*VALUES, *(f"w{i}" for i in range(40)))
TAINTS = (frozenset(), frozenset({"web"}))
#: Many distinct taints (the kind of a body that reads taint includes it, up to a bound).
WIDE_TAINTS = (*TAINTS, frozenset({"rag"}), *(frozenset({"web", f"t{i}"}) for i in range(30)),
               *(frozenset({f"t{i}"}) for i in range(10)))

GROUND_ATOMS = (
    "action = a", "action = b", "action in {a, b}", "action in {c, d}", "action != c",
    "action not in {a, d}", 'x = "1"', "x = 1", 'y in {"2", "M"}', 'x != "M"',
    'y not in {"1"}', 'x ~ "?"', 'y ~ "*M*"', 'x !~ "M*"', 'output ~ "*M*"',
    'output !~ ""', "status = ok", "status != error", "status = denied", "taint has web",
    "x > 1", "y <= 1.5", "x >= 2", "taint has {rag, t3}",
)


@st.composite
def events(draw: st.DrawFn, max_size: int = 7, wide: bool = False) -> list[Event]:
    """A short trace of typed events over a tiny vocabulary (so patterns often match); with
    ``wide``, ``x`` and the taint take many distinct values too."""
    count = draw(st.integers(0, max_size))
    out = []
    for seq in range(1, count + 1):
        args = {k: draw(st.sampled_from(WIDE_VALUES if wide and k == "x" else VALUES))
                for k in ("x", "y") if draw(st.booleans())}
        out.append(Event(
            action=draw(st.sampled_from(ACTIONS)),
            args=args,
            status=draw(st.sampled_from(("ok", "ok", "error", "denied"))),
            output=draw(st.sampled_from(("", "M", "xy1", "2"))),
            taint=draw(st.sampled_from(WIDE_TAINTS if wide else TAINTS)),
            seq=seq,
        ))
    return out


@st.composite
def pattern(
    draw: st.DrawFn, role: str | None = None, names: tuple[str, ...] = (), most: int = 2
) -> str:
    """1 to ``most`` ground atoms, plus bindings (``role="bind"``) or uses of the variables."""
    atoms = draw(st.lists(st.sampled_from(GROUND_ATOMS), min_size=1, max_size=most))
    for name in names if role else ():
        if role == "bind":
            atoms.append(draw(st.sampled_from((f"x = ${name}", f"y = ${name}"))))
            if draw(st.integers(0, 4)) == 0:  # a second occurrence in the binding pattern
                atoms.append(draw(st.sampled_from((f"y = ${name}", f"output contains ${name}"))))
        else:
            atoms.append(draw(st.sampled_from(
                (f"x = ${name}", f"y = ${name}", f"output contains ${name}",
                 f"y contains ${name}"))))
    return " and ".join(atoms)


FORMS = ("abs", "prec", "resp", "bresp", "rslv", "until", "always")


def statement(form: str) -> st.SearchStrategy[str]:
    """Random statements of one form (``always`` included)."""
    return always_statement() if form == "always" else form_statement(form)


@st.composite
def form_statement(draw: st.DrawFn, form: str) -> str:
    """A statement of one of the six preset forms, with zero, one or two variables."""
    if form == "abs":
        return f"abs({draw(pattern())})"
    names = ("v", "w")[: draw(st.sampled_from((0, 1, 1, 2)))]
    if form == "until":
        # One atom each: longer patterns rarely line up into a broken interval.
        first = draw(pattern("bind", names, most=1))
        where = draw(st.sampled_from(("resolver", "bad", "both")))
        resolver = draw(pattern("use" if where != "bad" else None, names, most=1))
        bad = draw(pattern("use" if where != "resolver" else None, names, most=1))
        return f"until({first}, {resolver}, {bad})"
    first = draw(pattern("bind", names))
    second = draw(pattern("use", names))
    head = f"bresp[{draw(st.integers(1, 3))}]" if form == "bresp" else form
    return f"{head}({first}, {second})"


def body(depth: int, future_ok: bool = True) -> st.SearchStrategy[str]:
    """A temporal body text: any nesting of once, once[N] and eventually, futures under pasts
    and futures included (those bodies are judged at the end of the run)."""
    leaf = st.sampled_from(GROUND_ATOMS)
    if depth == 0:
        return leaf
    sub = body(depth - 1, future_ok)
    options = [
        leaf,
        sub.map(lambda b: f"not ({b})"),
        st.tuples(sub, sub).map(lambda p: f"({p[0]}) and ({p[1]})"),
        st.tuples(sub, sub).map(lambda p: f"({p[0]}) or ({p[1]})"),
        sub.map(lambda b: f"once({b})"),
        st.tuples(st.integers(1, 3), sub).map(lambda p: f"once[{p[0]}]({p[1]})"),
    ]
    if future_ok:
        options.append(sub.map(lambda b: f"eventually({b})"))
    return st.one_of(options)


def always_statement() -> st.SearchStrategy[str]:
    """A fallback statement ``always(Θ)``."""
    return body(3).map(lambda b: f"always({b})")

