"""Stream-flow analysis: an abstract interpreter that follows the current CUDA stream through
a function and reports the unordered cross-stream accesses the rules turn into findings.

State at each program point:
- the current stream (`<current>` outside any `with torch.cuda.stream(...)`, else the source
  text of the stream expression: `s`, `self.copy_stream`);
- per tensor-valued name or attribute: its possible last writes, its reads since then, its uses
  on streams other than the one that allocated it, and the streams passed to `record_stream`;
- ordering facts, kept on each access as the set of tokens ordered after it: stream names
  (`a.wait_stream(b)` adds `a` to every access that has `b`), `event:e` (added by a record
  on a stream the access has) and `*` (a host sync: every later launch is ordered after it).

Every set is built from the function's own nodes and names, so the lattice is finite: loops
are iterated to a fixpoint and branches join by union of accesses and intersection of facts,
so an ordering made on one branch only does not order the other.

Precision over recall, since a finding must be worth a reader's time:
- a value is a tensor when it comes from a torch op, an operator or method on a tensor, or a
  call given one; parameters count when unannotated or annotated as tensors. Values of unknown
  origin (parameters, attributes set elsewhere) are taken as ready: no producer, no finding;
- handing a tensor on (`return x`, `y = x`) is not a device read; passing it to unknown code,
  storing it or viewing it makes its lifetime someone else's (no CSL201);
- a helper defined in the module whose body starts with ordering calls has them replayed at its
  call sites; blocks on a stream that differs between paths are not judged.

Only functions (and module bodies) that contain a `with` statement are interpreted: without
one no second stream can appear (except through `torch.cuda.set_stream`, checked textually).
Positions are computed only when a module has hazards, since PositionProvider costs a parse.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal, TypedDict

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

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
from csan_lint.runtime import kinds

CURRENT = "<current>"
"""The stream that is current where the function is entered (the caller's)."""
HOST = "*"
"""Ordering token of a host sync: every later launch on any stream comes after the access."""
UNKNOWN = "?"
"""A name bound to different streams on different paths: blocks on it are not judged."""

_MAX_LOOP_PASSES = 8

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

    def with_marks(self, update: _MarkUpdate) -> _Tensor:
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

    def update_marks(self, update: _MarkUpdate) -> None:
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
class _Loop:
    current: str
    """The stream current in the loop body: `break` inside a stream block leaves the block too."""
    breaks: list[_State] = field(default_factory=list)
    continues: list[_State] = field(default_factory=list)


def _suite(node: cst.BaseSuite) -> Sequence[cst.BaseStatement | cst.BaseSmallStatement]:
    return node.body


def _code(node: cst.BaseExpression) -> str:
    """Source text of an expression; names and attributes without the cost of codegen."""
    return dotted_name(node) or cst.Module(body=[]).code_for_node(node)


class _FunctionAnalysis:
    """Interprets one function body (or a module body) and collects its hazards."""

    def __init__(
        self,
        imports: ImportTable,
        hazards: dict[tuple[object, ...], Hazard],
        *,
        function: str | None,
        params: frozenset[str] = frozenset(),
        helpers: _Helpers | None = None,
    ) -> None:
        self.imports = imports
        self.hazards = hazards
        self.function = function
        self.helpers = helpers
        self.substitution: dict[str, str] = {}
        """While a helper's summary is replayed: its parameters -> the caller's streams and events."""
        self.maybe_tensors = set(params)
        """Names of unknown values that may be tensors: parameters and loop targets."""
        self.state: _State | None = _State()
        self.silent = 0
        """Depth of blocks on an UNKNOWN stream: their accesses are taken as ordered, never judged."""
        self.block: cst.With | None = None
        self.statement: cst.CSTNode | None = None
        self.loops: list[_Loop] = []

    # ---- driver

    def run_function(self, body: cst.BaseSuite) -> None:
        self.run(_suite(body))
        if self.state is not None:
            self._release_all(None)

    def run(self, body: Sequence[cst.BaseStatement | cst.BaseSmallStatement]) -> None:
        for statement in body:
            if self.state is None:
                return
            self._statement(statement)

    def _statement(self, node: cst.BaseStatement | cst.BaseSmallStatement) -> None:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if self.state is None:
                    return
                self.statement = node
                self._small(small)
        elif isinstance(node, cst.If):
            self._if(node)
        elif isinstance(node, cst.With):
            self._with(node)
        elif isinstance(node, cst.For):
            self._for(node)
        elif isinstance(node, cst.While):
            self._while(node)
        elif isinstance(node, (cst.Try, cst.TryStar)):
            self._try(node)
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            self._forget(node.name.value)
        elif isinstance(node, cst.Match):
            self._header(node.subject)
            entry = self.state
            ends = []
            for case in node.cases:
                self.state = entry.copy() if entry is not None else None
                self.run(_suite(case.body))
                ends.append(self.state)
            self.state = _join([entry, *ends])
        elif isinstance(node, cst.BaseSmallStatement):
            self._small(node)

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

    def _header(self, expr: cst.BaseExpression) -> None:
        """Evaluates a compound statement's own expression; a finding there spans just it."""
        self.statement = expr
        self._eval(expr)

    def _condition(self, test: cst.BaseExpression) -> None:
        """`if t:` on a tensor copies its truth value to the host: a sync with the current stream.
        Only tensors made here count: a parameter tested is usually a flag, and taking it for a
        sync would hide the one-sided waits that branch on it."""
        self._header(test)
        if self.state is not None and self._tensor_operand(test, made_here=True):
            self.live.update_marks(_MarkUpdate(self.live.current, HOST))

    def _if(self, node: cst.If) -> None:
        self._condition(node.test)
        entry = self.state
        self.state = entry.copy() if entry is not None else None
        self.run(_suite(node.body))
        then = self.state
        self.state = entry
        if isinstance(node.orelse, cst.If):
            self._if(node.orelse)
        elif isinstance(node.orelse, cst.Else):
            self.run(_suite(node.orelse.body))
        self.state = _join([then, self.state])

    def _with(self, node: cst.With) -> None:
        stream: str | None = None
        for item in node.items:
            self.statement = item
            item_stream = self._context_stream(item.item)
            if item_stream is None:
                self._eval(item.item)
                if isinstance(item.item, cst.Call) and self.imports.qualified(item.item.func) == GRAPH_CAPTURE:
                    self.live.update_marks(_MarkUpdate(None, HOST))  # it synchronizes the device first
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

    def _loop(
        self,
        per_pass: cst.BaseExpression | None,
        bind: cst.BaseAssignTargetExpression | None,
        body: cst.BaseSuite,
        orelse: cst.Else | None,
    ) -> None:
        head = self.live
        for _ in range(_MAX_LOOP_PASSES):
            self.state = head.copy()
            self.loops.append(_Loop(head.current))
            if per_pass is not None:
                self._condition(per_pass)
            if bind is not None:
                self.statement = bind
                self._bind(bind, _Value("other"))
            self.run(_suite(body))
            loop = self.loops.pop()
            new_head = _join([head, self.state, *loop.continues])
            assert new_head is not None  # `head` is live
            if new_head == head:
                break
            head = new_head
        self.state = head.copy()
        if per_pass is not None:
            self._condition(per_pass)
        if orelse is not None:
            self.run(_suite(orelse.body))
        self.state = _join([self.state, *loop.breaks])

    def _for(self, node: cst.For) -> None:
        self._header(node.iter)
        self.maybe_tensors.update(_names(node.target))
        self._loop(None, node.target, node.body, node.orelse)

    def _while(self, node: cst.While) -> None:
        self._loop(node.test, None, node.body, node.orelse)

    def _try(self, node: cst.Try | cst.TryStar) -> None:
        raised_from: list[_State | None] = []
        """Handlers may start after any statement of the body: the join of all those points."""
        for statement in _suite(node.body):
            raised_from.append(self.state.copy() if self.state is not None else None)
            if self.state is not None:
                self._statement(statement)
        body_end = self.state
        raised_from.append(body_end)
        ends = []
        for handler in node.handlers:
            self.state = _join(raised_from)
            self.run(_suite(handler.body))
            ends.append(self.state)
        self.state = body_end
        if node.orelse is not None:
            self.run(_suite(node.orelse.body))
        self.state = _join([self.state, *ends])
        if node.finalbody is not None:
            self.run(_suite(node.finalbody.body))

    # ---- bindings

    @property
    def live(self) -> _State:
        """The state of the path being interpreted: helpers run only while it is reachable."""
        assert self.state is not None
        return self.state

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
        if owned:
            self._release(key, target)
        self._forget(key)
        state = self.live
        if value.kind == "tensor":
            mark = _Mark(self._make_access(target, write=True), frozenset({state.current}))
            state.tensors[key] = _Tensor(writes=frozenset({mark}), alloc=state.current if owned else None)
        elif value.kind == "alias" and value.source in state.tensors:
            source = state.tensors[value.source]
            state.tensors[key] = replace(source, uses=frozenset(), alloc=None, recorded=frozenset())
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
        for child in expr.children:
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
        elif isinstance(node, cst.Yield) and isinstance(node.value, cst.BaseExpression):
            self._pass(node.value)
        elif isinstance(node, (cst.Lambda, cst.FunctionDef)):
            return
        elif isinstance(node, (cst.BinaryOperation, cst.BooleanOperation)):
            for operand in _operands(node):
                self._eval(operand)
        else:
            for child in node.children:
                self._eval(child)

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
                self.live.update_marks(_MarkUpdate(None, HOST))
            elif qualified == SET_STREAM and node.args:
                stream = self._stream(node.args[0].value)
                if stream is not None:
                    self.live.current = stream
            elif in_place:
                self._write_target(node.args[0].value)
            self._write_out(node)
            return
        if self.helpers is not None:
            summary = self.helpers.summary(self.function, func)
            if summary is not None:
                self._replay(summary, node)
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
                self.live.update_marks(_MarkUpdate(self.live.current, HOST))
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
                self.live.update_marks(_MarkUpdate(self.live.current, HOST))
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
                self.live.update_marks(_MarkUpdate(producer, waiter))
        elif method == "wait_event" and args:
            waiter, event = self._stream(receiver), self._event(args[0])
            if waiter is not None and event is not None:
                self.live.update_marks(_MarkUpdate(event, waiter))
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
                self.live.update_marks(_MarkUpdate(event, waiter))
        elif method == "synchronize" and not args and dotted_name(receiver) not in self.live.tensors:
            stream, event = self._stream(receiver), self._event(receiver)
            for token in (stream, event):
                if token is not None:
                    self.live.update_marks(_MarkUpdate(token, HOST))
        else:
            return False
        return True

    def _replay(self, summary: _Summary, call: cst.Call) -> None:
        """The ordering a same-module helper always makes, in the caller's streams."""
        mapping: dict[str, str] = {}
        positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
        for param, value in zip(summary.params, positional, strict=False):  # fewer arguments: defaults
            stream = self._stream(value)
            if stream is not None:
                mapping[param] = stream
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value in summary.params:
                stream = self._stream(arg.value)
                if stream is not None:
                    mapping[arg.keyword.value] = stream
        if not set(summary.needs) <= mapping.keys():
            return  # a parameter left to its default: its stream is unknown here
        self.substitution = mapping
        for ordering in summary.calls:
            if self.imports.qualified(ordering.func) == DEVICE_SYNC:
                self.live.update_marks(_MarkUpdate(None, HOST))
            elif isinstance(ordering.func, cst.Attribute):
                self._stream_method(ordering, ordering.func)
        self.substitution = {}

    def _record(self, token: str, stream: str) -> None:
        """Re-recording an event replaces what it captured."""
        self.live.update_marks(_MarkUpdate(stream, token, drop=token))

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
        if isinstance(expr, cst.Name) and expr.value in self.substitution:
            return self.substitution[expr.value]
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
                return _Value("tensor")
            return _Value("other")
        func = expr.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in _HOST_METHODS or method in ("item", "tolist"):
                return _Value("other")
            if method in _VIEW_METHODS:
                return self._alias_of(func.value)
            if method in _TENSOR_METHODS or self._is_tensor(func.value, made_here=made_here):
                return _Value("tensor")
        elif isinstance(func, cst.Name) and func.value in _PURE_BUILTINS:
            return _Value("other")
        if any(self._is_tensor(arg.value, made_here=made_here) for arg in expr.args):
            return _Value("tensor")
        return _Value("other")

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
        return Access(node, self.live.current, write, self.block or self.statement)

    def _access(self, key: str, node: cst.CSTNode, *, write: bool) -> None:
        """A kernel on the current stream reads or writes `key`: check it, then record it."""
        tensor = self.live.tensors.get(key) or _Tensor()
        access = self._make_access(node, write=write)
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
                self._hazard(kind, key, access, last.access.stream)
        if write:
            for read in tensor.reads:
                if read.access.stream != stream and not read.orders(stream):
                    self._hazard(HazardKind.WRITE_AFTER_READ, key, access, read.access.stream)
        mark = _Mark(access, frozenset({stream}))
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
    ) -> None:
        """Once per access and other stream: the first release found is the one reported."""
        hazard = Hazard(kind, tensor, access, other, release, self.function)
        self.hazards.setdefault((kind, tensor, access.node, other), hazard)


