"""Values: which expressions may be tensors, which are aliases (views, copies of a reference),
streams, stream contexts or events, and which uses of a tensor launch no kernel.

Precision over recall, since a finding must be worth a reader's time:
- a value is a tensor when it comes from a torch op, an operator or method on a tensor, or a
  call given one; parameters count when unannotated or annotated as tensors, and so do names
  copied from them (comprehension targets shadow enclosing names: their own scope). Values of unknown
  origin (parameters, attributes set elsewhere) are taken as ready: no producer, no finding;
- host memory (`pin_memory=True`, `device="cpu"`, `.pin_memory()`) is allocated by no kernel;
- handing a tensor on (`return x`, `y = x`) is not a device read; passing it to unknown code,
  storing it or viewing it makes its lifetime someone else's (no CSL201).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, TypeGuard

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis import assumptions as assumed
from csan_lint.lint.analysis.api import Direction, Kind
from csan_lint.lint.analysis.tokens import choice, root
from csan_lint.lint.annotations import returns_host_value
from csan_lint.lint.containers import (
    COMPREHENSIONS,
    comprehension_targets,
    joined_stream_collections,
    made_by_comprehension,
)
from csan_lint.lint.devices import (
    Place,
    allocated_on_host,
    default_device,
    place_of_result,
    placed_by_default,
    unknown_place,
)
from csan_lint.lint.names import (
    EVENT_CONSTRUCTORS,
    STREAM_CONSTRUCTORS,
    STREAM_VALUES,
    ImportTable,
    dotted_name,
)
from csan_lint.lint.nodes import children
from csan_lint.lint.ordering import FlowState
from csan_lint.lint.regions import Region, region_of
from csan_lint.lint.vocabulary import (
    ALLOCATING_METHODS,
    ALLOCATORS,
    BARRIERS,
    CONTAINER_BUILTINS,
    HOST_METHODS,
    HOST_TENSORS,
    HOST_TORCH,
    PURE_BUILTINS,
    TENSOR_METHODS,
    TENSOR_MODULES,
    VIEW_ATTRIBUTES,
    VIEW_METHODS,
)

if TYPE_CHECKING:
    from csan_lint.lint.effects import Helpers


def code_of(node: cst.BaseExpression) -> str:
    """Source text of an expression; names and attributes without the cost of codegen."""
    return dotted_name(node) or cst.Module(body=[]).code_for_node(node)


@dataclass(frozen=True)
class Value:
    kind: Literal[
        "tensor", "result", "unknown", "allocation", "host", "alias", "stream", "streams", "context", "event", "other"
    ]
    """`host`: a tensor allocated in host memory, which no stream writes; `allocation`: device
    memory allocated and not yet written; `result`: what unknown code returned when given a
    tensor, which may be one; `unknown`: what it returned given none, a tensor only where the
    function uses it as one (`used_as_tensors`); `streams`: a list or tuple of streams (`items`,
    as tokens)."""
    source: str | None = None
    items: tuple[str, ...] = ()
    region: Region | None = None
    """For an alias made by a basic index (`top = buf[:, :1]`), the part of `source` it is."""
    assumed: frozenset[str] = frozenset()
    """The assumptions under which it is device memory at all (lint/analysis/assumptions.py): a
    `result`'s, a factory's that names no device."""
    listed: bool = False
    """A list of such values a comprehension (or, of streams, a sum of lists) made, its items
    summarized as one: assigning an item replaces it in the list, writing no tensor; no index
    picks a known item."""
    moved_from: str | None = None
    """For a copy of `x` not known to go to the host (`x.to("cuda")`, `x.to(device)`), `x`:
    the result is `x` itself where it is there already, or `x` was host memory (a copy to the
    host of device memory is the one move that leaves device memory behind; lint/devices.py)."""


_MADE_TENSORS = frozenset({"tensor", "allocation", "host"})
"""Values made where they are computed: a list of them made by a comprehension is one such value,
each of its items written where the list was made."""


def is_constructor(name: str) -> bool:
    """`Holder`, `_Result`: a class by its spelling; building an object stores its arguments."""
    name = name.lstrip("_")
    return name[:1].isupper() and any(c.islower() for c in name)


def index_names(index: cst.BaseSlice) -> Iterator[str]:
    """Names an index computes with (`i`, `i * n + k`): used as indices, they are numbers."""
    if isinstance(index, cst.Index):
        yield from number_names(index.value)


def number_names(value: cst.BaseExpression) -> Iterator[str]:
    """The names and attributes an arithmetic expression is computed from (`i * n + k`)."""
    stack = [value]
    while stack:
        expr = stack.pop()
        if isinstance(expr, cst.BinaryOperation):
            stack.extend(operands(expr))
        elif (key := dotted_name(expr)) is not None and isinstance(expr, (cst.Name, cst.Attribute)):
            yield key


def freed_storage(call: cst.Call) -> str | None:
    """`x` for `x.untyped_storage().resize_(0)` (or `.storage()`): frees x's memory now."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and api.method_op(func.attr.value)[0] == api.FREE and len(call.args) == 1):
        return None
    size, storage = call.args[0].value, func.value
    if not (isinstance(size, cst.Integer) and size.value == "0" and isinstance(storage, cst.Call)):
        return None
    owner = storage.func
    if isinstance(owner, cst.Attribute) and owner.attr.value in ("storage", "untyped_storage") and not storage.args:
        return dotted_name(owner.value)
    return None


