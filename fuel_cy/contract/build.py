"""Turn loaded YAML (with lines) into the frozen model, torchgen-style.

Every reader pops the keys it knows and reports leftovers; every problem is collected with its
file, line and key path so ``fuel-cy validate`` can print all of them at once.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Optional

from . import expr
from .errors import Collector, suggest
from .model import (
    Caps, Cost, Default, Fdx, FastPath, Gather, InputSpec, Kernel, Location, Memory, OpParams, Output,
    ParamField, Precision, Returns,
)
from .recover import is_indented, reindent, split_comment
from ..dtypes import DTYPES
from .schema import BLOCK, COMPUTE_MODES, ELEMENT_TYPES, LAYOUT_KEYS, LAYOUT_POLICIES, MASK_ALIGNMENTS, PARAM_KINDS
from .yamlload import LDict, YamlProblem, load

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
RUST_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*\Z")
RULE = re.compile(r"(passthrough|same_as|from_params)\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\Z")
DIMS_RULE = re.compile(r"dims\((.+)\)\Z")   # one extent per axis: dims(q.dim[1], q.dim[0])
_DIMS_COMMENT = re.compile(r"\[([^\]]*)\]")
_FUSED_ID_COMMENT = re.compile(r"FusedOpId\((\d+)\)")
_OPTION = re.compile(r"Option<\s*([A-Za-z0-9_]+)\s*>\Z")
_KERNEL_LINE = re.compile(r"kernel:[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*(?:#.*)?\Z")
MISSING = object()
_ABSENT = object()  # an optional key that is not there (where None is a value: `default: ~`)


class Reader:
    """A view of one YAML mapping that pops known keys and reports leftovers."""

    def __init__(self, data: Any, keypath: str, ctx: "BlockContext", line: int):
        self.ctx = ctx
        self.keypath = keypath
        self.line = getattr(data, "line", line) + ctx.offset if isinstance(data, LDict) else line
        self.ok = isinstance(data, dict)
        if not self.ok:
            ctx.add(line, keypath, f"expected a mapping, found {_show(data)}")
            data = {}
        self.data: dict = dict(data)
        self.lines: dict = getattr(data, "key_lines", {})
        self.known: list[str] = []  # keys asked for, to name the likely one behind an unknown key
        self.missing: list[str] = []  # required keys not found; reported by finish()
        self.present = 0  # known keys found

    def line_of(self, key: str) -> int:
        return self.lines[key] + self.ctx.offset if key in self.lines else self.line

    def path(self, key: str) -> str:
        return f"{self.keypath}.{key}" if self.keypath else key

    def error(self, key: str, message: str) -> None:
        self.ctx.add(self.line_of(key), self.path(key), message)

    def _absent(self, key: str, required: bool) -> None:
        """Note a key that is not there.  A missing required key is reported by finish(), where
        a misspelling of it among the unknown keys turns the two complaints into one."""
        self.known.append(key)
        # a non-mapping, or a line that could not be read as this key, was reported already
        if required and self.ok and self.path(key) not in self.ctx.failed:
            self.missing.append(key)
            self.ctx.fail(self.path(key))

    def take(self, key: str, check: Callable[[Any], bool], expected: str, default: Any = MISSING) -> Any:
        line = self.line_of(key)
        if key not in self.data:
            self._absent(key, default is MISSING)
            return None if default is MISSING else default
        self.known.append(key)
        self.present += 1
        value = self.data.pop(key)
        if not check(value):
            self.ctx.add(line, self.path(key), f"expected {expected}, found {_show(value)}")
            return None if default is MISSING else default
        return value

    def string(self, key: str, default: Any = MISSING) -> Any:
        return self.take(key, lambda v: isinstance(v, str) and v != "", "a non-empty string", default)

    def ident(self, key: str, default: Any = MISSING) -> Any:
        return self.take(key, lambda v: isinstance(v, str) and bool(IDENT.match(v)),
                         "an identifier matching [A-Za-z_][A-Za-z0-9_]*", default)

    def boolean(self, key: str, default: Any = MISSING) -> Any:
        return self.take(key, lambda v: isinstance(v, bool), "true or false", default)

    def integer(self, key: str, default: Any = MISSING) -> Any:
        return self.take(key, lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                         "a non-negative integer", default)

    def number_or_null(self, key: str) -> Any:
        return self.take(key, lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
                         "a number or ~", None)

    def sub(self, key: str, default: Any = MISSING) -> Optional["Reader"]:
        if key not in self.data:
            self._absent(key, default is MISSING)
            return None
        self.known.append(key)
        self.present += 1
        return Reader(self.data.pop(key), self.path(key), self.ctx, self.line_of(key))

    def items(self, key: str, required: bool = True) -> list["Reader"]:
        if key not in self.data:
            self._absent(key, required)
            return []
        self.known.append(key)
        self.present += 1
        value = self.data.pop(key)
        line = self.line_of(key)
        if not isinstance(value, list):
            self.ctx.add(line, self.path(key), f"expected a list, found {_show(value)}")
            return []
        lines = getattr(value, "item_lines", [line - self.ctx.offset] * len(value))
        return [Reader(v, f"{self.path(key)}[{i}]", self.ctx, lines[i] + self.ctx.offset)
                for i, v in enumerate(value)]

    def finish(self) -> None:
        """Report unknown keys, then missing required ones not explained by a misspelling."""
        if self.data and not self.present:
            # none of its own keys, only strangers: a misplaced mapping, not one missing keys
            self.missing.clear()
        for key in self.data:
            guess = suggest(key, self.known)
            if guess in self.missing:
                self.missing.remove(guess)  # one cause (a typo), one message
            hint = f"did you mean {guess!r}?" if guess else f"known keys: {', '.join(self.known)}"
            self.ctx.add(self.line_of(key), self.path(key), f"unknown key {key!r} ({hint})")
        for key in self.missing:
            self.ctx.add(self.line, self.path(key), f"missing required key {key!r}")
        self.data.clear()
        self.missing.clear()


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


class BlockContext:
    def __init__(self, path: str, offset: int, problems: Collector, comments: dict[int, str]):
        self.path = path
        self.offset = offset  # absolute line = yaml line + offset
        self.problems = problems
        self.comments = comments  # absolute line -> comment text
        # key paths whose value drew a problem (or could not be read): the checks that would
        # reason from such a value are skipped, since their complaint would follow from the first
        self.failed: set[str] = set()

    def add(self, line: int, keypath: str, message: str) -> None:
        self.failed.add(keypath)
        self.problems.add(self.path, line, keypath, message)

    def fail(self, keypath: str) -> None:
        """Mark a value untrustworthy without a message (its cause is reported elsewhere)."""
        self.failed.add(keypath)


def canonical_lines(lines: list[str]) -> list[str]:
    """The canonical (indented) spelling of an fkc block, comments kept."""
    flat = [line.strip() for line in lines]
    return reindent(flat, BLOCK)


def load_block(lines: list[str], first_line: int, path: str, problems: Collector,
               root: str = "", covered: Optional[set[str]] = None) -> tuple[Any, dict[int, str], str]:
    """Load an fkc block (flattened or indented). Returns (data, comments, canonical text).

    ``root`` (the section name) starts the key paths of YAML problems when the block's own
    ``kernel:`` line cannot be read; ``covered`` receives the key paths that a reported line
    made unreadable (for BlockContext.failed)."""
    comments = {first_line + i: split_comment(raw.strip())[1] for i, raw in enumerate(lines)}
    root = kernel_name(lines) or root

    def report(exc: YamlProblem) -> None:
        problems.add(path, first_line + exc.line - 1, exc.keypath, exc.message)

    try:
        if is_indented(list(lines)):
            data = load("\n".join(lines), root)
            try:
                canon = "\n".join(canonical_lines(list(lines)))
            except YamlProblem:
                canon = "\n".join(lines)  # the model builder reports the real problem, with its key path
        else:
            # recover past unplaceable lines, so one run reports the block's other errors too
            found: list[YamlProblem] = []
            canon = "\n".join(reindent([line.strip() for line in lines], BLOCK, root, found))
            for exc in found:
                report(exc)
                if covered is not None:
                    covered.update(exc.covers)
            data = load(canon, root)
    except YamlProblem as exc:
        report(exc)
        return None, comments, ""
    return data, comments, canon


def kernel_name(lines: Iterable[str]) -> Optional[str]:
    """The identifier on the block's top-level ``kernel:`` line, read before the YAML parses."""
    for line in lines:
        m = _KERNEL_LINE.match(line.rstrip())
        if m:
            return m.group(1)
    return None