@dataclass(frozen=True)
class _Value:
    kind: Literal["tensor", "alias", "stream", "context", "event", "other"]
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
    _positions: Mapping[cst.CSTNode, CodeRange] | None = field(default=None, repr=False)
    source: str = field(default="", repr=False)
    """The module's text, for rules that prefilter on it (hostflow.py)."""

    def range(self, node: cst.CSTNode) -> CodeRange:
        if self._positions is None:
            wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
            self._positions = wrapper.resolve(PositionProvider)
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


def message_fields(hazard: Hazard) -> dict[str, str]:
    """What rule templates may name: `{tensor}`; `{stream}` (the offending access's) and `{other}`
    as prose ("side stream 's'"), `{stream_code}` and `{other_code}` as code for fixes; `{verb}`."""
    return {
        "tensor": hazard.tensor,
        "stream": _describe(hazard.access.stream),
        "other": _describe(hazard.other),
        "stream_code": _expression(hazard.access.stream),
        "other_code": _expression(hazard.other),
        "verb": "written" if hazard.access.write else "read",
    }


def _describe(stream: str) -> str:
    return "the current stream" if stream == CURRENT else f"side stream '{stream}'"


def _expression(stream: str) -> str:
    return "torch.cuda.current_stream()" if stream == CURRENT else stream