def called_or_named(expr: cst.BaseExpression) -> Iterator[str]:
    """The dotted names in `expr` (`return y, done` -> y, done; `return out, self.event`)."""
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        key = dotted_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        if key is not None:
            yield key
        else:
            stack.extend(children(node))


def is_host_test(node: cst.CSTNode) -> TypeGuard[cst.Comparison]:
    """`x is None`, `a is not b`: compares Python objects; `"exp_avg" in state`: a key or a
    substring looked up, which no tensor holds. A Python bool, no kernel."""
    if not isinstance(node, cst.Comparison):
        return False
    if all(isinstance(target.operator, (cst.Is, cst.IsNot)) for target in node.comparisons):
        return True
    [*_, last] = node.comparisons
    return (
        len(node.comparisons) == 1
        and isinstance(last.operator, (cst.In, cst.NotIn))
        and isinstance(node.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
    )


def builds_sequence(expr: cst.BinaryOperation) -> bool:
    """`fmt + "_" + fmt`, `"%s" % x`, `[None] * n`: an operator with a string, list or tuple
    literal operand makes a str or a sequence (with a tensor operand it raises, formats the
    tensor on the host, or repeats the reference): no tensor."""
    return any(map(_literal_sequence, operands(expr)))


def _literal_sequence(expr: cst.BaseExpression) -> bool:
    """A string, list or tuple literal, or a choice between two (`(x, s) if c else (x,)`)."""
    if isinstance(expr, cst.IfExp):
        return _literal_sequence(expr.body) and _literal_sequence(expr.orelse)
    strings = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString, cst.List, cst.Tuple)
    return isinstance(expr, strings)


def stores_in_container(target: cst.Subscript, value: Value) -> bool:
    """`state["buf"] = v`, `state[key] = torch.empty_like(x)`: a key no tensor is indexed by
    (a string), or a new uninitialized buffer, which no code copies into a tensor's elements:
    a reference stored in a dict or list, no GPU write."""
    keys = [index.slice.value for index in target.slice if isinstance(index.slice, cst.Index)]
    strings = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
    return value.kind in ("allocation", "host") or any(isinstance(key, strings) for key in keys)


def is_async_collective(imports: ImportTable, call: cst.Call) -> bool:
    """`dist.all_reduce(t, async_op=True)`: returns a `Work` handle, no tensor."""
    qualified = imports.qualified(call.func)
    return (
        qualified is not None
        and qualified.startswith("torch.distributed.")
        and any(
            arg.keyword is not None and arg.keyword.value == "async_op" and not _is_false(arg.value)
            for arg in call.args
        )
    )


def is_barrier(qualified: str | None, call: cst.Call) -> bool:
    """`dist.barrier()` (`qualified`: what its callee names): a host sync with the current
    stream (not with `async_op=True`)."""
    return qualified in BARRIERS and not any(
        arg.keyword is not None and arg.keyword.value == "async_op" and not _is_false(arg.value) for arg in call.args
    )