def build_kernel(data: Any, ctx: BlockContext, title: str, description: str, canon: str,
                 section: str = "") -> Optional[Kernel]:
    top = Reader(data, "", ctx, ctx.offset + 1)
    if not top.ok:
        return None
    # an unreadable name was reported; the section's name keeps the key paths (and the
    # section-name check) from repeating that complaint
    name = top.ident("kernel") or section or "<unnamed>"
    top.keypath = name
    fused_op = top.ident("fused_op") or ""
    fused_id = top.integer("fused_op_id", None)
    if fused_id is None:
        m = _FUSED_ID_COMMENT.search(ctx.comments.get(top.line_of("fused_op"), ""))
        fused_id = int(m.group(1)) if m else None
    blurb = top.string("blurb") or ""
    backend = top.ident("backend") or ""
    kernel_source = top.string("kernel_source") or ""
    entry_point = top.take("entry_point", lambda v: isinstance(v, str) and bool(RUST_PATH.match(v)),
                           "a path like crate::module::function") or ""
    revision = top.take("kernel_revision_hash", lambda v: isinstance(v, str) and bool(re.fullmatch(r"auto|[0-9a-zA-Z:_\-]+", v)),
                        "'auto' or a hash string") or "auto"

    inputs = _inputs(top, ctx)
    op_params = _op_params(top, ctx)
    returns = _returns(top)
    caps = _caps(top)
    cost = _cost(top)
    precision = _precision(top)
    determinism = top.ident("determinism") or ""
    alignment = top.take("mask_alignment", lambda v: v in MASK_ALIGNMENTS, f"one of {', '.join(MASK_ALIGNMENTS)}",
                         "top_left")
    top.finish()
    return Kernel(
        name=name, title=title, description=description, fused_op=fused_op, fused_op_id=fused_id,
        blurb=blurb, backend=backend, kernel_source=kernel_source, entry_point=entry_point,
        kernel_revision_hash=revision, inputs=inputs, op_params=op_params, returns=returns,
        caps=caps, cost=cost, precision=precision, determinism=determinism, mask_alignment=alignment,
        block_text=canon,
        loc=Location(ctx.path, top.line),
    )