def analyse(module: cst.Module, path: str, source: str) -> ModuleFlow:
    """Interprets the module body and every function that has a `with` statement."""
    imports = ImportTable()
    functions: list[tuple[str, cst.FunctionDef]] = []
    module_has_with = _scan(module.body, imports, functions, "")
    hazards: dict[tuple[object, ...], Hazard] = {}
    if imports.imports_torch:
        everywhere = "set_stream" in source
        helpers = _Helpers(imports, dict(functions))
        if module_has_with or everywhere:
            _FunctionAnalysis(imports, hazards, function=None, helpers=helpers).run(module.body)
        for name, function in functions:
            if everywhere or _has_with(_suite(function.body)):
                analysis = _FunctionAnalysis(
                    imports, hazards, function=name, params=_tensor_params(function), helpers=helpers
                )
                analysis.run_function(function.body)
    return ModuleFlow(path, module, list(hazards.values()), source=source)


_ORDERING_METHODS = frozenset({"wait_stream", "wait_event", "record_event", "record", "wait", "synchronize"})


@dataclass(frozen=True)
class _Summary:
    """The ordering calls a helper makes unconditionally before anything else, in its own names."""

    params: tuple[str, ...]
    """Positional parameters, without `self`/`cls`."""
    needs: frozenset[str]
    """The parameters those calls name: a call site must pass them all."""
    calls: tuple[cst.Call, ...]


