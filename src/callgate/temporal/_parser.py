"""A hand-written recursive-descent parser for behavioral statements, with places.

Grammar (``ψ`` a pattern, ``Θ`` a temporal body)::

    statement := abs(ψ) | prec(ψ, ψ) | resp(ψ, ψ) | bresp[N](ψ, ψ) | rslv(ψ, ψ)
               | until(ψ, ψ, ψ) | always(Θ)
    ψ         := primary ("and" primary)*        primary := "(" ψ ")" | atom
    Θ         := conj ("or" conj)*               conj := unary ("and" unary)*
    unary     := "not" unary | "once" ["[" N "]"] "(" Θ ")" | "eventually" "(" Θ ")"
               | "(" Θ ")" | atom
    atom      := action (= | !=) NAME | action [not] in {NAME, …}
               | status (= | !=) (ok | error | denied)
               | output (~ | !~ | ~* | !~*) "p" | output contains $x
               | output [not] from (NAME | {NAME, …}) | taint has (NAME | {NAME, …})
               | ARG (= | !=) LIT | ARG = $x | ARG [not] in {LIT, …} | ARG (~ | !~ | ~* | !~*) "p"
               | ARG (> | >= | < | <=) NUMBER | ARG contains $x
               | ARG [not] from (NAME | {NAME, …})
               | (any | all) ARG ((= | !=) LIT | [not] in {LIT, …} | (~ | !~ | ~* | !~*) "p"
                                  | (> | >= | < | <=) NUMBER)

ARG may also be ``links(NAME)``: the identifiers (e-mail addresses, URLs and hosts, IBANs,
phone numbers) inside argument NAME, a list of their normal forms.

Parsing stops at the first syntax error; scope rules are checked afterwards (``scope``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, TypeVar

from callgate._errors import Problem, TemporalError
from callgate.temporal import _nodes as n
from callgate.temporal._lexer import Placer, Token, tokenize
from callgate.temporal._scope import check_scope

_FORMS = {"abs": 1, "prec": 2, "resp": 2, "bresp": 2, "rslv": 2, "until": 3, "always": 0}
_RESERVED = frozenset({"and", "or", "not", "in"})
_STATUSES = ("ok", "error", "denied")
_COMPARE = frozenset({">", ">=", "<", "<="})
_MATCH = frozenset({"~", "!~", "~*", "!~*"})
_QUANTIFIERS = frozenset({"any", "all"})
_FIELDS = frozenset({"action", "status", "output", "taint"})
_T = TypeVar("_T")
#: Deepest nesting of parentheses, ``not``, ``once`` and ``eventually`` a rule may use; the
#: parser and both engines recurse over the tree, so the depth is bounded up front.
MAX_NESTING = 64


def parse_statement(
    text: str, *, source: str = "<rule>", line: int = 1, column: int = 1
) -> n.Statement:
    """Parse and scope-check one statement; ``TemporalError`` names file:line:column on failure.

    ``line`` and ``column`` are where ``text`` starts in ``source``.
    """
    return parse_with(text, Placer(text, source, line, column))


def parse_with(text: str, placer: Placer) -> n.Statement:
    """Parse ``text`` with an explicit offset-to-place mapping (used for YAML-folded rules)."""
    statement = _Parser(text, placer).statement()
    check_scope(statement)
    return statement


class _Parser:
    def __init__(self, text: str, placer: Placer) -> None:
        self._text = text
        self._placer = placer
        self._tokens = tokenize(text, placer)
        self._i = 0
        self._depth = 0

    def _enter(self) -> None:
        self._depth += 1
        if self._depth > MAX_NESTING:
            pos = self._pos(self._peek())
            raise TemporalError(
                [Problem(f"rule nests deeper than {MAX_NESTING} levels", pos.source, pos.line,
                         pos.column)]
            )

    # -- token helpers ------------------------------------------------------------------
    def _peek(self, ahead: int = 0) -> Token:
        return self._tokens[min(self._i + ahead, len(self._tokens) - 1)]

    def _next(self) -> Token:
        token = self._peek()
        self._i += 1
        return token

    def _at(self, text: str, kinds: tuple[str, ...] = ("punct", "ident")) -> bool:
        token = self._peek()
        return token.kind in kinds and token.text == text

    def _pos(self, token: Token) -> n.Pos:
        return self._placer.pos(token.offset)

    def _fail(self, expected: str, token: Token | None = None) -> NoReturn:
        token = token or self._peek()
        found = "end of rule" if token.kind == "end" else repr(token.text)
        if token.kind == "string":
            found = f'string "{token.text}"'
        pos = self._pos(token)
        raise TemporalError(
            [Problem(f"expected {expected}, found {found}", pos.source, pos.line, pos.column)]
        )

    def _expect(self, text: str) -> Token:
        if not self._at(text):
            self._fail(repr(text))
        return self._next()

    def _bound(self) -> int:
        self._expect("[")
        token = self._next()
        if token.kind != "number" or not token.text.lstrip("-").isdigit():
            self._fail("a whole-number bound", token)
        if int(token.text) < 1:
            pos = self._pos(token)
            raise TemporalError(
                [Problem(f"bound must be at least 1, got {token.text}", pos.source, pos.line,
                         pos.column)]
            )
        self._expect("]")
        return int(token.text)

    # -- statements ---------------------------------------------------------------------
    def statement(self) -> n.Statement:
        head = self._next()
        if head.kind != "ident" or head.text not in _FORMS:
            self._fail("a form (abs, prec, resp, bresp[N], rslv, until or always)", head)
        form = head.text
        bound = self._bound() if form == "bresp" else None
        self._expect("(")
        patterns: list[n.Pattern] = []
        body: n.Body | None = None
        if form == "always":
            body = self._body()
        else:
            for index in range(_FORMS[form]):
                if index:
                    self._expect(",")
                patterns.append(self._pattern())
        self._expect(")")
        if self._peek().kind != "end":
            self._fail("end of rule")
        variables = _variables(patterns, body)
        return n.Statement(
            form,  # type: ignore[arg-type]  # one of the form keywords, checked by the grammar
            tuple(patterns), body, bound, variables, self._text, self._pos(head),
        )

    # -- patterns -----------------------------------------------------------------------
    def _pattern(self) -> n.Pattern:
        start = self._peek()
        atoms = self._conjunct()
        while self._at("and"):
            self._next()
            atoms.extend(self._conjunct())
        return n.Pattern(tuple(atoms), self._pos(start))

    def _conjunct(self) -> list[n.Atom]:
        if self._at("("):
            self._next()
            self._enter()
            inner = self._pattern()
            self._depth -= 1
            self._expect(")")
            return list(inner.atoms)
        return [self._atom()]

    # -- temporal bodies ----------------------------------------------------------------
    def _body(self) -> n.Body:
        start = self._peek()
        parts = [self._conj()]
        while self._at("or"):
            self._next()
            parts.append(self._conj())
        return parts[0] if len(parts) == 1 else n.Or(tuple(parts), self._pos(start))

    def _conj(self) -> n.Body:
        start = self._peek()
        parts = [self._unary()]
        while self._at("and"):
            self._next()
            part = self._unary()
            if isinstance(part, n.Pattern) and isinstance(parts[-1], n.Pattern):
                # Adjacent atoms form one pattern, so a leaf keeps its action condition.
                parts[-1] = n.Pattern(parts[-1].atoms + part.atoms, parts[-1].pos)
            else:
                parts.append(part)
        return parts[0] if len(parts) == 1 else n.And(tuple(parts), self._pos(start))

    def _unary(self) -> n.Body:
        self._enter()
        try:
            return self._unary_inner()
        finally:
            self._depth -= 1

    def _unary_inner(self) -> n.Body:
        token = self._peek()
        pos = self._pos(token)
        if self._at("not"):
            self._next()
            return n.Not(self._unary(), pos)
        if self._at("once") and self._peek(1).text in ("(", "["):
            self._next()
            bound = self._bound() if self._at("[") else None
            return n.Once(self._parenthesised(), bound, pos)
        if self._at("eventually") and self._peek(1).text == "(":
            self._next()
            return n.Eventually(self._parenthesised(), pos)
        if self._at("("):
            return self._parenthesised()
        return n.Pattern((self._atom(),), pos)

    def _parenthesised(self) -> n.Body:
        self._expect("(")
        body = self._body()
        self._expect(")")
        return body

    # -- atoms --------------------------------------------------------------------------
    def _atom(self) -> n.Atom:
        subject = self._next()
        if subject.kind != "ident" or subject.text in _RESERVED:
            self._fail("a condition (action, status, output, taint or an argument name)", subject)
        pos = self._pos(subject)
        if subject.text == "action":
            return self._action(pos)
        if subject.text == "status":
            return self._status(pos)
        if subject.text == "output":
            return self._output(pos)
        if subject.text == "taint":
            return self._taint(pos)
        return self._argument(self._links(subject.text), pos)

    def _links(self, name: str) -> str:
        """``links(ARG)`` (the identifiers inside ARG) as one subject name, or ``name``."""
        if name != "links" or not self._at("("):
            return name
        self._next()
        inner = self._next()
        if inner.kind != "ident" or inner.text in _RESERVED or inner.text in _FIELDS:
            self._fail("an argument name inside links(…)", inner)
        self._expect(")")
        return f"links({inner.text})"

    def _negated_in(self) -> bool | None:
        """``in`` → False, ``not in`` → True, anything else → None (nothing consumed)."""
        if self._at("in"):
            self._next()
            return False
        if self._at("not") and self._peek(1).text == "in":
            self._i += 2
            return True
        return None

    def _action(self, pos: n.Pos) -> n.Atom:
        negated_in = self._negated_in()
        if negated_in is not None:
            return n.ActionIn(frozenset(self._set(self._name)), negated_in, pos)
        op = self._next()
        if op.text not in ("=", "!="):
            self._fail("'=', '!=', 'in' or 'not in' after action", op)
        return n.ActionIn(frozenset({self._name()}), op.text == "!=", pos)

    def _status(self, pos: n.Pos) -> n.Atom:
        op = self._next()
        if op.text not in ("=", "!="):
            self._fail("'=' or '!=' after status", op)
        value = self._next()
        if value.kind != "ident" or value.text not in _STATUSES:
            self._fail("ok, error or denied", value)
        return n.StatusIs(value.text, op.text == "!=", pos)

    def _output(self, pos: n.Pos) -> n.Atom:
        origin = self._from(None, pos)
        if origin is not None:
            return origin
        op = self._next()
        if op.text in _MATCH:
            return n.TextMatch(None, self._string(), op.text.startswith("!"), pos,
                               op.text.endswith("*"))
        if op.text == "contains":
            return n.VarContains(None, self._var(), pos)
        self._fail("'~', '!~', '~*', '!~*', 'from' or 'contains' after output", op)

    def _from(self, arg: str | None, pos: n.Pos) -> n.FromSource | None:
        """``from S`` / ``not from {S, …}`` after ARG or output, or None (nothing consumed)."""
        negated = self._at("not") and self._peek(1).text == "from"
        if not (negated or self._at("from")):
            return None
        self._i += 2 if negated else 1
        names = self._set(self._name) if self._at("{") else [self._name()]
        return n.FromSource(arg, frozenset(names), negated, pos)

    def _taint(self, pos: n.Pos) -> n.Atom:
        if not self._at("has"):
            self._fail("'has' after taint")
        self._next()
        if self._at("{"):
            return n.TaintHas(frozenset(self._set(self._name)), pos)
        return n.TaintHas(frozenset({self._name()}), pos)

    def _argument(self, arg: str, pos: n.Pos) -> n.Atom:
        if arg in _QUANTIFIERS and self._peek().kind == "ident" \
                and self._peek().text not in _RESERVED:
            return self._each(arg, pos)
        origin = self._from(arg, pos)
        if origin is not None:
            return origin
        negated_in = self._negated_in()
        if negated_in is not None:
            return n.ArgIn(arg, tuple(self._set(self._literal)), negated_in, pos)
        op = self._next()
        if op.text in ("=", "contains") and self._peek().kind == "var" \
                and arg.startswith("links("):
            self._fail(f"a literal: {arg} is not compared with variables", self._peek())
        if op.text == "=" and self._peek().kind == "var":
            return n.VarEq(arg, self._var(), pos)
        if op.text in ("=", "!="):
            return n.ArgIn(arg, (self._literal(),), op.text == "!=", pos)
        if op.text in _MATCH:
            return n.TextMatch(arg, self._string(), op.text.startswith("!"), pos,
                               op.text.endswith("*"))
        if op.text in _COMPARE and op.kind == "punct":
            value = self._number()
            return n.Compare(arg, op.text, value, pos)  # type: ignore[arg-type]  # op.text is in _COMPARE
        if op.text == "contains":
            return n.VarContains(arg, self._var(), pos)
        self._fail(
            f"an operator after {arg} (=, !=, in, not in, ~, !~, ~*, !~*, >, >=, <, <=, "
            f"from, not from, contains)", op
        )

    def _each(self, quantifier: str, pos: n.Pos) -> n.Atom:
        """``any ARG …`` / ``all ARG …``: the condition after ARG, on each element."""
        subject = self._next()
        if subject.text in _FIELDS:
            self._fail(f"an argument name after {quantifier}", subject)
        inner = self._argument(self._links(subject.text), self._pos(subject))
        if not isinstance(inner, n.ArgIn | n.TextMatch | n.Compare):
            self._fail(f"=, !=, in, not in, ~, !~, ~*, !~* or a comparison after "
                       f"{quantifier} {subject.text}", subject)
        return n.Each(quantifier, inner, pos)  # type: ignore[arg-type]  # one of _QUANTIFIERS

    # -- leaves -------------------------------------------------------------------------
    def _set(self, read: Callable[[], _T]) -> list[_T]:
        self._expect("{")
        values = [read()]
        while self._at(","):
            self._next()
            values.append(read())
        self._expect("}")
        return values

    def _name(self) -> str:
        token = self._next()
        # a quoted name may be anything, a word of the language included (``action = "in"``)
        if token.kind not in ("ident", "string") or (token.kind == "ident"
                                                     and token.text in _RESERVED):
            self._fail("a name", token)
        return token.text

    def _string(self) -> str:
        token = self._next()
        if token.kind != "string":
            self._fail("a quoted pattern", token)
        return token.text

    def _var(self) -> str:
        token = self._next()
        if token.kind != "var":
            self._fail("a variable ($name)", token)
        return token.text[1:]

    def _number(self) -> int | float:
        token = self._next()
        if token.kind != "number":
            self._fail("a number", token)
        return _number_value(token.text)

    def _literal(self) -> n.Literal_:
        token = self._next()
        if token.kind == "string":
            return token.text
        if token.kind == "number":
            return _number_value(token.text)
        if token.kind == "var":
            self._fail("a quoted string or a number (variables only with '=')", token)
        self._fail("a quoted string or a number", token)


def _number_value(text: str) -> int | float:
    if any(c in text for c in ".eE"):
        return float(text)
    return int(text)


def _variables(patterns: list[n.Pattern], body: n.Body | None) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for pattern in patterns:
        for atom in pattern.atoms:
            if isinstance(atom, n.VarEq | n.VarContains):
                seen.setdefault(atom.var, None)
    del body  # variables in a body are found (and refused) by the scope check
    return tuple(seen)