def _parse_constraint(r: Reader, key: str) -> tuple[Optional[expr.Constraint], Optional[str]]:
    text = r.string(key, None)
    if text is None:
        return None, None
    try:
        return expr.parse_constraint(text), text
    except expr.ExprError as exc:
        r.error(key, f"invalid constraint: {exc}")
        return None, text


def _inputs(top: Reader, ctx: BlockContext) -> tuple[InputSpec, ...]:
    accept = top.sub("accept")
    if accept is None:
        return ()
    specs: list[InputSpec] = []
    for r in accept.items("inputs"):
        name = r.ident("name") or "<unnamed>"
        dtypes = _dtypes(r)
        layout = _layout(r)
        rank: Optional[int] = r.integer("rank")  # None: missing or malformed, already reported
        rank_line = r.line_of("rank")
        explicit = r.take("dims", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                          "a list of dim names", None)
        constraint, ctext = _parse_constraint(r, "shape_constraint")
        optional = r.boolean("optional", False)
        element_type = r.take("element_type", lambda v: v in ELEMENT_TYPES, f"one of {', '.join(ELEMENT_TYPES)}", "T")
        min_rank = r.take("min_rank", lambda v: type(v) is int and 1 <= v <= (rank if rank is not None else v),
                          "an integer from 1 to the input's rank", None)
        fdx = _fdx(r.sub("fdx", None))
        r.finish()
        dims = _dims(r, explicit, ctx.comments.get(rank_line, ""), rank, rank_line, constraint, specs)
        specs.append(InputSpec(
            name=name, dtypes=dtypes, layout=layout, rank=len(dims) if rank is None else rank, dims=dims,
            shape_constraint=constraint, shape_constraint_text=ctext, optional=bool(optional),
            fdx=fdx, loc=Location(ctx.path, r.line), element_type=element_type or "T", min_rank=min_rank,
        ))
    accept.finish()
    return tuple(specs)


def _dtypes(r: Reader) -> tuple[str, ...]:
    """The input's dtypes.  An unknown one is reported once and left out, so no later check
    (float/integer mixing, the shared element type T) reasons about it."""
    listed = r.take("dtypes", lambda v: isinstance(v, list) and len(v) > 0, "a non-empty list of dtypes") or []
    known: list[str] = []
    for d in listed:
        if isinstance(d, str) and d in DTYPES:
            known.append(d)
            continue
        guess = suggest(d, DTYPES)
        hint = f" (did you mean {guess!r}?)" if guess else ""
        r.error("dtypes", f"dtype {d!r} is not in the vocabulary {sorted(DTYPES)}{hint}")
    return tuple(known)


