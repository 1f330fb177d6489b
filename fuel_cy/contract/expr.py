"""A whitelist grammar for shape constraints and cost formulas.

Contract text never reaches ``eval``: it is tokenized, parsed into a tiny AST and either walked
(``evaluate``) or re-emitted as source from known-safe pieces (``to_source``).  The grammar::

    formula    := expr
    expr       := term (("+" | "-") term)*
    term       := unary (("*" | "/") unary)*
    unary      := "-" unary | atom
    atom       := NUMBER | dimref | SYMBOL | call | "(" expr ")"
    dimref     := [INPUT "."] "dim" "[" INT "]"
    call       := ("sqrt" | "max") "(" expr ("," expr)* ")"   # param defaults only
    constraint := "same_as" "=" INPUT
                | "divisible" "(" expr "," expr ")"
                | "broadcasts_to" "(" expr ("," expr)* ")"   # each dim is 1 or the expr at its axis
                | [expr] ("==" | "=") expr (("==" | "=") expr)*   # a leading "==" means "self"

``str(parse(x))`` is a normalized spelling that parses back to an equal AST.  Calls of the
whitelisted FUNCTIONS are accepted only where the caller asks (a param's computed default, e.g.
``1 / sqrt(max(d, 1))``); shape constraints and cost formulas have none.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Union

IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TOKEN_RE = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>==|[-+*/()\[\],.=]))")
MAX_FORMULA_CHARS = 400
MAX_NUMBER_DIGITS = 24


class ExprError(ValueError):
    """A formula or constraint that the grammar rejects (never executed)."""


@dataclass(frozen=True)
class Num:
    value: Union[int, float]
    text: str


@dataclass(frozen=True)
class Sym:
    name: str


@dataclass(frozen=True)
class DimRef:
    """``tensor.dim[i]``; ``tensor`` is None for the input that owns the constraint."""

    tensor: Union[str, None]
    index: int


@dataclass(frozen=True)
class BinOp:
    op: str
    left: "Node"
    right: "Node"


@dataclass(frozen=True)
class Neg:
    operand: "Node"


@dataclass(frozen=True)
class SelfRef:
    """The value the constraint is attached to (an op param)."""


@dataclass(frozen=True)
class Call:
    """``fn(args)`` for a name in FUNCTIONS (parsed only where calls are allowed)."""

    fn: str
    args: tuple["Node", ...]


Node = Union[Num, Sym, DimRef, BinOp, Neg, SelfRef, Call]

FUNCTIONS: Mapping[str, tuple[int, Callable[..., Union[int, float]]]] = {
    "sqrt": (1, math.sqrt),
    "max": (2, max),
}
"""The functions a param default may call: name -> (arity, what it computes)."""

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


def node_str(node: Node, parent_prec: int = 0, right_side: bool = False) -> str:
    if isinstance(node, Num):
        return node.text
    if isinstance(node, Sym):
        return node.name
    if isinstance(node, DimRef):
        return f"{node.tensor}.dim[{node.index}]" if node.tensor else f"dim[{node.index}]"
    if isinstance(node, SelfRef):
        return ""
    if isinstance(node, Call):
        return f"{node.fn}({', '.join(node_str(a) for a in node.args)})"
    if isinstance(node, Neg):
        return "-" + node_str(node.operand, 3)
    prec = _PREC[node.op]
    text = f"{node_str(node.left, prec)} {node.op} {node_str(node.right, prec, True)}"
    # right operands of - and / need parentheses at equal precedence to keep the meaning
    if prec < parent_prec or (right_side and prec == parent_prec):
        return f"({text})"
    return text


def walk(node: Node):
    yield node
    if isinstance(node, BinOp):
        yield from walk(node.left)
        yield from walk(node.right)
    elif isinstance(node, Neg):
        yield from walk(node.operand)
    elif isinstance(node, Call):
        for arg in node.args:
            yield from walk(arg)


def evaluate(node: Node, env: Callable[[Node], Union[int, float]]) -> Union[int, float]:
    """Walk the AST; ``env`` resolves Sym / DimRef / SelfRef leaves."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, (Sym, DimRef, SelfRef)):
        return env(node)
    if isinstance(node, Neg):
        return -evaluate(node.operand, env)
    if isinstance(node, Call):
        return FUNCTIONS[node.fn][1](*(evaluate(a, env) for a in node.args))
    left, right = evaluate(node.left, env), evaluate(node.right, env)
    if node.op == "+":
        return left + right
    if node.op == "-":
        return left - right
    if node.op == "*":
        return left * right
    if right == 0:
        raise ZeroDivisionError("division by zero in contract formula")
    return left / right


