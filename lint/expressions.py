"""Expressions: the reads, in-place writes and ordering effects of evaluating one expression,
and what iterating a value says of it (a container, not a tensor).

Part of `FunctionAnalysis` (lint/accesses.py), which records each access (`_access`); a call is
the calls part's (lint/calls.py), a binding the bindings part's (lint/bindings.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeGuard

import libcst as cst

from csan_lint.lint.analysis import assumptions as assumed
from csan_lint.lint.analysis.tokens import collection_item, is_named, issued_on
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.callers import Caller
from csan_lint.lint.calls import GRADIENTS
from csan_lint.lint.containers import COMPREHENSIONS, Comprehension, comprehension_targets, paired_containers
from csan_lint.lint.devices import is_upload
from csan_lint.lint.effects import Helpers, probe_key
from csan_lint.lint.names import ImportTable, dotted_name
from csan_lint.lint.nodes import children
from csan_lint.lint.ordering import Access, FlowState, Mark, TrackedTensor
from csan_lint.lint.regions import region_of
from csan_lint.lint.values import builds_sequence, index_names, is_host_test, is_reference, operands
from csan_lint.lint.vocabulary import HOST_ATTRIBUTES, TENSOR_ATTRIBUTES, VIEW_ATTRIBUTES, VIEW_METHODS


class Expressions:
    """The expression half of `FunctionAnalysis`."""

    anypath: AnyPath
    caller: Caller
    entry_stream: str
    function: str | None
    helpers: Helpers | None
    imports: ImportTable
    state: FlowState | None
    live: FlowState
    maybe_tensors: set[str]
    used_as_tensors: frozenset[str]
    yields: bool
    # The host's methods from the other parts; those taking keyword-only flags are `...`.
    _access: Callable[..., None]
    _assign: Callable[[Sequence[cst.BaseExpression], cst.BaseExpression], None]
    _assumes: Callable[[str], bool]
    _bind_items: Callable[[cst.BaseExpression, cst.BaseExpression], None]
    _call: Callable[[cst.Call], None]
    _eval_args: Callable[..., None]
    _forget: Callable[[str], None]
    _header: Callable[[cst.BaseExpression], None]
    _holder: Callable[[cst.BaseExpression], str | None]
    _is_tensor: Callable[..., bool]
    _key_lookup: Callable[[cst.CSTNode], TypeGuard[cst.Comparison]]
    _observed_written: Callable[[str], bool]
    _pass: Callable[[cst.BaseExpression, str], None]

    def _eval(self, node: cst.CSTNode) -> None:
        """Reads and ordering effects of evaluating `node`, in evaluation order."""
        if self.state is None:
            return
        if isinstance(node, cst.Name):
            if node.value in self.live.tensors or node.value in self.maybe_tensors:
                self._access(node.value, node, write=False)
        elif isinstance(node, cst.Attribute):
            key = dotted_name(node)
            if key is not None and (key in self.live.tensors or self._assumed_tensor(key)):
                self._access(key, node, write=False)
            elif node.attr.value not in HOST_ATTRIBUTES:
                self._eval(node.value)
        elif isinstance(node, cst.Call):
            if isinstance(node.func, cst.Attribute) and is_upload(node, self.imports):
                self.anypath.uploaded.add(id(node.func.value))
            self._call(node)
        elif isinstance(node, cst.Arg):
            self._eval(node.value)
        elif isinstance(node, cst.NamedExpr):
            self._assign([node.target], node.value)
        elif isinstance(node, cst.Yield):
            self.yields = True
            if isinstance(node.value, cst.BaseExpression):
                self._pass(node.value, self.live.current)  # the consumer runs on the stream current here
        elif isinstance(node, (cst.Lambda, cst.FunctionDef)):
            return
        elif isinstance(node, COMPREHENSIONS):
            self._comprehension(node)
        elif isinstance(node, (cst.BinaryOperation, cst.BooleanOperation)):
            sequence = isinstance(node, cst.BinaryOperation) and builds_sequence(node)
            for operand in operands(node):
                if not (sequence and is_reference(operand)):  # `kept + (x,)` holds `x`, launches nothing
                    self._eval(operand)
        elif isinstance(node, cst.Subscript):
            for element in node.slice:
                for key in index_names(element.slice):
                    self._demote(key)
            base = dotted_name(node.value)
            region = region_of(node)
            if region is not None and base is not None and base in self.live.tensors:
                for element in node.slice:
                    self._eval(element)
                self._access(base, node.value, write=False, region=region)
                return
            for child in children(node):
                self._eval(child)
        elif is_host_test(node) or self._key_lookup(node):  # `x is None`, `"key" in d`: a Python bool, no kernel
            for operand in (node.left, *(target.comparator for target in node.comparisons)):
                if not is_reference(operand):
                    self._eval(operand)
        else:
            for child in children(node):
                self._eval(child)

    def _assumed_tensor(self, key: str) -> bool:
        """An attribute the analysis has not seen written, read as a tensor (`p.grad`, or used as
        one in the function), is the caller's work when `attributes-written-by-caller` holds."""
        last = key.rpartition(".")[2]
        used = key in self.used_as_tensors or (self.helpers is not None and self.helpers.tensor_attribute(key))
        if last in TENSOR_ATTRIBUTES or (used and last not in HOST_ATTRIBUTES):
            assumes = self._assumes(assumed.ATTRIBUTES_WRITTEN_BY_CALLER)
            assumes = assumes or self._unordered_new_stream(self.live.current) is not None
            return assumes or self._observed_written(key) or self._backward_written(key) is not None
        return False

    def _backward_written(self, key: str) -> TrackedTensor | None:
        """A `.grad` first used after a backward pass (`Calls._gradients_written`): that pass wrote it."""
        written = self.live.tensors.get(GRADIENTS) if key.endswith(".grad") else None
        return None if written is None else TrackedTensor(writes=written.writes, unsure=True)

    def _comprehension(self, node: Comprehension) -> None:
        """A comprehension has its own scope: its targets shadow the enclosing names of the same
        spelling, which it neither reads nor rebinds. Only the first iterable is evaluated outside."""
        if not self._iterated_container(node.for_in.iter):
            self._eval(node.for_in.iter)
        targets = comprehension_targets(node)
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
            self._bind_items(comp.target, comp.iter)
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

    def _write_target(self, expr: cst.BaseExpression, *, assigned: bool = False) -> None:
        """An in-place write to `expr`, or to the tensor it is a view of (`x[i]`, `x.view(..)`).
        `assigned`: `x[i] = v`, which writes a tensor only if `x` may be one (else a container)."""
        if isinstance(expr, (cst.Tuple, cst.List)):
            for element in expr.elements:
                self._write_target(element.value, assigned=assigned)
            return
        region = region_of(expr)
        base = expr
        while True:
            if isinstance(base, cst.Subscript):
                for index in base.slice:
                    self._eval(index)
                base = base.value
            elif (
                isinstance(base, cst.Call)
                and isinstance(base.func, cst.Attribute)
                and base.func.attr.value in VIEW_METHODS
            ):
                self._eval_args(base)
                base = base.func.value
            elif isinstance(base, cst.Attribute) and base.attr.value in VIEW_ATTRIBUTES:
                base = base.value
            else:
                break
        key = dotted_name(base)
        if assigned and key is not None and not self._is_tensor(base):
            return
        holder = self.anypath.held_by.get(key) if key is not None else self._holder(base)
        if key is not None and key not in self.live.streams:
            self._access(key, base, write=True, region=region)
        else:
            self._eval(base)
        if holder is not None and holder not in self.live.streams:
            self._access(holder, base, write=True)

    def _iterate(self, iterable: cst.BaseExpression) -> None:
        if not self._iterated_container(iterable):
            self._header(iterable)

    def _iterated_container(self, iterable: cst.BaseExpression) -> bool:
        """`for x in xs`: going through a list, or a tensor's rows (views), launches nothing, nor
        does pairing them up (`enumerate(xs)`, `zip(xs, ys)`); a value of unknown kind that is
        iterated is a container."""
        if isinstance(iterable, (cst.List, cst.Tuple)) and is_reference(iterable):
            return True  # `for t in [a, b]`: each item is used in the body
        if (paired := paired_containers(iterable)) is not None:
            return all([self._iterated_container(container) for container in paired])  # demotes each
        key = dotted_name(iterable)
        if key is None:
            return False
        self._demote(key)
        return True

    def _demote(self, key: str, *, proven: bool = False) -> None:
        """`key` is used as a container or a number: no tensor, unless a torch op made it
        (`proven`: a method tensors do not have was called on it)."""
        tensor = self.live.tensors.get(key)
        if tensor is None or tensor.unsure or proven:
            self.maybe_tensors.discard(key)
            if tensor is not None:
                self._forget(key)

    def _caller_written(self, key: str, node: cst.CSTNode) -> TrackedTensor | None:
        """An attribute first used here (`self.buf`, `bucket.grad_data`) is taken as ready, unless
        the function orders a side stream after `default_stream()`: that wait says the data it
        uses were written on the GPU before the call, by the caller, whose stream is the one
        current at entry; a side stream may be current there. Its write is ordered, on each
        path, before what the entry stream's probe is ordered before by now."""
        if "." not in key or key.startswith("\0"):
            return None
        if not (
            self.caller.orders_after_default
            or self._assumes(assumed.ATTRIBUTES_WRITTEN_BY_CALLER)
            or self._observed_written(key)
        ):
            return None
        return self._written_at_entry(node)

    def _written_at_entry(self, node: cst.CSTNode) -> TrackedTensor:
        """A write by the caller on the entry stream, ordered on each path before what the entry
        stream's probe is ordered before by now."""
        access = Access(node, self.entry_stream, True, node, self.function, "by the caller")
        probe = self.live.tensors.get(probe_key(self.entry_stream))
        paths = probe.writes if probe is not None and probe.writes else {Mark(access, issued_on(self.entry_stream))}
        return TrackedTensor(writes=frozenset(replace(mark, access=access) for mark in paths), unsure=True)

    def _written_before_fresh_stream(self, key: str, node: cst.CSTNode, stream: str) -> TrackedTensor | None:
        """A value whose producer is not seen, read on a stream ordered after nothing
        (`_unordered_new_stream`), is taken as written by the caller; not the source of a copy to
        the device, host memory."""
        assumption = self._unordered_new_stream(stream)
        if assumption is None or id(node) in self.anypath.uploaded:
            return None
        if "." not in key and not self._callers_tensor(key):
            return None  # a name bound here, or a parameter not known for a tensor (`if flag:`)
        if not is_named(key):
            return None  # an item (`self.bufs[]`): the caller's container, not a tensor it wrote
        self.anypath.read_on_fresh[key] = assumption
        return self._written_at_entry(node)

    def _never_waits(self, stream: str) -> bool:
        """A stream the module makes (`self.copy = torch.cuda.Stream()`), or an item of a list of
        them, that none of its code may make wait (`ModuleUses.waiting`)."""
        waiting = self.helpers.waiting if self.helpers is not None else None
        if waiting is None:
            return False
        item = collection_item(stream)  # `self.streams[i]` of `self.streams = [Stream() for _ in r]`
        if item is not None:
            return self.imports.binds_streams(item[0]) and item[0] not in waiting
        return self.imports.makes_stream(stream) and stream not in waiting

    def _callers_tensor(self, name: str) -> bool:
        """A parameter not rebound that is annotated as a tensor or used as one."""
        if name not in self.maybe_tensors or name in self.anypath.bound:
            return False
        return name in self.caller.annotated or name in self.used_as_tensors

    def _unordered_new_stream(self, stream: str) -> str | None:
        """The assumption under which `stream` is ordered after none of the caller's work yet:
        created here (FRESH_STREAMS_READ_CALLERS_DATA), or made by the module and never made
        to wait by its code (NEVER_WAITING_STREAMS_READ_CALLERS_DATA); None where neither
        holds, or the function ordered it after the caller's work by now."""
        if stream in self.anypath.fresh_streams:
            assumption = assumed.FRESH_STREAMS_READ_CALLERS_DATA
        elif self._never_waits(stream):
            assumption = assumed.NEVER_WAITING_STREAMS_READ_CALLERS_DATA
        else:
            return None
        probe = self.live.tensors.get(probe_key(self.entry_stream))
        if probe is None or all(mark.orders(stream) for mark in probe.writes):
            return None
        return assumption if self._assumes(assumption) else None