def _layout(r: Reader) -> tuple[tuple[str, str], ...]:
    sub = r.sub("layout", None)
    if sub is None:
        return ()
    sub.known.extend(LAYOUT_KEYS)
    out = []
    for key in list(sub.data):
        if key not in LAYOUT_KEYS:
            continue
        value = sub.take(key, lambda v: v in LAYOUT_POLICIES, f"one of {LAYOUT_POLICIES}")
        if value:
            out.append((key, value))
    sub.finish()
    return tuple(out)


def _dims(r: Reader, explicit: Any, comment: str, rank: Optional[int], rank_line: int,
          constraint: Optional[expr.Constraint], earlier: list[InputSpec]) -> tuple[str, ...]:
    """The input's dim names: explicit, from the rank line's ``# [..]`` comment, or a same_as
    input's.  ``rank`` is None when it was reported unreadable: then the count is not checked."""
    dims: Optional[list[str]] = None
    if explicit is not None:
        dims = list(explicit)
    else:
        m = _DIMS_COMMENT.search(comment)
        if m:
            dims = [d.strip() for d in m.group(1).split(",") if d.strip()]
        elif isinstance(constraint, expr.SameAs):
            other = next((s for s in earlier if s.name == constraint.other), None)
            if other is not None and other.dims:
                dims = list(other.dims)
    if dims is None:
        if rank is None:  # neither a rank nor names: the dim symbols are unknown, not wrong
            r.ctx.fail(r.path("dims"))
            return ()
        name = r.data.get("name", "x")
        return tuple(f"{name}_dim{i}" for i in range(rank))
    for d in dims:
        if not IDENT.match(d):
            r.ctx.add(rank_line, r.path("dims"), f"dim name {d!r} is not an identifier")
    if rank is not None and len(dims) != rank:
        r.ctx.add(rank_line, r.path("dims"), f"{len(dims)} dim names {dims} for rank {rank}")
    return tuple(dims)


def _fdx(r: Optional[Reader]) -> Optional[Fdx]:
    if r is None:
        return None
    gather = None
    g = r.sub("gather", None)
    if g is not None:
        gather = Gather(g.ident("kind") or "", g.ident("block_table") or "", g.ident("context_lens") or "")
        g.finish()
    fdx = Fdx(
        requires_ext=r.boolean("requires_ext", None),
        symbolic_extent=r.ident("symbolic_extent", None),
        extent_kind=r.ident("extent_kind", None),
        gather=gather,
    )
    r.finish()
    return fdx


def _op_params(top: Reader, ctx: BlockContext) -> OpParams:
    r = top.sub("op_params")
    if r is None:
        return OpParams("", ())
    variant = r.ident("variant") or ""
    fields: list[ParamField] = []
    fr = r.sub("fields")
    if fr is not None:
        for key in list(fr.data):
            line = fr.line_of(key)
            if not IDENT.match(str(key)):
                fr.error(key, f"param name {key!r} is not an identifier")
                fr.data.pop(key)
                continue
            f = fr.sub(key)
            assert f is not None
            kind = f.string("kind") or "f32"
            m = _OPTION.match(kind)
            base = m.group(1) if m else kind
            if base not in PARAM_KINDS:
                f.error("kind", f"param kind {kind!r} is not one of {PARAM_KINDS} (optionally Option<...>)")
            note = f.string("note", None)
            constraint, ctext = _parse_constraint(f, "constraint")
            default = None
            value = f.take("default", lambda v: True, "", _ABSENT)
            if value is not _ABSENT:
                default, problem = parse_default(value)
                if problem:
                    f.error("default", problem)
            f.finish()
            fields.append(ParamField(key, kind, base, m is not None, note, constraint, ctext,
                                     Location(ctx.path, line), default))
        fr.finish()
    r.finish()
    return OpParams(variant, tuple(fields))


def parse_default(value: Any) -> tuple[Optional[Default], Optional[str]]:
    """A `default:` value as written -> (Default, None), or (None, what is wrong with it).
    A number, true/false or ~ is a literal; a string is a formula over the inputs' dims (which
    may call sqrt and max), computed when the caller passes None."""
    if value is None or isinstance(value, (bool, int, float)):
        text = "~" if value is None else "true" if value is True else "false" if value is False else str(value)
        return Default(value, text=text), None
    if isinstance(value, str):
        try:
            return Default(formula=expr.Formula.parse(value, calls=True), text=value), None
        except expr.ExprError as exc:
            return None, f"invalid default: {exc}"
    return None, f"expected a number, true/false, ~ or a formula string, found {_show(value)}"