def to_source(node: Node, leaf: Callable[[Node], str], function: Callable[[str], str] = str) -> str:
    """Re-emit as a Python/Cython expression; leaves come from ``leaf`` and the names of called
    functions from ``function`` (trusted strings)."""
    if isinstance(node, Num):
        return repr(node.value)
    if isinstance(node, (Sym, DimRef, SelfRef)):
        return leaf(node)
    if isinstance(node, Call):
        return f"{function(node.fn)}({', '.join(to_source(a, leaf, function) for a in node.args)})"
    if isinstance(node, Neg):
        return f"(-{to_source(node.operand, leaf, function)})"
    return f"({to_source(node.left, leaf, function)} {node.op} {to_source(node.right, leaf, function)})"


class _Parser:
    def __init__(self, text: str, calls: bool = False):
        self.calls = calls  # FUNCTIONS may be called
        if not isinstance(text, str):
            raise ExprError(f"expected a string, got {type(text).__name__}")
        if len(text) > MAX_FORMULA_CHARS:
            raise ExprError(f"longer than {MAX_FORMULA_CHARS} characters")
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        stripped = text.rstrip()
        while pos < len(stripped):
            m = _TOKEN_RE.match(stripped, pos)
            if not m or m.end() == pos:
                raise ExprError(f"unexpected character {stripped[pos:].lstrip()[:1]!r} in {text!r}")
            kind = m.lastgroup or "op"
            value = m.group(kind)
            if kind == "num" and len(value) > MAX_NUMBER_DIGITS:
                raise ExprError(f"number literal too long in {text!r}")
            self.tokens.append((kind, value))
            pos = m.end()
        self.i = 0

    def peek(self, offset: int = 0) -> tuple[str, str]:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else ("end", "")

    def take(self, value: Union[str, None] = None, kind: Union[str, None] = None) -> str:
        k, v = self.peek()
        if (value is not None and v != value) or (kind is not None and k != kind) or k == "end":
            want = value or kind
            got = v or "end of text"
            raise ExprError(f"expected {want!r} but found {got!r} in {self.text!r}")
        self.i += 1
        return v

    def done(self) -> None:
        if self.peek()[0] != "end":
            raise ExprError(f"unexpected {self.peek()[1]!r} in {self.text!r}")

    def expr(self) -> Node:
        node = self.term()
        while self.peek()[1] in ("+", "-") and self.peek()[0] == "op":
            op = self.take()
            node = BinOp(op, node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek()[1] in ("*", "/") and self.peek()[0] == "op":
            op = self.take()
            node = BinOp(op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.peek() == ("op", "-"):
            self.take()
            return Neg(self.unary())
        return self.atom()

    def dim_index(self) -> int:
        self.take("[")
        idx = self.take(kind="num")
        if "." in idx:
            raise ExprError(f"dim index must be an integer in {self.text!r}")
        self.take("]")
        return int(idx)

    def atom(self) -> Node:
        kind, value = self.peek()
        if kind == "num":
            self.take()
            return Num(float(value) if "." in value else int(value), value)
        if value == "(":
            self.take()
            node = self.expr()
            self.take(")")
            return node
        if kind == "ident":
            self.take()
            if value == "dim" and self.peek()[1] == "[":
                return DimRef(None, self.dim_index())
            if self.peek()[1] == ".":
                self.take(".")
                attr = self.take(kind="ident")
                if attr != "dim":
                    raise ExprError(f"only '.dim[i]' attribute access is allowed, found '.{attr}' in {self.text!r}")
                return DimRef(value, self.dim_index())
            if self.peek()[1] == "(":
                if not self.calls:
                    raise ExprError(f"calls are not allowed in formulas ({value!r}) in {self.text!r}")
                return self.call(value)
            if value.startswith("__"):
                raise ExprError(f"dunder names are not allowed ({value!r})")
            return Sym(value)
        raise ExprError(f"unexpected {value or 'end of text'!r} in {self.text!r}")

    def arguments(self) -> list[Node]:
        """`( expr ("," expr)* )`"""
        self.take("(")
        args = [self.expr()]
        while self.peek()[1] == ",":
            self.take(",")
            args.append(self.expr())
        self.take(")")
        return args

    def call(self, name: str) -> Node:
        if name not in FUNCTIONS:
            raise ExprError(f"unknown function {name!r} (known: {', '.join(FUNCTIONS)}) in {self.text!r}")
        args = self.arguments()
        arity = FUNCTIONS[name][0]
        if len(args) != arity:
            raise ExprError(f"{name}() takes {arity} argument{'s' if arity > 1 else ''}, found {len(args)} in {self.text!r}")
        return Call(name, tuple(args))


@dataclass(frozen=True)
class Formula:
    """A parsed cost/extent formula. ``str()`` is the normalized spelling."""

    ast: Node

    @classmethod
    def parse(cls, text: Union[str, int, float], calls: bool = False) -> "Formula":
        """``calls``: accept calls of FUNCTIONS (a param's computed default)."""
        if isinstance(text, bool):
            raise ExprError("a formula cannot be a boolean")
        if isinstance(text, (int, float)):
            text = str(text)
        p = _Parser(text, calls)
        if not p.tokens:
            raise ExprError("empty formula")
        node = p.expr()
        p.done()
        return cls(node)

    def __str__(self) -> str:
        return node_str(self.ast)

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(n.name for n in walk(self.ast) if isinstance(n, Sym))

    @property
    def dimrefs(self) -> tuple[DimRef, ...]:
        return tuple(n for n in walk(self.ast) if isinstance(n, DimRef))

    def evaluate(self, symbols: Mapping[str, Union[int, float]], dims: Mapping[str, tuple] = {}) -> Union[int, float]:
        def env(node: Node) -> Union[int, float]:
            if isinstance(node, Sym):
                if node.name not in symbols:
                    raise KeyError(f"no value for symbol {node.name!r}")
                return symbols[node.name]
            if isinstance(node, DimRef):
                return dims[node.tensor or ""][node.index]
            raise KeyError("self reference outside a constraint")

        return evaluate(self.ast, env)


@dataclass(frozen=True)
class SameAs:
    other: str

    def __str__(self) -> str:
        return f"same_as={self.other}"


@dataclass(frozen=True)
class Divisible:
    numerator: Node
    denominator: Node

    def __str__(self) -> str:
        return f"divisible({node_str(self.numerator)}, {node_str(self.denominator)})"


@dataclass(frozen=True)
class Equal:
    terms: tuple[Node, ...]

    def __str__(self) -> str:
        parts = [node_str(t) for t in self.terms]
        if isinstance(self.terms[0], SelfRef):
            return "== " + " == ".join(parts[1:])
        return " == ".join(parts)


@dataclass(frozen=True)
class Broadcasts:
    """The owner's dims, axis by axis, are each 1 or the target at that axis (numpy's and torch's
    broadcasting of an array to a shape of the same rank)."""

    targets: tuple[Node, ...]

    def __str__(self) -> str:
        return f"broadcasts_to({', '.join(node_str(t) for t in self.targets)})"


Constraint = Union[SameAs, Divisible, Equal, Broadcasts]


def parse_constraint(text: str) -> Constraint:
    if not isinstance(text, str):
        raise ExprError(f"expected a string, got {type(text).__name__}")
    p = _Parser(text)
    if not p.tokens:
        raise ExprError("empty constraint")
    if p.peek() == ("ident", "same_as") and p.peek(1)[1] == "=":
        p.take()
        p.take("=")
        other = p.take(kind="ident")
        p.done()
        return SameAs(other)
    if p.peek() == ("ident", "divisible") and p.peek(1)[1] == "(":
        p.take()
        p.take("(")
        a = p.expr()
        p.take(",")
        b = p.expr()
        p.take(")")
        p.done()
        return Divisible(a, b)
    if p.peek() == ("ident", "broadcasts_to") and p.peek(1)[1] == "(":
        p.take()
        targets = p.arguments()
        p.done()
        return Broadcasts(tuple(targets))
    terms: list[Node] = []
    if p.peek()[1] in ("==", "="):
        terms.append(SelfRef())
    else:
        terms.append(p.expr())
    while p.peek()[1] in ("==", "="):
        p.take()
        terms.append(p.expr())
    p.done()
    if len(terms) < 2:
        raise ExprError(f"expected 'same_as=', 'divisible(a, b)', 'broadcasts_to(a, ...)' or an equality, found {text!r}")
    return Equal(tuple(terms))


def constraint_nodes(c: Constraint) -> tuple[Node, ...]:
    if isinstance(c, Divisible):
        return (c.numerator, c.denominator)
    if isinstance(c, Equal):
        return c.terms
    if isinstance(c, Broadcasts):
        return c.targets
    return ()