class _Helpers:
    """Summaries of the module's own functions and methods, built on first call."""

    def __init__(self, imports: ImportTable, functions: dict[str, cst.FunctionDef]) -> None:
        self.imports = imports
        self.functions = functions
        self.summaries: dict[str, _Summary | None] = {}

    def summary(self, caller: str | None, func: cst.BaseExpression) -> _Summary | None:
        """`helper(...)` names a module-level function; `self.helper(...)` a method of the caller's class."""
        if isinstance(func, cst.Name):
            name = func.value
        elif (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value in ("self", "cls")
            and caller is not None
            and "." in caller
        ):
            name = f"{caller.rsplit('.', 1)[0]}.{func.attr.value}"
        else:
            return None
        if name not in self.summaries:
            function = self.functions.get(name)
            self.summaries[name] = None if function is None else self._summarise(function)
        return self.summaries[name]

    def _summarise(self, function: cst.FunctionDef) -> _Summary | None:
        params = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
        if params and params[0] in ("self", "cls"):
            params = params[1:]
        allowed = {*params, "self", "cls"}
        calls: list[cst.Call] = []
        needs: set[str] = set()
        for statement in _suite(function.body):
            if not isinstance(statement, cst.SimpleStatementLine):
                break  # what follows a branch or a loop may not run
            for small in statement.body:
                if isinstance(small, (cst.Return, cst.Raise)):
                    break
                if not (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)):
                    continue
                call = small.value
                is_sync = self.imports.qualified(call.func) == DEVICE_SYNC
                if not is_sync and not (
                    isinstance(call.func, cst.Attribute) and call.func.attr.value in _ORDERING_METHODS
                ):
                    continue
                roots = _roots(call)
                if roots is None or not roots <= allowed | self.imports.names:
                    continue  # names a local of the helper: meaningless at the call site
                calls.append(call)
                needs |= roots & set(params)
            else:
                continue
            break
        return _Summary(tuple(params), frozenset(needs), tuple(calls)) if calls else None