def _returns(top: Reader) -> Returns:
    r = top.sub("return")
    if r is None:
        return Returns("outputs", ())
    kinds = [k for k in ("outputs", "bundle") if k in r.data]
    if len(kinds) != 1:
        r.ctx.add(r.line, r.keypath, "return needs exactly one of 'outputs' or 'bundle'")
    kind = kinds[0] if kinds else "outputs"
    items = []
    for o in r.items(kind, required=bool(kinds)):
        name = o.ident("name") or "<unnamed>"
        rules = []
        shape_dims = None
        for key in ("dtype_rule", "shape_rule"):
            rule = o.string(key) or "passthrough(x)"
            dims_rule = DIMS_RULE.match(rule) if key == "shape_rule" else None
            if key == "dtype_rule" and rule in DTYPES:
                pass   # a fixed dtype
            elif dims_rule is not None:
                try:
                    shape_dims = tuple(expr.Formula.parse(part.strip()) for part in dims_rule.group(1).split(","))
                except expr.ExprError as exc:
                    o.error(key, f"invalid dims(...) rule: {exc}")
                    rule = "same_as(x)"
            elif not RULE.match(rule):
                o.error(key, f"expected passthrough(input), same_as(input), from_params(input)"
                             f"{', a dtype code' if key == 'dtype_rule' else ' or dims(e, ...)'}, found {rule!r}")
                rule = "passthrough(x)"
            rules.append(rule)
        lg = o.ident("layout_guarantee") or "contiguous"
        aliasing = o.ident("aliasing", None)
        when = o.ident("when", None)
        caller_buffer = o.ident("caller_buffer", None)
        o.finish()
        items.append(Output(name, rules[0], rules[1], lg, aliasing, Location(o.ctx.path, o.line), when,
                            shape_dims, caller_buffer))
    r.finish()
    return Returns(kind, tuple(items))


def _caps(top: Reader) -> Caps:
    r = top.sub("caps")
    if r is None:
        return Caps("", (), False, None, None)
    strategy = r.ident("awkward_layout_strategy") or ""
    fast = []
    for f in r.items("fast_paths", required=False):
        fast.append(FastPath(f.string("when") or "", f.string("note", None)))
        f.finish()
    caps = Caps(strategy, tuple(fast), bool(r.boolean("in_place", False)),
                r.integer("alignment_bytes", None), r.integer("access_granularity_bits", None))
    r.finish()
    return caps


def _formula(r: Reader, key: str) -> expr.Formula:
    value = r.take(key, lambda v: isinstance(v, (str, int)) and not isinstance(v, bool),
                   "a formula string or an integer")
    if value is None:
        return expr.Formula(expr.Num(0, "0"))
    try:
        return expr.Formula.parse(value)
    except expr.ExprError as exc:
        r.error(key, f"invalid formula: {exc}")
        return expr.Formula(expr.Num(0, "0"))


def _cost(top: Reader) -> Cost:
    r = top.sub("cost")
    zero = expr.Formula(expr.Num(0, "0"))
    if r is None:
        return Cost("", "", zero, zero, None, Memory(zero, zero, zero))
    provenance = r.ident("provenance") or ""
    cls = r.ident("class") or ""
    flops = _formula(r, "flops")
    bytes_moved = _formula(r, "bytes_moved")
    overhead = r.number_or_null("overhead_ns")
    lines = [("cost.flops", r.line_of("flops")), ("cost.bytes_moved", r.line_of("bytes_moved"))]
    m = r.sub("memory")
    memory = Memory(zero, zero, zero)
    if m is not None:
        lines += [(f"cost.memory.{key}", m.line_of(key)) for key in ("device_bytes", "host_bytes", "disk_bytes")]
        memory = Memory(_formula(m, "device_bytes"), _formula(m, "host_bytes"), _formula(m, "disk_bytes"))
        m.finish()
    r.finish()
    return Cost(provenance, cls, flops, bytes_moved, overhead, memory, tuple(lines))


def _precision(top: Reader) -> Precision:
    r = top.sub("precision")
    if r is None:
        return Precision(False, None, None, None, False, None)
    p = Precision(
        bit_stable_on_same_hardware=bool(r.boolean("bit_stable_on_same_hardware")),
        max_ulp=r.number_or_null("max_ulp"),
        max_relative=r.number_or_null("max_relative"),
        max_absolute=r.number_or_null("max_absolute"),
        audited=bool(r.boolean("audited")),
        notes=r.string("notes", None),
        compute=r.take("compute", lambda v: v in COMPUTE_MODES, f"one of {', '.join(COMPUTE_MODES)}", "T"),
    )
    r.finish()
    return p