def _is_false(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value in ("False", "None")


def operands(expr: cst.BinaryOperation | cst.BooleanOperation) -> list[cst.BaseExpression]:
    """`a + b + c` left to right, without recursing down the left spine: long chains of `+`
    (generated code, string building) would exceed the interpreter's recursion limit."""
    rights = []
    left: cst.BaseExpression = expr
    while isinstance(left, type(expr)):
        rights.append(left.right)
        left = left.left
    return [left, *reversed(rights)]


def _leaves(expr: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The operands of nested operators (`a * b + c`: `a`, `b`, `c`); any other expression is its own."""
    if isinstance(expr, cst.BinaryOperation):
        for operand in operands(expr):
            yield from _leaves(operand)
    elif isinstance(expr, cst.UnaryOperation):
        yield from _leaves(expr.expression)
    elif isinstance(expr, cst.Comparison):
        for part in (expr.left, *(target.comparator for target in expr.comparisons)):
            yield from _leaves(part)
    else:
        yield expr


def is_reference(expr: cst.CSTNode) -> bool:
    """Names, attributes, literal containers of them and a choice between them on a Python test
    (`(x, s) if s is not None else x`): passing them around launches no kernel."""
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(is_reference(element.value) for element in expr.elements)
    if isinstance(expr, cst.IfExp):
        return is_host_test(expr.test) and is_reference(expr.body) and is_reference(expr.orelse)
    if isinstance(expr, cst.StarredElement):
        return is_reference(expr.value)
    return isinstance(expr, (cst.Name, cst.Attribute)) and dotted_name(expr) is not None


def copied_to_host(expr: cst.BaseExpression) -> bool:
    """`x.cpu()`, `x.to("cpu", ...)`, `x.to(device="cpu")`: host memory, from no stream's pool."""
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)):
        return False
    op = api.method_op(expr.func.attr.value)[0]
    if op is not None and op.kind is Kind.COPY and op.direction is Direction.TO_HOST:
        return True
    devices = [arg.value for arg in expr.args if arg.keyword is None or arg.keyword.value == api.DEVICE_KEYWORD][:1]
    return (
        op == api.COPY_EITHER
        and bool(devices)
        and isinstance(devices[0], cst.SimpleString)
        and str(devices[0].evaluated_value).partition(":")[0] == "cpu"
    )