def _roots(node: cst.CSTNode) -> set[str] | None:
    """The free names of a call made of names, attributes, calls and arguments; None if it has more."""
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, cst.Attribute):
        return _roots(node.value)
    if isinstance(node, cst.Arg):
        return _roots(node.value)
    if isinstance(node, cst.Call):
        roots = _roots(node.func)
        for arg in node.args:
            arg_roots = _roots(arg)
            if roots is None or arg_roots is None:
                return None
            roots |= arg_roots
        return roots
    return None


def _scan(
    body: Sequence[cst.CSTNode],
    imports: ImportTable,
    functions: list[tuple[str, cst.FunctionDef]],
    prefix: str,
) -> bool:
    """Collects imports and function definitions; True if `body` itself has a `with` (not in a def)."""
    has_with = False
    for node in body:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    imports.add(small)
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            name = f"{prefix}{node.name.value}"
            if isinstance(node, cst.FunctionDef):
                functions.append((name, node))
            _scan(_suite(node.body), imports, functions, f"{name}.")
        elif isinstance(node, cst.BaseCompoundStatement):
            has_with |= isinstance(node, cst.With)
            for suite in _suites(node):
                has_with |= _scan(suite, imports, functions, prefix)
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


def _has_with(body: Sequence[cst.CSTNode]) -> bool:
    for node in body:
        if isinstance(node, cst.With):
            return True
        if (
            isinstance(node, cst.BaseCompoundStatement)
            and not isinstance(node, (cst.FunctionDef, cst.ClassDef))
            and any(_has_with(suite) for suite in _suites(node))
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
