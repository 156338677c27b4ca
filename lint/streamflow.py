"""Stream-flow analysis: an abstract interpreter that follows the current CUDA stream through
a function and reports the unordered cross-stream accesses the rules turn into findings.

State at each program point:
- the current stream (`<current>` outside any `with torch.cuda.stream(...)`, else the source
  text of the stream expression: `s`, `self.copy_stream`);
- per tensor-valued name or attribute: its possible last writes, its reads since then, its uses
  on streams other than the one that allocated it, and the streams passed to `record_stream`;
  host memory (`pin_memory=True`, `device="cpu"`, `.pin_memory()`) is allocated by no kernel;
- ordering facts, kept on each access as the set of tokens ordered after it: stream names
  (`a.wait_stream(b)` adds `a` to every access that has `b`), `event:e` (added by a record
  on a stream the access has) and `*` (a host sync: every later launch is ordered after it;
  also where `e.query()` returned True: the branch it guards, the exit of `while not e.query()`).

Every set is built from the function's own nodes and names, so the lattice is finite: loops
are iterated to a fixpoint and branches join by union of accesses and intersection of facts,
so an ordering made on one branch only does not order the other.

Precision over recall, since a finding must be worth a reader's time:
- a value is a tensor when it comes from a torch op, an operator or method on a tensor, or a
  call given one; parameters count when unannotated or annotated as tensors, and so do names
  copied from them (comprehension targets shadow enclosing names: their own scope). Values of unknown
  origin (parameters, attributes set elsewhere) are taken as ready: no producer, no finding;
- handing a tensor on (`return x`, `y = x`) is not a device read; passing it to unknown code,
  storing it or viewing it makes its lifetime someone else's (no CSL201);
- blocks on a stream that differs between paths are not judged.

Calls are followed through summaries (lint/summaries.py): a called function of the module, a
method called as `self.m()`, or a module-level function of another linted module is run once
on symbolic arguments, with a probe access per stream or event it orders on; the orderings that
hold on every return, and the parameters and `self` attributes it leaves written (or read on
another stream) and on which stream, are replayed at each call site in the caller's streams.
Across methods, `self.x` left written on a side stream by a method that may run first is where
public methods start from (see `_cross_method`).

Only functions (and module bodies) that contain a `with` statement, or call a function of the
module that leaves a tensor written on another stream, are interpreted: without either no second
stream can appear (except through `torch.cuda.set_stream`, checked textually).
Positions are computed only when a module has hazards (lint/positions.py), since even cheap ones cost a codegen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal, TypedDict

import libcst as cst
from libcst.metadata import CodeRange

from csan_lint.lint.interpret import Interpreter, Loop
from csan_lint.lint.model import Span
from csan_lint.lint.names import (
    CURRENT_STREAM,
    DEFAULT_STREAM,
    DEVICE_SYNC,
    EVENT_CONSTRUCTORS,
    GRAPH_CAPTURE,
    SET_STREAM,
    STREAM_CONSTRUCTORS,
    STREAM_CONTEXTS,
    ImportTable,
    dotted_name,
)
from csan_lint.lint.nodes import children
from csan_lint.lint.positions import Positions, positions
from csan_lint.lint.summaries import ANY_OTHER, Effect, PackageIndex, Summary, module_name
from csan_lint.runtime import kinds

CURRENT = "<current>"
"""The stream that is current where the function is entered (the caller's)."""
HOST = "*"
"""Ordering token of a host sync: every later launch on any stream comes after the access."""
UNKNOWN = "?"
"""A name bound to different streams on different paths: blocks on it are not judged."""

_MAX_LOOP_PASSES = 8
_MAX_SUMMARY_DEPTH = 16
"""Calls followed inside a summary: a generated chain of thousands would exhaust the stack."""

_HOST_METHODS = frozenset(
    {
        "size", "dim", "ndimension", "numel", "nelement", "element_size", "stride",
        "storage_offset", "data_ptr", "is_contiguous", "get_device", "is_pinned",
        "register_hook", "requires_grad_", "retain_grad", "untyped_storage", "is_floating_point",
        "is_complex", "__len__",
    }
)  # fmt: skip
"""Tensor methods that read metadata only: no kernel touches the data."""
_HOST_ATTRIBUTES = frozenset(
    {
        "shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "grad_fn", "layout",
        "is_leaf", "names", "is_sparse", "is_quantized", "itemsize", "nbytes",
    }
)  # fmt: skip
_SYNC_METHODS = frozenset({"item", "cpu", "tolist"})
"""Reading a device tensor on the host waits for the current stream."""
_VIEW_METHODS = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "expand", "expand_as", "transpose", "t",
        "permute", "narrow", "select", "squeeze", "unsqueeze", "flatten", "unflatten", "unfold",
        "chunk", "split", "tensor_split", "unbind", "as_strided", "detach", "diagonal", "movedim",
        "swapaxes", "contiguous",
    }
)  # fmt: skip
"""Methods whose result may share storage with the receiver: an alias, not a new tensor."""
_VIEW_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "data", "real", "imag"})
_TENSOR_METHODS = frozenset(
    {
        "to", "cuda", "clone", "float", "half", "bfloat16", "double", "long", "int", "bool",
        "sum", "mean", "matmul", "mm", "bmm", "add", "sub", "mul", "div", "pow", "exp", "abs",
        "max", "min", "softmax", "relu", "new_empty", "new_zeros", "new_ones", "new_full",
        "new_tensor", "pin_memory",
    }
)  # fmt: skip
"""Methods that return a fresh tensor whatever their receiver is."""
_PURE_BUILTINS = frozenset(
    {
        "len", "int", "float", "bool", "str", "bytes", "isinstance", "issubclass", "hasattr",
        "id", "type", "print", "repr", "format", "hash", "abs", "round", "callable", "any", "all",
        "range", "divmod", "ord", "chr",
    }
)  # fmt: skip
"""Builtins that neither return a tensor nor keep their arguments alive."""
_METADATA_BUILTINS = frozenset({"len", "isinstance", "issubclass", "hasattr", "id", "type", "callable"})
"""Builtins that look at a tensor without launching work on it."""
_SYNC_BUILTINS = frozenset({"int", "float", "bool", "str", "repr", "format", "print"})
"""Builtins that copy a tensor argument's value to the host, waiting for the current stream."""
_TENSOR_MODULES = ("torch", "torch.nn.functional", "torch.fft", "torch.linalg", "torch.special")
_HOST_TORCH = frozenset(
    {
        "torch.is_tensor", "torch.numel", "torch.Size", "torch.device", "torch.dtype",
        "torch.get_default_dtype", "torch.is_grad_enabled", "torch.no_grad", "torch.enable_grad",
        "torch.is_floating_point", "torch.is_complex", "torch.finfo", "torch.iinfo",
        "torch.manual_seed", "torch.set_grad_enabled", "torch.inference_mode",
    }
)  # fmt: skip
_STORING_METHODS = frozenset(
    {
        "append", "extend", "insert", "appendleft", "extendleft", "put", "put_nowait", "setdefault",
        "update", "push", "add", "enqueue", "set_result",
    }
)  # fmt: skip
"""Container methods: what is passed to them outlives the call (`Tensor.add` loses no precision
worth having)."""
_COLLECTIVES = frozenset(
    f"torch.distributed.{name}"
    for name in (
        "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
        "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
        "_reduce_scatter_base", "all_to_all", "all_to_all_single", "recv", "irecv", "scatter",
    )
)  # fmt: skip
"""Collectives that write their first argument in place, in order with the current stream."""


_Comprehension = cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


class HazardKind(Enum):
    """Named after the runtime error kind that would confirm the hazard."""

    READ_AFTER_WRITE = kinds.READ_AFTER_WRITE
    WRITE_AFTER_WRITE = kinds.WRITE_AFTER_WRITE
    WRITE_AFTER_READ = kinds.WRITE_AFTER_READ
    FREE_IN_USE = kinds.FREE_IN_USE


@dataclass(frozen=True)
class Access:
    """One read or write of a tensor, on one stream, at one expression."""

    node: cst.CSTNode
    stream: str
    write: bool
    span_node: cst.CSTNode
    """The innermost stream `with` around the access, or its statement outside any block."""
    function: str | None = None
    """The function interpreted when the access was made (`Cls.method`; None: module body)."""