def inplace_root(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x` of `x.sub_(m).div_(s)`: what a chain of in-place methods returns; None if `expr`
    is no in-place call."""
    root = None
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and is_inplace(expr.func.attr.value):
        root = expr = expr.func.value
    return root


def is_inplace(method: str) -> bool:
    return method.endswith("_") and not method.startswith("_") and method not in HOST_METHODS


class Values:
    """The value half of `FunctionAnalysis`: what an expression may be, in the state at hand."""

    imports: ImportTable
    maybe_tensors: set[str]
    """Names of unknown values that may be tensors: parameters and loop targets."""
    used_as_tensors: frozenset[str]
    """Names the function uses as tensors (`scan.used_as_tensors`)."""
    state: FlowState | None
    live: FlowState
    function: str | None
    helpers: Helpers | None
    _stream: Callable[[cst.BaseExpression], str | None]
    _context_stream: Callable[[cst.BaseExpression], str | None]
    _returns_fresh: Callable[[cst.Call], bool]
    _assumes: Callable[[str], bool]

    def _escape_names(self, expr: cst.CSTNode) -> None:
        for key in self._tensor_names(expr):
            self.live.tensors[key] = replace(self.live.tensors[key], escaped=True)

    def _tensor_names(self, expr: cst.CSTNode) -> Iterator[str]:
        if self.state is None or not self.live.tensors:
            return
        key = dotted_name(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if key is not None and key in self.live.tensors:
            yield key
            return
        if isinstance(expr, (cst.Lambda, cst.BinaryOperation, cst.Comparison)):
            return  # an operator result is a new tensor
        if isinstance(expr, COMPREHENSIONS):
            targets = comprehension_targets(expr)
            for child in children(expr):
                yield from (key for key in self._tensor_names(child) if root(key) not in targets)
            return
        for child in children(expr):
            yield from self._tensor_names(child)

    # ---- values

    def _value(self, expr: cst.BaseExpression) -> Value:
        """What an assignment binds: a new tensor, an alias of a tracked one, a stream..."""
        tensors = self.live.tensors
        key = dotted_name(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if key is not None:
            if key in tensors:
                self._escape_names(expr)
                return Value("alias", key)
            if key in self.live.streams:
                return Value("stream", self.live.streams[key])
            if key in self.live.contexts:
                return Value("context", self.live.contexts[key])
            if key in self.maybe_tensors:
                return Value("alias", key)  # of a value that may be a tensor: so may the copy
        if isinstance(expr, cst.Await):
            return self._value(expr.expression)
        if isinstance(expr, cst.Attribute) and expr.attr.value in VIEW_ATTRIBUTES:
            return self._alias_of(expr.value)
        if isinstance(expr, cst.Subscript):
            return replace(self._alias_of(expr.value), region=region_of(expr))
        if isinstance(expr, cst.BinaryOperation) and (parts := joined_stream_collections(expr, self.live.streams)):
            return Value("streams", items=parts, listed=True)
        if isinstance(expr, cst.BinaryOperation) and builds_sequence(expr):
            return Value("other")
        if isinstance(expr, (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison)):
            return self._operation_value(expr)
        if isinstance(expr, (cst.Tuple, cst.List)) and self._streams_listed(expr):
            items = tuple(self._stream(element.value) or "None" for element in expr.elements)
            return Value("streams", items=items)
        if isinstance(expr, (cst.Tuple, cst.List, cst.Set, cst.Dict)):
            self._escape_names(expr)
            return Value("other")
        if isinstance(expr, cst.Call) and (made := made_by_comprehension(expr)) is not None:
            expr = made  # `list(x.new_ones(n) for n in ns)`
        if isinstance(expr, (cst.ListComp, cst.GeneratorExp)) and self._assumes_lists():
            made_value = self._value(expr.elt)  # `[torch.randn(n) for _ in r]`: its items, as one tensor
            return replace(made_value, listed=True) if made_value.kind in _MADE_TENSORS else Value("other")
        if isinstance(expr, cst.Call):
            return self._call_value(expr)
        if isinstance(expr, cst.IfExp):
            return self._choice_value(expr)
        return Value("other")

    def _operation_value(self, expr: cst.BinaryOperation | cst.UnaryOperation | cst.Comparison) -> Value:
        """An operator's result: a tensor where an operand is one a torch op made; where an
        operand only may be one (a parameter: `i * n + k` may be numbers), a result, a tensor
        under the assumptions its operands are taken for one under (unseen code's results)."""
        if self._torch_operand(expr):
            return Value("tensor")
        if not self._tensor_operand(expr):
            return Value("other")
        taken = (self._taken_tensor(leaf) for leaf in _leaves(expr))
        return Value("result", assumed=frozenset().union(*taken))

    def _taken_tensor(self, operand: cst.BaseExpression) -> frozenset[str]:
        """The assumptions under which an operand is taken for a tensor (none: a torch op's, a
        parameter's, or not one at all)."""
        if isinstance(operand, cst.Call):
            return self._call_value(operand).assumed
        key = dotted_name(operand.value if isinstance(operand, cst.Subscript) else operand)
        return self._assumed_of(key) if key is not None else frozenset()

    def _assumed_of(self, key: str) -> frozenset[str]:
        """The assumptions under which `key`'s value is a tensor at all (unseen code's result)."""
        tensor = self.live.tensors.get(key) if self.state is not None else None
        return tensor.assumed if tensor is not None else frozenset()

    def _assumed_result(self, assumptions: frozenset[str]) -> Value:
        """A value that is a tensor only if `assumptions` hold; where one does not, no tensor."""
        return Value("result", assumed=assumptions) if all(map(self._assumes, assumptions)) else Value("other")

    def _assumes_lists(self) -> bool:
        return self.helpers is not None and self._assumes(assumed.COMPREHENDED_LISTS_ARE_TENSORS)

    def _choice_value(self, expr: cst.IfExp) -> Value:
        """A stream chosen at run time binds one of its sides (`self.s1 if c else self.s0`,
        `torch.cuda.current_stream() if c else None`); `nullcontext() if c else
        torch.cuda.stream(s)` binds a stream context."""
        sides = (expr.body, expr.orelse)
        chosen = [side for side in sides if not (isinstance(side, cst.Name) and side.value == "None")]
        if chosen and all(map(self._is_stream, chosen)):
            return Value("stream", choice(map(self._stream, chosen)))
        context = self._context_stream(expr) if any(isinstance(side, cst.Call) for side in sides) else None
        return Value("context", context) if context is not None else Value("other")

    def _streams_listed(self, expr: cst.Tuple | cst.List) -> bool:
        """A literal list of streams: one known stream, and names or attributes besides it
        (`[torch.cuda.current_stream(), cp_stream]`)."""
        values = [element.value for element in expr.elements if not isinstance(element, cst.StarredElement)]
        return (
            len(values) == len(expr.elements)
            and any(map(self._is_stream, values))
            and all(self._is_stream(value) or dotted_name(value) is not None for value in values)
        )

    def _is_stream(self, expr: cst.BaseExpression) -> bool:
        """Known for a stream: made by a stream call, bound to one here or anywhere in the module."""
        if isinstance(expr, cst.Call):
            return self.imports.qualified(expr.func) in STREAM_VALUES
        key = dotted_name(expr)
        return key is not None and (key in self.live.streams or self.imports.binds_stream(key))

    def _alias_of(self, expr: cst.BaseExpression) -> Value:
        key = dotted_name(expr)
        if key is not None and key in self.live.tensors:
            self._escape_names(expr)
            return Value("alias", key)
        return Value("other")

    def _call_value(self, expr: cst.Call, *, made_here: bool = False) -> Value:
        qualified = self.imports.qualified(expr.func)
        if self.imports.stream_call(expr) is not None:
            return Value("stream", self._stream(expr))
        if qualified in STREAM_CONSTRUCTORS:
            return Value("stream")
        if (context := self._context_stream(expr)) is not None:
            return Value("context", context)  # also a partial of one, or a module function's
        if qualified is not None:
            if qualified in EVENT_CONSTRUCTORS:
                return Value("event")
            module = qualified.rpartition(".")[0]
            if qualified in HOST_TENSORS or (
                module in TENSOR_MODULES and allocated_on_host(expr, self.imports, default_device(self._assumes))
            ):
                return Value("host")
            rests = frozenset({assumed.FACTORIES_ON_DEVICE}) if placed_by_default(expr, self.imports) else frozenset()
            if qualified in ALLOCATORS:
                return Value("allocation", assumed=rests)
            if module in TENSOR_MODULES and qualified not in HOST_TORCH:
                return Value("tensor", assumed=rests)
            if qualified.partition(".")[0] == "torch" or api.function(qualified) is not None:
                return Value("other")
            return Value("unknown")  # another package's function: a tensor where the body uses one
        func = expr.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            op = api.method_op(method)[0]
            if method in HOST_METHODS or op == api.HOST_READ:
                return Value("other")
            if op == api.PIN:
                return Value("host")
            if method in VIEW_METHODS:
                return self._alias_of(func.value)
            if is_inplace(method) and (receiver := self._inplace_receiver(func.value)) is not None:
                return receiver  # `x.sub_(m).div_(s)` is `x`
            if method in ALLOCATING_METHODS:
                return Value("allocation")
            if op is not None and op.kind is Kind.COPY and op != api.COPY_INTO:
                if place_of_result(expr, self.imports, unknown_place, default_device(self._assumes)) is not Place.HOST:
                    return Value("tensor", moved_from=dotted_name(func.value))
            if method in TENSOR_METHODS or self._is_tensor(func.value, made_here=made_here):
                return Value("tensor")
        elif isinstance(func, cst.Name) and (func.value in PURE_BUILTINS or func.value in CONTAINER_BUILTINS):
            return Value("other")
        if self.helpers is not None and returns_host_value(self.helpers.defined(self.function, func)):
            return Value("other")  # `def nbytes(x: Tensor) -> int`
        if any(self._is_tensor(arg.value, made_here=made_here) for arg in expr.args):
            return self._assumed_result(frozenset({assumed.UNSEEN_RESULTS_ARE_TENSORS}))
        return Value("unknown")

    def _inplace_receiver(self, expr: cst.BaseExpression) -> Value | None:
        """What a chain of in-place methods returns: the tensor it starts from (`x` of
        `x.sub_(m)`, the result of `x.float()` in `x.float().sub_(m)`), if known."""
        expr = inplace_root(expr) or expr
        if isinstance(expr, cst.Call):
            value = self._call_value(expr)
            return value if value.kind in ("tensor", "allocation") else None
        key = dotted_name(expr)
        return Value("alias", key) if key is not None and key in self.live.tensors else None

    def _fresh(self, expr: cst.BaseExpression) -> bool:
        """Whether `expr` certainly makes a new device tensor: a torch op, a method every tensor
        has (not a method of a value that only may be a tensor, nor a copy to the host), or a
        function whose summary allocates what it returns (`_returns_fresh`)."""
        if isinstance(expr, (cst.BinaryOperation, cst.UnaryOperation)):
            return self._torch_operand(expr)
        if not isinstance(expr, cst.Call) or copied_to_host(expr):
            return False
        root = inplace_root(expr)
        if root is not None:
            return self._fresh(root)
        if self._moves_unplaced(expr):
            return self._assumes(assumed.MOVES_ALLOCATE)
        qualified = self.imports.qualified(expr.func)
        if qualified is not None:
            kind = self._call_value(expr).kind
            return qualified.rpartition(".")[0] in TENSOR_MODULES and kind in ("tensor", "allocation")
        method = expr.func.attr.value if isinstance(expr.func, cst.Attribute) else None
        return method in TENSOR_METHODS or method in ALLOCATING_METHODS or self._returns_fresh(expr)

    def _moves_unplaced(self, expr: cst.Call) -> bool:
        """`x.to(device)`, `x.cuda()` of a tensor not known to be host memory: `x` itself where
        it is on that device already, new memory only under `moves-of-unplaced-tensors-allocate`."""
        op = api.method_op(expr.func.attr.value)[0] if isinstance(expr.func, cst.Attribute) else None
        if op is None or op.kind is not Kind.COPY:
            return False  # most calls: no value to work out
        moved = self._call_value(expr).moved_from
        if moved is None:
            return False
        source = self.live.tensors.get(moved) if self.state is not None else None
        return source is None or not source.host

    def _is_tensor(self, expr: cst.BaseExpression, *, made_here: bool = False) -> bool:
        """A tracked tensor or a name that may be one; `made_here`: one this function wrote."""
        key = dotted_name(expr)
        if key is None:
            return False
        if made_here:
            tensor = self.live.tensors.get(key)
            return tensor is not None and any(mark.access.produced != "by the caller" for mark in tensor.writes)
        return key in self.live.tensors or key in self.maybe_tensors

    def _key_lookup(self, node: cst.CSTNode) -> TypeGuard[cst.Comparison]:
        """`key in state`, `key not in state`: a value this function did not make, tested for
        membership, is taken as a dict or list (a tensor's `in` compares elements, and is rare):
        a host lookup, no kernel."""
        if not (isinstance(node, cst.Comparison) and len(node.comparisons) == 1):
            return False
        [test] = node.comparisons
        container = test.comparator
        return (
            isinstance(test.operator, (cst.In, cst.NotIn))
            and isinstance(container, (cst.Name, cst.Attribute))
            and not self._is_tensor(container, made_here=True)
        )

    def _torch_operand(self, expr: cst.BaseExpression) -> bool:
        """Whether an operator's operands include a tensor a torch op made (not only values of
        unknown kind, such as parameters, which may be numbers)."""
        for leaf in _leaves(expr):
            if isinstance(leaf, cst.Call):
                if self._call_value(leaf).kind == "tensor":
                    return True
                continue
            key = dotted_name(leaf.value if isinstance(leaf, cst.Subscript) else leaf)
            tensor = self.live.tensors.get(key) if key is not None else None
            if tensor is not None and tensor.writes and not tensor.unsure:
                return True
        return False

    def _tensor_operand(self, expr: cst.BaseExpression, *, made_here: bool = False) -> bool:
        if isinstance(expr, cst.BinaryOperation):
            return any(self._tensor_operand(operand, made_here=made_here) for operand in operands(expr))
        if isinstance(expr, cst.UnaryOperation):
            return self._tensor_operand(expr.expression, made_here=made_here)
        if isinstance(expr, cst.Comparison):
            if is_host_test(expr):
                return False  # a Python bool, no kernel
            if all(isinstance(target.operator, (cst.In, cst.NotIn)) for target in expr.comparisons):
                # `k in seen` is `seen.__contains__(k)`: a kernel only where the container is a tensor
                return any(self._tensor_operand(t.comparator, made_here=made_here) for t in expr.comparisons)
            return self._tensor_operand(expr.left, made_here=made_here) or any(
                self._tensor_operand(target.comparator, made_here=made_here) for target in expr.comparisons
            )
        if isinstance(expr, cst.Call):
            return self._call_value(expr, made_here=made_here).kind in ("tensor", "result")
        if isinstance(expr, cst.Subscript):
            return self._is_tensor(expr.value, made_here=made_here)
        return self._is_tensor(expr, made_here=made_here)