@dataclass(frozen=True)
class _Mark:
    access: Access
    after: frozenset[str]
    """Tokens ordered after the access: streams, `event:e`, or HOST."""

    def orders(self, stream: str) -> bool:
        return stream in self.after or HOST in self.after


@dataclass(frozen=True)
class Hazard:
    """An access on `stream` that is not ordered after `other`'s conflicting access.

    For FREE_IN_USE, `access` is the use on `stream`, `other` the allocating stream, and
    `release` the node where the tensor's last reference dies (None: the function returns).
    """

    kind: HazardKind
    tensor: str
    access: Access
    other: str
    release: cst.CSTNode | None = None
    function: str | None = None
    origin: str | None = None
    """The other function that made the conflicting access (a producer method), if any."""


@dataclass(frozen=True)
class _Tensor:
    writes: frozenset[_Mark] = frozenset()
    """Possible last writes (several after a join)."""
    reads: frozenset[_Mark] = frozenset()
    """Reads since the last write, the latest per stream on each path."""
    uses: frozenset[_Mark] = frozenset()
    """Accesses on streams other than `alloc`: what the caching allocator must wait for."""
    alloc: str | None = None
    """Allocating stream of a tensor created here; None when its lifetime is not ours to track."""
    recorded: frozenset[str] = frozenset()
    escaped: bool = False

    def with_marks(self, update: Callable[[frozenset[_Mark]], frozenset[_Mark]]) -> _Tensor:
        writes, reads, uses = update(self.writes), update(self.reads), update(self.uses)
        if writes is self.writes and reads is self.reads and uses is self.uses:
            return self
        return replace(self, writes=writes, reads=reads, uses=uses)


class _MarkUpdate:
    """Drops `drop` from every mark, then adds `token` to those whose `after` holds `when`
    (every mark if `when` is None)."""

    def __init__(self, when: str | None, token: str | None, drop: str | None = None) -> None:
        self.when, self.token, self.drop = when, token, drop

    def __call__(self, marks: frozenset[_Mark]) -> frozenset[_Mark]:
        changed = False
        result = []
        for mark in marks:
            after = mark.after
            if self.drop is not None and self.drop in after:
                after = after - {self.drop}
            if (
                self.token is not None
                and (self.when is None or self.when in after)
                and self.token not in after
            ):
                after = after | {self.token}
            if after is not mark.after:
                changed = True
                mark = _Mark(mark.access, after)
            result.append(mark)
        return frozenset(result) if changed else marks


@dataclass
class _State:
    current: str = CURRENT
    tensors: dict[str, _Tensor] = field(default_factory=dict)
    streams: dict[str, str] = field(default_factory=dict)
    """Names bound to stream objects -> the stream they denote."""
    contexts: dict[str, str] = field(default_factory=dict)
    """Names bound to StreamContext objects -> the stream they make current."""

    def copy(self) -> _State:
        return _State(self.current, dict(self.tensors), dict(self.streams), dict(self.contexts))

    def update_marks(self, update: Callable[[frozenset[_Mark]], frozenset[_Mark]]) -> None:
        for key, tensor in self.tensors.items():
            self.tensors[key] = tensor.with_marks(update)


def _join_marks(a: frozenset[_Mark], b: frozenset[_Mark]) -> frozenset[_Mark]:
    if a == b:
        return a
    by_access = {mark.access: mark for mark in a}
    for mark in b:
        other = by_access.get(mark.access)
        by_access[mark.access] = mark if other is None else _Mark(mark.access, _meet(mark.after, other.after))
    return frozenset(by_access.values())


def _meet(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    """Tokens ordered after the access on both paths; HOST stands for every token."""
    if HOST in a:
        return b
    if HOST in b:
        return a
    return a & b


def _join_tensor(a: _Tensor, b: _Tensor) -> _Tensor:
    if a == b:
        return a
    return _Tensor(
        writes=_join_marks(a.writes, b.writes),
        reads=_join_marks(a.reads, b.reads),
        uses=_join_marks(a.uses, b.uses),
        alloc=a.alloc if a.alloc == b.alloc else None,
        recorded=a.recorded & b.recorded,
        escaped=a.escaped or b.escaped,
    )


def _join(states: Iterable[_State | None]) -> _State | None:
    """Facts that hold on every path; accesses that happen on any path."""
    live = [state for state in states if state is not None]
    if not live:
        return None
    result = live[0].copy()
    for state in live[1:]:
        for key, tensor in state.tensors.items():
            mine = result.tensors.get(key)
            result.tensors[key] = tensor if mine is None else _join_tensor(mine, tensor)
        result.streams = _join_bindings(result.streams, state.streams)
        result.contexts = {k: v for k, v in result.contexts.items() if state.contexts.get(k) == v}
    return result


def _join_bindings(a: dict[str, str], b: dict[str, str]) -> dict[str, str]:
    """A name bound to one stream on both paths keeps it, to different ones it is UNKNOWN.
    A name not bound on a path denotes the stream spelled like it."""
    joined = {}
    for key in a.keys() | b.keys():
        left, right = a.get(key, key), b.get(key, key)
        joined[key] = left if left == right else UNKNOWN
    return joined


@dataclass
class _Loop(Loop[_State]):
    current: str = field(kw_only=True)
    """The stream current in the loop body: `break` inside a stream block leaves the block too."""


def _suite(node: cst.BaseSuite) -> Sequence[cst.BaseStatement | cst.BaseSmallStatement]:
    return node.body


def _code(node: cst.BaseExpression) -> str:
    """Source text of an expression; names and attributes without the cost of codegen."""
    return dotted_name(node) or cst.Module(body=[]).code_for_node(node)


class _FunctionAnalysis(Interpreter[_State, _Loop]):
    """Interprets one function body (or a module body) and collects its hazards."""

    max_passes = _MAX_LOOP_PASSES
    _join = staticmethod(_join)

    def __init__(
        self,
        imports: ImportTable,
        hazards: dict[tuple[object, ...], Hazard],
        *,
        function: str | None,
        params: frozenset[str] = frozenset(),
        helpers: _Helpers | None = None,
        entry: Mapping[str, _Tensor] | None = None,
        probes: Iterable[str] = (),
    ) -> None:
        self.imports = imports
        self.hazards = hazards
        self.function = function
        self.helpers = helpers
        self.maybe_tensors = set(params)
        """Names of unknown values that may be tensors: parameters and loop targets."""
        self.state = _State(tensors=dict(entry or {}))
        for token in probes:
            self.live.tensors[_probe(token)] = _Tensor(writes=frozenset({_Mark(_PROBE_ACCESS, frozenset({token}))}))
        self.exits: list[_State] = []
        """The states at each `return` and at the end of the body: what a caller continues from."""
        self.tokens: set[str] = set()
        """Streams and events the ordering calls named: a summary probes each of them."""
        self.bound: set[str] = set()
        """Names (re)bound here: a parameter rebound no longer denotes the caller's argument."""
        self.yields = False
        self.silent = 0
        """Depth of blocks on an UNKNOWN stream: their accesses are taken as ordered, never judged."""
        self.block: cst.With | None = None
        self.statement = None
        self.loops = []

    # ---- driver

    def run_function(self, body: cst.BaseSuite) -> None:
        self.run(_suite(body))
        if self.state is not None:
            self.exits.append(self.state.copy())
            self._release_all(None)

    def _small(self, node: cst.BaseSmallStatement) -> None:
        if isinstance(node, cst.Assign):
            self._assign([target.target for target in node.targets], node.value)
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                self._assign([node.target], node.value)
        elif isinstance(node, cst.AugAssign):
            self._eval(node.value)
            key = dotted_name(node.target)
            if key is not None and (key in self.live.tensors or key in self.maybe_tensors):
                self._access(key, node.target, write=True)
            else:
                self._eval(node.target)
        elif isinstance(node, cst.Expr):
            self._eval(node.value)
        elif isinstance(node, cst.Return):
            if node.value is not None:
                self._pass(node.value)
            if self.state is not None:
                self.exits.append(self.state.copy())
            self._release_all(None)
            self.state = None
        elif isinstance(node, cst.Raise):
            if node.exc is not None:
                self._eval(node.exc)
            self.state = None
        elif isinstance(node, cst.Del):
            self._delete(node.target, node)
        elif isinstance(node, (cst.Break, cst.Continue)):
            if self.loops:
                loop = self.loops[-1]
                self.live.current = loop.current
                (loop.breaks if isinstance(node, cst.Break) else loop.continues).append(self.live)
            self.state = None
        elif isinstance(node, cst.Assert):
            self._condition(node.test)

    # ---- compound statements

    def _condition(self, test: cst.BaseExpression) -> None:
        """`if t:` on a tensor copies its truth value to the host: a sync with the current stream.
        Only tensors made here count: a parameter tested is usually a flag, and taking it for a
        sync would hide the one-sided waits that branch on it."""
        self._header(test)
        if self.state is not None and self._tensor_operand(test, made_here=True):
            self._order(_MarkUpdate(self.live.current, HOST))

    def _with(self, node: cst.With) -> None:
        stream: str | None = None
        for item in node.items:
            self.statement = item
            item_stream = self._context_stream(item.item)
            if item_stream is None:
                self._eval(item.item)
                if isinstance(item.item, cst.Call) and self.imports.qualified(item.item.func) == GRAPH_CAPTURE:
                    self._order(_MarkUpdate(None, HOST))  # it synchronizes the device first
            else:
                stream = item_stream
        if stream is None or self.state is None:
            self.run(_suite(node.body))
            return
        if stream == UNKNOWN:
            self.silent += 1
            self.run(_suite(node.body))
            self.silent -= 1
            return
        outer_stream, outer_block = self.state.current, self.block
        self.state.current, self.block = stream, node
        self.run(_suite(node.body))
        self.block = outer_block
        if self.state is not None:
            self.state.current = outer_stream

    def _loop_frame(self, head: _State) -> _Loop:
        return _Loop(current=head.current)

    def _loop_target(self, target: cst.BaseAssignTargetExpression) -> None:
        self.maybe_tensors.update(_names(target))
        self.statement = target
        self._bind(target, _Value("other"))

    # ---- bindings

    def _assign(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> None:
        if self._record_event_assignment(targets, value):
            return
        if not _is_reference(value):
            self._eval(value)
        bound = self._value(value)
        for target in targets:
            self._bind(target, bound)
            key = dotted_name(target)
            if bound.kind in ("alias", "other") and key is not None and dotted_name(value) is not None:
                stream = self._stream(value)  # `s = self.copy_stream`: `s` names that stream if used as one
                if stream is not None:
                    self.live.streams[key] = stream

    def _bind(self, target: cst.BaseExpression, value: _Value) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value, value)
            return
        if isinstance(target, cst.StarredElement):
            self._bind(target.value, value)
            return
        if isinstance(target, cst.Subscript):
            self._write_target(target)
            return
        key = dotted_name(target)
        if key is None:
            return
        owned = isinstance(target, cst.Name)
        self.bound.add(key)
        if owned:
            self._release(key, target)
        self._forget(key)
        state = self.live
        if value.kind == "tensor":
            mark = _Mark(self._make_access(target, write=True), frozenset({state.current}))
            state.tensors[key] = _Tensor(writes=frozenset({mark}), alloc=state.current if owned else None)
        elif value.kind == "host":
            state.tensors[key] = _Tensor()
        elif value.kind == "alias" and value.source in state.tensors:
            source = state.tensors[value.source]
            state.tensors[key] = replace(source, uses=frozenset(), alloc=None, recorded=frozenset())
        elif value.kind == "alias" and owned and value.source in self.maybe_tensors:
            self.maybe_tensors.add(key)
        elif value.kind == "stream":
            state.streams[key] = value.source or key
        elif value.kind == "context" and value.source is not None:
            state.contexts[key] = value.source
        elif value.kind == "event":
            state.update_marks(_MarkUpdate(None, None, drop=f"event:{key}"))

    def _record_event_assignment(
        self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression
    ) -> bool:
        """`e = s.record_event()`: a new event, recorded on `s` at once."""
        if not (
            len(targets) == 1
            and isinstance(value, cst.Call)
            and not value.args
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "record_event"
            and dotted_name(targets[0]) is not None
        ):
            return False
        key = dotted_name(targets[0])
        assert key is not None
        stream = self._stream(value.func.value)
        self._forget(key)
        if stream is not None:
            self._record(f"event:{key}", stream)
        return True

    def _forget(self, key: str) -> None:
        self.live.tensors.pop(key, None)
        self.live.streams.pop(key, None)
        self.live.contexts.pop(key, None)

    def _delete(self, target: cst.BaseExpression, node: cst.Del) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._delete(element.value, node)
        elif isinstance(target, cst.Name):
            self._release(target.value, node)
            self._forget(target.value)
        elif isinstance(target, cst.Subscript):
            self._eval(target.value)
            for index in target.slice:
                self._eval(index)
        elif isinstance(target, cst.Attribute) and (key := dotted_name(target)) is not None:
            self._forget(key)

    # ---- lifetimes

    def _release(self, key: str, where: cst.CSTNode | None) -> None:
        """The name's last reference dies at `where`: uses on other streams must be ordered."""
        tensor = self.live.tensors.get(key)
        if tensor is None or tensor.alloc is None or tensor.escaped:
            return
        for use in tensor.uses:
            if use.access.stream not in tensor.recorded and not use.orders(tensor.alloc):
                self._hazard(HazardKind.FREE_IN_USE, key, use.access, tensor.alloc, where)

    def _release_all(self, where: cst.CSTNode | None) -> None:
        if self.function is None:
            return  # module globals live until exit
        for key in list(self.live.tensors):
            self._release(key, where)

    def _escape_names(self, expr: cst.CSTNode) -> None:
        for key in self._tensor_names(expr):
            self.live.tensors[key] = replace(self.live.tensors[key], escaped=True)

    def _pass(self, expr: cst.BaseExpression) -> None:
        """A value handed to the caller: it escapes, and is read only if computing it launches work."""
        if not _is_reference(expr):
            self._eval(expr)
        self._escape_names(expr)

    def _tensor_names(self, expr: cst.CSTNode) -> Iterator[str]:
        if self.state is None or not self.live.tensors:
            return
        key = dotted_name(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if key is not None and key in self.live.tensors:
            yield key
            return
        if isinstance(expr, (cst.Lambda, cst.BinaryOperation, cst.Comparison)):
            return  # an operator result is a new tensor
        if isinstance(expr, _COMPREHENSIONS):
            targets = _comprehension_targets(expr)
            for child in children(expr):
                yield from (key for key in self._tensor_names(child) if key.split(".")[0] not in targets)
            return
        for child in children(expr):
            yield from self._tensor_names(child)

    # ---- expressions

    def _eval(self, node: cst.CSTNode) -> None:
        """Reads and ordering effects of evaluating `node`, in evaluation order."""
        if self.state is None:
            return
        if isinstance(node, cst.Name):
            if node.value in self.live.tensors or node.value in self.maybe_tensors:
                self._access(node.value, node, write=False)
        elif isinstance(node, cst.Attribute):
            key = dotted_name(node)
            if key is not None and key in self.live.tensors:
                self._access(key, node, write=False)
            elif node.attr.value not in _HOST_ATTRIBUTES:
                self._eval(node.value)
        elif isinstance(node, cst.Call):
            self._call(node)
        elif isinstance(node, cst.Arg):
            self._eval(node.value)
        elif isinstance(node, cst.NamedExpr):
            self._assign([node.target], node.value)
        elif isinstance(node, cst.Yield):
            self.yields = True
            if isinstance(node.value, cst.BaseExpression):
                self._pass(node.value)
        elif isinstance(node, (cst.Lambda, cst.FunctionDef)):
            return
        elif isinstance(node, _COMPREHENSIONS):
            self._comprehension(node)
        elif isinstance(node, (cst.BinaryOperation, cst.BooleanOperation)):
            for operand in _operands(node):
                self._eval(operand)
        else:
            for child in children(node):
                self._eval(child)

    def _comprehension(self, node: _Comprehension) -> None:
        """A comprehension has its own scope: its targets shadow the enclosing names of the same
        spelling, which it neither reads nor rebinds. Only the first iterable is evaluated outside."""
        self._eval(node.for_in.iter)
        targets = _comprehension_targets(node)
        state = self.live
        saved = {name: (state.tensors.get(name), state.streams.get(name), state.contexts.get(name)) for name in targets}
        shadowed = targets & self.maybe_tensors
        self.maybe_tensors -= targets
        for name in targets:
            self._forget(name)
        comp: cst.CompFor | None = node.for_in
        while comp is not None:
            if comp is not node.for_in:
                self._eval(comp.iter)
            for condition in comp.ifs:
                self._eval(condition.test)
            comp = comp.inner_for_in
        for part in (node.key, node.value) if isinstance(node, cst.DictComp) else (node.elt,):
            self._eval(part)
        self.maybe_tensors |= shadowed
        if self.state is None:
            return
        for name, (tensor, stream, context) in saved.items():
            self._forget(name)
            if tensor is not None:
                self.live.tensors[name] = tensor
            if stream is not None:
                self.live.streams[name] = stream
            if context is not None:
                self.live.contexts[name] = context

    def _call(self, node: cst.Call) -> None:
        func = node.func
        qualified = self.imports.qualified(func)
        if qualified is not None and qualified.startswith("torch."):
            in_place = (
                (qualified.endswith("_") or qualified in _COLLECTIVES)
                and bool(node.args)
                and node.args[0].keyword is None
            )
            self._eval_args(node, skip_first=in_place)
            if qualified == DEVICE_SYNC:
                self._order(_MarkUpdate(None, HOST))
            elif qualified == SET_STREAM and node.args:
                stream = self._stream(node.args[0].value)
                if stream is not None:
                    self.live.current = stream
            elif in_place:
                self._write_target(node.args[0].value)
            self._write_out(node)
            return
        found = self.helpers.lookup(self.function, func, qualified) if self.helpers is not None else None
        if found is not None:
            self._replay_orders(found, node)
        self._call_other(node)
        if found is not None and self.state is not None:
            self._replay_effects(found, node)

    def _call_other(self, node: cst.Call) -> None:
        """A call into code other than torch's: stream and tensor methods, builtins, the rest."""
        func = node.func
        if isinstance(func, cst.Attribute):
            if self._stream_method(node, func):
                return
            method, receiver = func.attr.value, func.value
            key = dotted_name(receiver)
            tracked = key is not None and key in self.live.tensors
            if method == "record_stream" and tracked and node.args:
                assert key is not None
                stream = self._stream(node.args[0].value)
                if stream is not None:
                    tensor = self.live.tensors[key]
                    self.live.tensors[key] = replace(tensor, recorded=tensor.recorded | {stream})
                return
            if method in _HOST_METHODS:
                self._eval_args(node)
                return
            if method in _SYNC_METHODS:
                self._eval(receiver)
                self._eval_args(node)
                self._order(_MarkUpdate(self.live.current, HOST))
                return
            if _is_inplace(method):
                self._eval_args(node)
                self._write_target(receiver)
                self._write_out(node)
                return
            self._eval(receiver)
            self._eval_args(node)
            if method in _STORING_METHODS or not self._is_tensor(receiver):
                self._escape_args(node)
        else:
            if not isinstance(func, cst.Name):
                self._eval(func)  # a called name is a function or a module, never a tensor
            builtin = func.value if isinstance(func, cst.Name) else None
            if builtin not in _METADATA_BUILTINS:
                self._eval_args(node)
            if builtin in _SYNC_BUILTINS and any(self._tensor_operand(arg.value) for arg in node.args):
                self._order(_MarkUpdate(self.live.current, HOST))
            if builtin not in _PURE_BUILTINS:
                self._escape_args(node)
        self._write_out(node)

    def _eval_args(self, node: cst.Call, *, skip_first: bool = False) -> None:
        """Reads of the arguments, except the ones the call writes in place (checked as writes)."""
        for index, arg in enumerate(node.args):
            if (arg.keyword is None or arg.keyword.value != "out") and not (skip_first and index == 0):
                self._eval(arg.value)

    def _escape_args(self, node: cst.Call) -> None:
        """Unknown code may keep its arguments alive: their lifetime is no longer ours."""
        for arg in node.args:
            self._escape_names(arg.value)

    def _write_out(self, node: cst.Call) -> None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "out":
                self._write_target(arg.value)

    def _write_target(self, expr: cst.BaseExpression) -> None:
        """An in-place write to `expr`, or to the tensor it is a view of (`x[i]`, `x.view(..)`)."""
        if isinstance(expr, (cst.Tuple, cst.List)):
            for element in expr.elements:
                self._write_target(element.value)
            return
        base = expr
        while True:
            if isinstance(base, cst.Subscript):
                for index in base.slice:
                    self._eval(index)
                base = base.value
            elif (
                isinstance(base, cst.Call)
                and isinstance(base.func, cst.Attribute)
                and base.func.attr.value in _VIEW_METHODS
            ):
                self._eval_args(base)
                base = base.func.value
            elif isinstance(base, cst.Attribute) and base.attr.value in _VIEW_ATTRIBUTES:
                base = base.value
            else:
                break
        key = dotted_name(base)
        if key is not None and key not in self.live.streams:
            self._access(key, base, write=True)
        else:
            self._eval(base)

    def _stream_method(self, node: cst.Call, func: cst.Attribute) -> bool:
        """Ordering calls on streams and events; False if `func` is none of them."""
        method, receiver = func.attr.value, func.value
        args = [arg.value for arg in node.args]
        if method == "wait_stream" and args:
            waiter, producer = self._stream(receiver), self._stream(args[0])
            if waiter is not None and producer is not None and waiter != producer:
                self._order(_MarkUpdate(producer, waiter))
        elif method == "wait_event" and args:
            waiter, event = self._stream(receiver), self._event(args[0])
            if waiter is not None and event is not None:
                self._order(_MarkUpdate(event, waiter))
        elif method == "record_event" and args:
            stream, event = self._stream(receiver), self._event(args[0])
            if stream is not None and event is not None:
                self._record(event, stream)
        elif method == "record" and dotted_name(receiver) not in self.live.tensors:
            stream, event = (self._stream(args[0]) if args else self.live.current), self._event(receiver)
            if stream is not None and event is not None:
                self._record(event, stream)
        elif method == "wait" and dotted_name(receiver) not in self.live.tensors:
            waiter, event = (self._stream(args[0]) if args else self.live.current), self._event(receiver)
            if waiter is not None and event is not None:
                self._order(_MarkUpdate(event, waiter))
        elif method == "synchronize" and not args and dotted_name(receiver) not in self.live.tensors:
            self._host_waits(receiver)
        elif method == "query" and not args:
            pass  # a poll from the host: it orders only where it returned True (`_polled`)
        else:
            return False
        return True

    def _polled(self, test: cst.BaseExpression, *, outcome: bool) -> None:
        """Where `test` had the truth value `outcome`: if that means `r.query()` returned True,
        the host is past r's work (DESIGN.md)."""
        poll = _query_poll(test)
        if poll is not None and poll[1] == outcome and self.state is not None:
            if dotted_name(poll[0]) not in self.live.tensors:
                self._host_waits(poll[0])

    def _host_waits(self, receiver: cst.BaseExpression) -> None:
        """The host waits for the stream or event `receiver` denotes (one name may be either)."""
        for token in (self._stream(receiver), self._event(receiver)):
            if token is not None:
                self._order(_MarkUpdate(token, HOST))

    def _replay_orders(self, found: _Callee, call: cst.Call) -> None:
        """The ordering a called function makes on every path that returns, in the caller's streams.
        All of it is applied at once, before the call's own reads (precision over recall)."""
        facts: dict[str, list[tuple[bool, frozenset[str]]]] = {}
        for token, after in found.summary.orders:
            mine = self._translate(found, call, token)
            if mine is None:
                continue
            mapped = frozenset(m for m in (self._translate(found, call, u) for u in after) if m is not None)
            facts.setdefault(mine, []).append((token in after, mapped))
        if facts:
            self.tokens.update(facts)
            self.live.update_marks(_FactUpdate(facts))

    def _replay_effects(self, found: _Callee, call: cst.Call) -> None:
        """The tensors the call leaves written or read, as accesses at the call on the streams it
        used. Those on another stream than the caller's are checked (the call's arguments were
        read on the caller's stream already); orderings it made are already applied."""
        effects = []
        for effect in found.summary.effects:
            key = self._argument_key(found, call, effect.key)
            stream = self._translate(found, call, effect.stream)
            if key is not None and stream is not None:
                after = frozenset(m for m in (self._translate(found, call, u) for u in effect.after) if m is not None)
                effects.append((effect, key, stream, after))
        passed = {id(arg.value) for arg in call.args}
        for _, key, stream, _ in effects:
            tensor = self.live.tensors.get(key)
            if stream != self.live.current and tensor is not None:  # the callee's access stands for that read
                self.live.tensors[key] = replace(
                    tensor, reads=frozenset(mark for mark in tensor.reads if id(mark.access.node) not in passed)
                )
        for effect, key, stream, after in effects:
            if stream != self.live.current:
                self._access(key, call, write=effect.write, stream=stream, after=after)
                continue
            if not effect.write:
                continue
            assert self.statement is not None
            access = Access(call, stream, True, self.block or self.statement, self.function)
            quiet = self.silent and effect.stream == CURRENT  # the unknown stream of the block around the call
            mark = _Mark(access, frozenset({HOST}) if quiet else after | {stream})
            tensor = self.live.tensors.get(key) or _Tensor()
            writes = tensor.writes if tensor.writes and all(m.access.node is call for m in tensor.writes) else frozenset()
            tensor = replace(tensor, writes=writes | {mark}, reads=frozenset())
            if tensor.alloc is not None and stream != tensor.alloc:
                tensor = replace(tensor, uses=tensor.uses | {mark})
            self.live.tensors[key] = tensor

    def _argument_key(self, found: _Callee, call: cst.Call, key: str) -> str | None:
        """The caller's name for a parameter or `self.x` of the called function."""
        if key.startswith("self."):
            return key if found.self_call else None
        value = _argument(found.summary, call, key)
        return dotted_name(value) if value is not None else None

    def _translate(self, found: _Callee, call: cst.Call, token: str) -> str | None:
        """A token of the called function in the caller's terms; None where it has no meaning here."""
        if token in (HOST, ANY_OTHER):
            return token
        if token == CURRENT:
            return self.live.current
        if token.startswith("event:"):
            stream = self._translate(found, call, token.removeprefix("event:"))
            return None if stream is None else f"event:{stream}"
        root = token.split(".", 1)[0]
        if root in found.summary.names:
            value = _argument(found.summary, call, root)
            return self._stream(value) if value is not None and root == token else None
        if root in ("self", "cls"):
            return token if found.self_call else None
        return token if found.same_module else None

    def _order(self, update: _MarkUpdate) -> None:
        """Applies an ordering to every access; the tokens it depends on are worth probing."""
        self.tokens.update(token for token in (update.when, update.drop) if token is not None)
        self.live.update_marks(update)

    def _record(self, token: str, stream: str) -> None:
        """Re-recording an event replaces what it captured."""
        self._order(_MarkUpdate(stream, token, drop=token))

    # ---- streams

    def _context_stream(self, expr: cst.BaseExpression) -> str | None:
        """The stream a `with` item makes current, None if it is no stream context."""
        if isinstance(expr, cst.Call) and self.imports.qualified(expr.func) in STREAM_CONTEXTS:
            return self._stream_argument(expr)
        key = dotted_name(expr)
        return self.live.contexts.get(key) if key is not None else None

    def _stream_argument(self, call: cst.Call) -> str | None:
        """The stream of `torch.cuda.stream(s)` / `StreamContext(stream=s)`; None for None."""
        arg = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "stream"), None)
        return self._stream(arg) if arg is not None else None

    def _event(self, expr: cst.BaseExpression) -> str | None:
        """The ordering token of the event an expression denotes; None for `None`."""
        name = self._stream(expr)
        return None if name is None else f"event:{name}"

    def _stream(self, expr: cst.BaseExpression) -> str | None:
        """The stream an expression denotes: a tracked binding, or its own source text."""
        if isinstance(expr, cst.Call):
            qualified = self.imports.qualified(expr.func)
            if qualified == CURRENT_STREAM:
                return self.live.current
            if qualified == DEFAULT_STREAM:
                return CURRENT
        if isinstance(expr, cst.Name) and expr.value == "None":
            return None
        key = dotted_name(expr)
        if key is not None and key in self.live.streams:
            return self.live.streams[key]
        return _code(expr)

    # ---- values

    def _value(self, expr: cst.BaseExpression) -> _Value:
        """What an assignment binds: a new tensor, an alias of a tracked one, a stream..."""
        tensors = self.live.tensors
        key = dotted_name(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if key is not None:
            if key in tensors:
                self._escape_names(expr)
                return _Value("alias", key)
            if key in self.live.streams:
                return _Value("stream", self.live.streams[key])
            if key in self.live.contexts:
                return _Value("context", self.live.contexts[key])
            if key in self.maybe_tensors:
                return _Value("alias", key)  # of a value that may be a tensor: so may the copy
        if isinstance(expr, cst.Await):
            return self._value(expr.expression)
        if isinstance(expr, cst.Attribute) and expr.attr.value in _VIEW_ATTRIBUTES:
            return self._alias_of(expr.value)
        if isinstance(expr, cst.Subscript):
            return self._alias_of(expr.value)
        if isinstance(expr, (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison)):
            return _Value("tensor") if self._tensor_operand(expr) else _Value("other")
        if isinstance(expr, (cst.Tuple, cst.List, cst.Set, cst.Dict)):
            self._escape_names(expr)
            return _Value("other")
        if isinstance(expr, cst.Call):
            return self._call_value(expr)
        return _Value("other")

    def _alias_of(self, expr: cst.BaseExpression) -> _Value:
        key = dotted_name(expr)
        if key is not None and key in self.live.tensors:
            self._escape_names(expr)
            return _Value("alias", key)
        return _Value("other")

    def _call_value(self, expr: cst.Call, *, made_here: bool = False) -> _Value:
        qualified = self.imports.qualified(expr.func)
        if qualified is not None:
            if qualified in STREAM_CONSTRUCTORS:
                return _Value("stream")
            if qualified in (CURRENT_STREAM, DEFAULT_STREAM):
                return _Value("stream", self._stream(expr))
            if qualified in STREAM_CONTEXTS:
                return _Value("context", self._stream_argument(expr))
            if qualified in EVENT_CONSTRUCTORS:
                return _Value("event")
            module = qualified.rpartition(".")[0]
            if module in _TENSOR_MODULES and qualified not in _HOST_TORCH:
                return _Value("host") if self._host_allocation(expr) else _Value("tensor")
            return _Value("other")
        func = expr.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in _HOST_METHODS or method in ("item", "tolist"):
                return _Value("other")
            if method == "pin_memory":
                return _Value("host")
            if method in _VIEW_METHODS:
                return self._alias_of(func.value)
            if method in _TENSOR_METHODS or self._is_tensor(func.value, made_here=made_here):
                return _Value("tensor")
        elif isinstance(func, cst.Name) and func.value in _PURE_BUILTINS:
            return _Value("other")
        if any(self._is_tensor(arg.value, made_here=made_here) for arg in expr.args):
            return _Value("tensor")
        return _Value("other")

    def _host_allocation(self, call: cst.Call) -> bool:
        """`torch.empty(n, pin_memory=True)`, `torch.zeros(n, device="cpu")`: host memory, no kernel
        on any stream (an unspecified device is taken as CUDA: the default device of stream code)."""
        for arg in call.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword == "pin_memory" and isinstance(arg.value, cst.Name) and arg.value.value == "True":
                return True
            if keyword == "device":
                device = arg.value
                if isinstance(device, cst.Call) and self.imports.qualified(device.func) == "torch.device" and device.args:
                    device = device.args[0].value
                if isinstance(device, cst.SimpleString) and str(device.evaluated_value).partition(":")[0] == "cpu":
                    return True
        return False

    def _is_tensor(self, expr: cst.BaseExpression, *, made_here: bool = False) -> bool:
        """A tracked tensor or a name that may be one; `made_here`: one this function wrote."""
        key = dotted_name(expr)
        if key is None:
            return False
        if made_here:
            return key in self.live.tensors and bool(self.live.tensors[key].writes)
        return key in self.live.tensors or key in self.maybe_tensors

    def _tensor_operand(self, expr: cst.BaseExpression, *, made_here: bool = False) -> bool:
        if isinstance(expr, cst.BinaryOperation):
            return any(self._tensor_operand(operand, made_here=made_here) for operand in _operands(expr))
        if isinstance(expr, cst.UnaryOperation):
            return self._tensor_operand(expr.expression, made_here=made_here)
        if isinstance(expr, cst.Comparison):
            if all(isinstance(target.operator, (cst.Is, cst.IsNot)) for target in expr.comparisons):
                return False  # identity: a Python bool, no kernel
            return self._tensor_operand(expr.left, made_here=made_here) or any(
                self._tensor_operand(target.comparator, made_here=made_here) for target in expr.comparisons
            )
        if isinstance(expr, cst.Call):
            return self._call_value(expr, made_here=made_here).kind == "tensor"
        if isinstance(expr, cst.Subscript):
            return self._is_tensor(expr.value, made_here=made_here)
        return self._is_tensor(expr, made_here=made_here)

    # ---- accesses

    def _make_access(self, node: cst.CSTNode, *, write: bool) -> Access:
        assert self.statement is not None
        return Access(node, self.live.current, write, self.block or self.statement, self.function)

    def _access(
        self, key: str, node: cst.CSTNode, *, write: bool, stream: str | None = None, after: frozenset[str] = frozenset()
    ) -> None:
        """A kernel on the current stream (or `stream`, for a called function's) reads or writes
        `key`: check it, then record it, ordered before `after` too."""
        tensor = self.live.tensors.get(key) or _Tensor()
        access = self._make_access(node, write=write)
        if stream is not None:
            access = replace(access, stream=stream)
        stream = access.stream
        if self.silent:
            quiet = frozenset({_Mark(access, frozenset({HOST}))})
            if write:
                self.live.tensors[key] = replace(tensor, writes=quiet, reads=frozenset())
            else:
                self.live.tensors[key] = replace(tensor, reads=tensor.reads | quiet)
            return
        for last in tensor.writes:
            if last.access.stream != stream and not last.orders(stream):
                kind = HazardKind.WRITE_AFTER_WRITE if write else HazardKind.READ_AFTER_WRITE
                self._hazard(kind, key, access, last.access.stream, origin=last.access.function)
        if write:
            for read in tensor.reads:
                if read.access.stream != stream and not read.orders(stream):
                    self._hazard(HazardKind.WRITE_AFTER_READ, key, access, read.access.stream, origin=read.access.function)
        mark = _Mark(access, frozenset({stream}) | after)
        if write:
            tensor = replace(tensor, writes=frozenset({mark}), reads=frozenset())
        else:
            tensor = replace(
                tensor, reads=frozenset(r for r in tensor.reads if r.access.stream != stream) | {mark}
            )
        if tensor.alloc is not None and stream != tensor.alloc:
            tensor = replace(tensor, uses=frozenset(u for u in tensor.uses if u.access != access) | {mark})
        self.live.tensors[key] = tensor

    def _hazard(
        self,
        kind: HazardKind,
        tensor: str,
        access: Access,
        other: str,
        release: cst.CSTNode | None = None,
        *,
        origin: str | None = None,
    ) -> None:
        """Once per access and other stream: the first release found is the one reported.
        `origin`: the function of the conflicting access, named only when it is another one."""
        origin = origin if origin != self.function else None
        hazard = Hazard(kind, tensor, access, other, release, self.function, origin)
        key = (kind, tensor, access.node, other)
        found = self.hazards.setdefault(key, hazard)
        if origin is not None and (found.origin is None or origin < found.origin) and found.release is release:
            self.hazards[key] = hazard  # several producers: name one, the same on every run


@dataclass(frozen=True)
class _Value:
    kind: Literal["tensor", "host", "alias", "stream", "context", "event", "other"]
    """`host`: a tensor allocated in host memory, which no stream writes."""
    source: str | None = None


def _operands(expr: cst.BinaryOperation | cst.BooleanOperation) -> list[cst.BaseExpression]:
    """`a + b + c` left to right, without recursing down the left spine: long chains of `+`
    (generated code, string building) would exceed the interpreter's recursion limit."""
    rights = []
    left: cst.BaseExpression = expr
    while isinstance(left, type(expr)):
        rights.append(left.right)
        left = left.left
    return [left, *reversed(rights)]


def _comprehension_targets(node: _Comprehension) -> set[str]:
    targets: set[str] = set()
    comp: cst.CompFor | None = node.for_in
    while comp is not None:
        targets.update(_names(comp.target))
        comp = comp.inner_for_in
    return targets


def _query_poll(test: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
    """`(r, True)` for a test `r.query()`, `(r, False)` for `not r.query()`: the truth value of
    the test at which `query()` returned True."""
    call, outcome = test, True
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        call, outcome = test.expression, False
    if isinstance(call, cst.Call) and not call.args and isinstance(call.func, cst.Attribute) and call.func.attr.value == "query":
        return call.func.value, outcome
    return None


def _names(target: cst.CSTNode) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _names(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from _names(target.value)


def _is_reference(expr: cst.CSTNode) -> bool:
    """Names, attributes and literal containers of them: passing them around launches no kernel."""
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(_is_reference(element.value) for element in expr.elements)
    if isinstance(expr, cst.StarredElement):
        return _is_reference(expr.value)
    return isinstance(expr, (cst.Name, cst.Attribute)) and dotted_name(expr) is not None


def _is_inplace(method: str) -> bool:
    return method.endswith("_") and not method.startswith("_") and method not in _HOST_METHODS


class Location(TypedDict):
    """`Rule.finding()`'s position arguments."""

    line: int
    column: int
    end_line: int
    end_column: int
    span: Span


@dataclass
class ModuleFlow:
    """What the rules read: the module's hazards, and where its nodes are (computed on demand)."""

    path: str
    module: cst.Module
    hazards: list[Hazard]
    _positions: Mapping[cst.CSTNode, CodeRange] | Positions | None = field(default=None, repr=False)
    source: str = field(default="", repr=False)
    """The module's text, for rules that prefilter on it (hostflow.py)."""

    def range(self, node: cst.CSTNode) -> CodeRange:
        if self._positions is None:
            self._positions = positions(self.module)
        return self._positions[node]

    def location(self, hazard: Hazard) -> Location:
        """`finding()` keyword arguments: the access's 1-based position and the block's span."""
        where = self.range(hazard.access.node)
        span = self.range(hazard.access.span_node)
        return {
            "line": where.start.line,
            "column": where.start.column + 1,
            "end_line": where.end.line,
            "end_column": where.end.column + 1,
            "span": Span(span.start.line, span.end.line),
        }

    def line(self, node: cst.CSTNode) -> int:
        return self.range(node).start.line


def message_fields(hazard: Hazard, current: str = f"{CURRENT_STREAM}()") -> dict[str, str]:
    """What rule templates may name: `{tensor}`; `{stream}` (the offending access's) and `{other}`
    as prose ("side stream 's'"), `{stream_code}` and `{other_code}` as code for fixes, with the
    current stream spelled `current` (as the module's fixes spell it); `{verb}`."""
    return {
        "tensor": hazard.tensor,
        "stream": _describe(hazard.access.stream),
        "other": _describe(hazard.other) + (f" in {hazard.origin}()" if hazard.origin else ""),
        "stream_code": current if hazard.access.stream == CURRENT else hazard.access.stream,
        "other_code": current if hazard.other == CURRENT else hazard.other,
        "verb": "written" if hazard.access.write else "read",
    }


def _describe(stream: str) -> str:
    return "the current stream" if stream == CURRENT else f"side stream '{stream}'"


def analyse(module: cst.Module, path: str, source: str, package: PackageIndex | None = None) -> ModuleFlow:
    """Interprets the module body and every function that has a `with` statement, then the
    public methods of classes whose methods leave `self` attributes written on a side stream.
    `package`: the other linted modules, for calls to functions imported from them."""
    imports = ImportTable()
    functions: list[tuple[str, cst.FunctionDef]] = []
    classes: set[str] = set()
    relative: list[cst.ImportFrom] = []
    module_has_with = _scan(module.body, imports, functions, "", classes, relative)
    hazards: dict[tuple[object, ...], Hazard] = {}
    if imports.imports_torch:
        everywhere = "set_stream" in source
        helpers = _Helpers(
            imports, dict(functions), _globals(module, imports), package, _resolve_relative(relative, path)
        )
        if module_has_with or everywhere:
            _FunctionAnalysis(imports, hazards, function=None, helpers=helpers).run(module.body)
        exits: dict[str, _State] = {}
        with_blocks = {name for name, function in functions if _has_with(_suite(function.body))}
        writers = {  # called functions that access a tensor on another stream
            name
            for name, function in functions
            if name in with_blocks
            and source.count(f"{name.rpartition('.')[2]}(") > 1
            and _has_with(_suite(function.body), imports)
            and (summary := helpers.summary(name)) is not None
            and any(effect.stream != CURRENT for effect in summary.effects)
        }
        writers |= {
            name
            for name in (imports.names | helpers.relative.keys()) - helpers.functions.keys()
            if f"{name}(" in source
            and (summary := helpers.imported(name, imports.qualified(cst.Name(name)))) is not None
            and any(effect.stream != CURRENT for effect in summary.effects)
        }
        for name, function in functions:
            if everywhere or name in with_blocks or _calls_any(name, function, writers):
                analysis = _FunctionAnalysis(
                    imports, hazards, function=name, params=_tensor_params(function), helpers=helpers
                )
                analysis.run_function(function.body)
                end = _join(analysis.exits)
                if end is not None:
                    exits[name] = end
        for owner in classes:
            _cross_method(owner, functions, exits, helpers, hazards, source)
    return ModuleFlow(path, module, list(hazards.values()), source=source)


def _cross_method(
    owner: str,
    functions: Sequence[tuple[str, cst.FunctionDef]],
    exits: Mapping[str, _State],
    helpers: _Helpers,
    hazards: dict[tuple[object, ...], Hazard],
    source: str,
) -> None:
    """A producer method leaves `self.x` written (or read) on a side stream; a public method of
    the same class may run after it and use (or overwrite) `self.x`, so it starts from those
    accesses.

    The rule, for precision: a producer is a public method, or one called as `self.m()` from
    `__init__` or from a public method; a consumer is a public method other than `__init__`.
    Only accesses on streams every method names alike (`self.s`, module globals) and not
    ordered before the current stream when the producer returns are carried over.
    """
    methods = {
        name.removeprefix(f"{owner}."): function for name, function in functions if name.rpartition(".")[0] == owner
    }
    produced = {method: _side_accesses(end, helpers.globals) for method in methods if (end := exits.get(f"{owner}.{method}"))}
    produced = {method: writes for method, writes in produced.items() if writes}
    if not produced:
        return
    first = {method for method in methods if _public(method)}
    if any(method not in first and f"self.{method}(" in source for method in produced):
        for method in ("__init__", *first):
            if method in methods:
                first |= _self_calls(methods[method].body)
    seed: dict[str, _Tensor] = {}
    for method in sorted(produced.keys() & first):
        for key, tensor in produced[method].items():
            seed[key] = _join_tensor(seed[key], tensor) if key in seed else tensor
    if not seed:
        return
    for method, function in methods.items():
        if _public(method) and method != "__init__":
            _FunctionAnalysis(
                helpers.imports,
                hazards,
                function=f"{owner}.{method}",
                params=_tensor_params(function),
                helpers=helpers,
                entry=seed,
            ).run_function(function.body)


def _side_accesses(end: _State, globals_: frozenset[str]) -> dict[str, _Tensor]:
    """`self.x` -> its last writes and reads on a side stream of `self` or of the module that are
    not yet ordered before the current stream."""

    def pending(marks: frozenset[_Mark]) -> frozenset[_Mark]:
        return frozenset(
            mark
            for mark in marks
            if mark.access.stream != CURRENT
            and not mark.orders(CURRENT)
            and (mark.access.stream.startswith("self.") or mark.access.stream.split(".")[0] in globals_)
        )

    found = {}
    for key, tensor in end.tensors.items():
        if key.startswith("self.") and key.count(".") == 1:
            writes, reads = pending(tensor.writes), pending(tensor.reads)
            if writes or reads:
                found[key] = _Tensor(writes=writes, reads=reads)
    return found


def _public(method: str) -> bool:
    return not method.startswith("_") or (method.startswith("__") and method.endswith("__") and method != "__new__")


def _self_calls(node: cst.CSTNode) -> set[str]:
    """Names of the methods called as `self.m(...)` anywhere under `node`."""
    return {name.removeprefix("self.") for name in _called(node) if name.startswith("self.")}


def _called(node: cst.CSTNode) -> Iterator[str]:
    """`f` and `self.m` for each call `f(...)`, `self.m(...)` under `node`."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call):
            func = current.func
            if isinstance(func, cst.Name):
                yield func.value
            elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
                yield f"self.{func.attr.value}"
        stack.extend(children(current))


def _calls_any(name: str, function: cst.FunctionDef, targets: set[str]) -> bool:
    """Whether `function` calls one of `targets` (module-level functions, or methods of its
    own class): a helper with a stream block may leave its arguments written on that stream."""
    if not targets:
        return False
    owner = name.rpartition(".")[0]
    for called in _called(function.body):
        method = called.removeprefix("self.")
        if (f"{owner}.{method}" if method != called else called) in targets:
            return True
    return False


def _globals(module: cst.Module, imports: ImportTable) -> frozenset[str]:
    """Names bound at the top of the module: streams and events they denote mean the same everywhere."""
    names = set(imports.names)
    for node in module.body:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            names.add(node.name.value)
        elif isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                targets = (
                    [target.target for target in small.targets]
                    if isinstance(small, cst.Assign)
                    else [small.target] if isinstance(small, cst.AnnAssign) else []
                )
                for target in targets:
                    names.update(_names(target))
    return frozenset(names)


def _resolve_relative(imports: Sequence[cst.ImportFrom], path: str) -> dict[str, str]:
    """Local name -> dotted name for `from .helpers import f` in the package `path` is in."""
    package = module_name(path).split(".")
    if not path.replace("\\", "/").endswith("/__init__.py") and path != "__init__.py":
        package = package[:-1]
    table: dict[str, str] = {}
    for node in imports:
        if isinstance(node.names, cst.ImportStar):
            continue
        up = len(node.relative) - 1
        if up > len(package):
            continue
        base = package[: len(package) - up]
        module = dotted_name(node.module) if node.module is not None else ""
        if module is None:
            continue
        prefix = ".".join([*base, module] if module else base)
        for alias in node.names:
            name = dotted_name(alias.name)
            if name is not None and prefix:
                local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else name
                table[local] = f"{prefix}.{name}"
    return table


_PROBE_NODE = cst.Name("probe")
_PROBE_ACCESS = Access(_PROBE_NODE, ANY_OTHER, True, _PROBE_NODE)
"""The access a probe stands for: one made before the call, on the probe's token."""


def _probe(token: str) -> str:
    """The state key of the probe for `token`: no name in source spells it."""
    return f"\0{token}"


def _argument(summary: Summary, call: cst.Call, param: str) -> cst.BaseExpression | None:
    """The expression a call passes for `param`, None if left to its default or unknowable."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == param:
            return arg.value
    if param not in summary.params:
        return None
    index = summary.params.index(param)
    positional = []
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is None:
            positional.append(arg.value)
    return positional[index] if index < len(positional) else None


@dataclass(frozen=True)
class _Callee:
    summary: Summary
    same_module: bool
    """Module globals named in the summary mean the same at the call site."""
    self_call: bool
    """`self.m(...)`: the summary's `self.x` are the caller's."""


class _FactUpdate:
    """A called function's orderings, applied at once, so that orderings it made in another
    order do not chain: each token of a mark brings the tokens its fact lists; a token whose
    fact leaves it out (an event the function re-recorded) is dropped."""

    def __init__(self, facts: Mapping[str, list[tuple[bool, frozenset[str]]]]) -> None:
        self.facts = facts
        self.everywhere = frozenset().union(*(after for _, after in facts.get(ANY_OTHER, ())))

    def __call__(self, marks: frozenset[_Mark]) -> frozenset[_Mark]:
        changed = False
        result = []
        for mark in marks:
            if HOST not in mark.after:
                added, dropped = set(self.everywhere), set()
                for token in mark.after & self.facts.keys():
                    entries = self.facts[token]
                    added.update(*(after for _, after in entries))
                    if not any(keeps for keeps, _ in entries):
                        dropped.add(token)
                after = (mark.after - dropped) | added
                if after != mark.after:
                    changed = True
                    mark = _Mark(mark.access, frozenset(after))
            result.append(mark)
        return frozenset(result) if changed else marks


class _Helpers:
    """Summaries of the functions a call may reach: the module's own functions and methods,
    and the module-level functions of other linted modules (`package`), each built on first call."""

    def __init__(
        self,
        imports: ImportTable,
        functions: dict[str, cst.FunctionDef],
        globals_: frozenset[str],
        package: PackageIndex | None = None,
        relative: Mapping[str, str] | None = None,
    ) -> None:
        self.imports = imports
        self.functions = functions
        self.globals = globals_
        self.package = package
        self.relative = relative or {}
        self.summaries: dict[str, Summary | None] = {}
        self.depth = 0
        """Summaries being built, each inside the last: deep call chains stop at _MAX_SUMMARY_DEPTH."""

    def lookup(self, caller: str | None, func: cst.BaseExpression, qualified: str | None) -> _Callee | None:
        """`helper(...)`: a module-level function; `self.helper(...)`: a method of the caller's
        class; `mod.helper(...)` or an imported name: a function of another linted module."""
        if isinstance(func, cst.Name) and func.value in self.functions:
            summary = self.summary(func.value)
            return _Callee(summary, True, False) if summary is not None else None
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"):
            if caller is None or "." not in caller:
                return None
            summary = self.summary(f"{caller.rsplit('.', 1)[0]}.{func.attr.value}")
            return _Callee(summary, True, True) if summary is not None else None
        summary = self.imported(dotted_name(func), qualified)
        return _Callee(summary, False, False) if summary is not None else None

    def imported(self, dotted: str | None, qualified: str | None) -> Summary | None:
        """The summary of a function of another linted module, called as `dotted` here."""
        if self.package is None:
            return None
        root, _, rest = (dotted or "").partition(".")
        target = self.relative.get(root)
        if target is not None:
            qualified = f"{target}.{rest}" if rest else target
        if qualified is None or qualified.startswith("torch."):
            return None
        return self.package.summary(qualified)

    def exported(self, name: str) -> Summary | None:
        """The summary of a module-level function, for other modules that import it."""
        return self.summary(name) if "." not in name else None

    def summary(self, name: str) -> Summary | None:
        if name in self.summaries:
            return self.summaries[name]
        function = self.functions.get(name)
        if function is None or self.depth >= _MAX_SUMMARY_DEPTH:
            return None  # too deep: taken as doing nothing, and built again when reached from nearer
        self.summaries[name] = None  # a recursive call, while it is being summarised, does nothing
        self.depth += 1
        try:
            self.summaries[name] = self._summarise(name, function)
        finally:
            self.depth -= 1
        return self.summaries[name]

    def _summarise(self, name: str, function: cst.FunctionDef) -> Summary | None:
        """Runs the function on symbolic arguments: a probe access per stream or event it orders
        on (an access made before the call) shows, at the returns, what it is ordered before."""
        if function.asynchronous is not None:
            return None  # calling it only makes a coroutine
        params = function.params
        positional = [p.name.value for p in (*params.posonly_params, *params.params)]
        if positional and positional[0] in ("self", "cls"):
            positional = positional[1:]
        names = frozenset({*positional, *(p.name.value for p in params.kwonly_params)})
        tokens = {CURRENT, ANY_OTHER, *names}
        while True:
            analysis = _FunctionAnalysis(
                self.imports, {}, function=name, params=_tensor_params(function), helpers=self, probes=tokens
            )
            analysis.run_function(function.body)
            if analysis.yields:
                return None  # calling a generator runs none of its body
            if analysis.tokens <= tokens:
                break
            tokens |= analysis.tokens
        end = _join(analysis.exits)
        if end is None:
            return None

        def meaningful(token: str) -> bool:
            root = token.removeprefix("event:").split(".", 1)[0]
            return token in (CURRENT, HOST) or root in names or root in ("self", "cls") or root in self.globals

        def outside(after: frozenset[str]) -> frozenset[str]:
            return frozenset(token for token in after if meaningful(token))

        orders = []
        for token in sorted(tokens):
            after = end.tensors[_probe(token)].writes
            ordered = next(iter(after)).after if after else frozenset()
            if token == ANY_OTHER and HOST in ordered:
                orders.append((token, frozenset({HOST})))
            elif token != ANY_OTHER and meaningful(token) and outside(ordered) != {token}:
                orders.append((token, outside(ordered)))
        effects = [
            Effect(key, mark.access.stream, mark.access.write, outside(mark.after))
            for key, tensor in end.tensors.items()
            if (key in names and key not in analysis.bound) or (key.startswith("self.") and key.count(".") == 1)
            for mark in tensor.writes | tensor.reads
            if meaningful(mark.access.stream) and (mark.access.write or mark.access.stream != CURRENT)
        ]  # a read on the caller's stream is the read of the argument the call makes anyway
        if not orders and not effects:
            return None
        return Summary(tuple(positional), names, tuple(orders), tuple(effects))


ModuleHelpers = _Helpers


def module_helpers(source: str) -> ModuleHelpers | None:
    """Summaries of another linted module's functions, for its importers; None if it cannot have any."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    imports = ImportTable()
    functions: list[tuple[str, cst.FunctionDef]] = []
    _scan(module.body, imports, functions, "", set(), [])
    if not imports.imports_torch:
        return None
    return _Helpers(imports, dict(functions), _globals(module, imports))


def _scan(
    body: Sequence[cst.CSTNode],
    imports: ImportTable,
    functions: list[tuple[str, cst.FunctionDef]],
    prefix: str,
    classes: set[str],
    relative: list[cst.ImportFrom],
) -> bool:
    """Collects imports, function definitions and class names (dotted like the functions');
    True if `body` itself has a `with` (not in a def)."""
    has_with = False
    for node in body:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if isinstance(small, cst.ImportFrom) and small.relative:
                    relative.append(small)
                elif isinstance(small, (cst.Import, cst.ImportFrom)):
                    imports.add(small)
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            name = f"{prefix}{node.name.value}"
            if isinstance(node, cst.FunctionDef):
                functions.append((name, node))
            else:
                classes.add(name)
            _scan(_suite(node.body), imports, functions, f"{name}.", classes, relative)
        elif isinstance(node, cst.BaseCompoundStatement):
            has_with |= isinstance(node, cst.With)
            for suite in _suites(node):
                has_with |= _scan(suite, imports, functions, prefix, classes, relative)
    return has_with


def _suites(node: cst.BaseCompoundStatement) -> Iterator[Sequence[cst.CSTNode]]:
    if not isinstance(node, cst.Match):
        yield _suite(node.body)
    for part in ("orelse", "finalbody"):
        child = getattr(node, part, None)
        if isinstance(child, cst.If):
            yield [child]
        elif child is not None:
            yield _suite(child.body)
    for handler in getattr(node, "handlers", ()):
        yield _suite(handler.body)
    for case in getattr(node, "cases", ()):
        yield _suite(case.body)


def _has_with(body: Sequence[cst.CSTNode], imports: ImportTable | None = None) -> bool:
    """Whether `body` has a `with` outside nested definitions; given `imports`, one that may
    enter a stream (a stream context call, or a context object bound elsewhere)."""
    for node in body:
        if isinstance(node, cst.With) and (
            imports is None
            or any(
                not isinstance(item.item, cst.Call) or imports.qualified(item.item.func) in STREAM_CONTEXTS
                for item in node.items
            )
        ):
            return True
        if (
            isinstance(node, cst.BaseCompoundStatement)
            and not isinstance(node, (cst.FunctionDef, cst.ClassDef))
            and any(_has_with(suite, imports) for suite in _suites(node))
        ):
            return True
    return False


def _tensor_params(function: cst.FunctionDef) -> frozenset[str]:
    """Parameters that may be tensors: unannotated ones (but `self`/`cls`), and those whose
    annotation names a tensor (`Tensor`, `Optional[torch.Tensor]`, `list[Tensor]`...)."""
    names = set()
    params = function.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        name = param.name.value
        if name in ("self", "cls"):
            continue
        annotation = param.annotation
        if annotation is not None and "Tensor" not in _code(annotation.annotation):
            continue
        names.add(name)
    return frozenset(names)
