"""Lifetimes: when a tracked tensor's memory goes back to the caching allocator (`del`, the
end of the function, `resize_(0)`, a value handed to the caller), and which uses on other
streams that release races (CUDA semantics: DESIGN.md, the allocator's per-stream pools).

Part of `FunctionAnalysis` (lint/accesses.py); names are bound and forgotten by the bindings
part (lint/bindings.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import libcst as cst

from csan_lint.lint.analysis import assumptions as assumed
from csan_lint.lint.analysis.tokens import CURRENT, distinct, root
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.callers import Caller
from csan_lint.lint.effects import Helpers
from csan_lint.lint.names import dotted_name
from csan_lint.lint.ordering import Access, FlowState, Hazard, HazardKind, Mark, TrackedTensor
from csan_lint.lint.views import view_base, viewed
from csan_lint.lint.vocabulary import VIEW_ATTRIBUTES


class Lifetimes:
    """The lifetime half of `FunctionAnalysis`."""

    function: str | None
    entry_stream: str
    silent: int
    live: FlowState
    caller: Caller
    helpers: Helpers | None
    hazards: dict[tuple[object, ...], Hazard]
    _stream: Callable[[cst.BaseExpression], str | None]
    _definite: Callable[[str], bool]
    # The host's methods from the other parts; those taking keyword-only flags are `...`.
    _eval: Callable[[cst.CSTNode], None]
    _eval_value: Callable[[cst.BaseExpression], None]
    _escape_names: Callable[[cst.CSTNode], None]
    _forget: Callable[[str], None]
    _make_access: Callable[..., Access]
    _hazard: Callable[..., None]
    anypath: AnyPath

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
            self._release(key, node)
            self._forget(key)

    def _release(
        self, key: str, where: cst.CSTNode | None, unseen_alloc: str | None = None, assumption: str | None = None
    ) -> None:
        """The name's last reference dies at `where`: its block goes back to its allocating
        stream's pool, and uses on other streams must be ordered before that stream's next
        allocation (`_reuse_released`), which may get it. `unseen_alloc`: the stream taken as
        the allocating one where the allocation is not seen, under `assumption` (memory a
        `.data` or `.grad` rebinding drops, as `resize_(0)` frees it: `_free`); its uses are
        then all its accesses."""
        tensor = self.live.tensors.get(key)
        if tensor is None or tensor.escaped:
            return
        if tensor.alloc is None and unseen_alloc is not None:
            tensor = replace(tensor, alloc=unseen_alloc, uses=tensor.reads | tensor.writes, assumed_alloc=assumption)
        if tensor.alloc is None:
            return
        if any(_unprotected(use, tensor, tensor.alloc) for use in tensor.uses):
            self.live.released[key, where] = tensor

    def _reuse_released(self) -> None:
        """Released blocks may be handed out here: a use not ordered by now before the
        allocating stream (a wait since the release orders it) races the reuse."""
        released, self.live.released = self.live.released, {}
        for (key, where), tensor in released.items():
            assert tensor.alloc is not None  # only such tensors are released for judging
            for use in tensor.uses:
                if _unprotected(use, tensor, tensor.alloc):
                    rests = tensor.assumed | ({tensor.assumed_alloc} if tensor.assumed_alloc else set())
                    self._hazard(HazardKind.FREE_IN_USE, key, use.access, tensor.alloc, where, rests_on=rests)

    def _free(self, key: str, where: cst.Call) -> None:
        """`x.untyped_storage().resize_(0)` frees the memory at once, whoever allocated it (when
        not seen here, the caller, on the stream current at entry): work still using it on
        another stream must be ordered before that stream or recorded."""
        tensor = self.live.tensors.get(key)
        if tensor is None:
            return
        alloc = tensor.alloc or self.entry_stream
        for use in tensor.uses if tensor.alloc else tensor.reads | tensor.writes:
            if _unprotected(use, tensor, alloc):
                self._hazard(HazardKind.FREE_IN_USE, key, use.access, alloc, where)

    def _release_all(self, where: cst.CSTNode | None) -> None:
        """The function returns: its locals die, and the caller may allocate at once."""
        if self.function is None:
            return  # module globals live until exit
        for key in list(self.live.tensors):
            if "." not in key:  # `self.x` outlives the call
                self._release(key, where)
        self._reuse_released()

    def _handed_back_through(self, caller: str) -> None:
        """Tensors stored in an attribute of the caller's objects (`it.feature = x.to(d)`) are
        handed to it as a returned one is (`_handed_back`): memory from another stream's pool
        needs `record_stream` of the caller's stream before the caller uses and drops it."""
        for key, tensor in sorted(self.live.tensors.items()) if not self.silent else ():
            root = key.partition(".")[0]
            if key == root or root not in self.anypath.callers_objects or key in self.anypath.recorded_somewhere:
                continue
            if tensor.pool is None or tensor.escaped or not distinct(tensor.pool, caller) or caller in tensor.recorded:
                continue
            for mark in tensor.writes:
                access = replace(mark.access, stream=caller, write=False)
                self._hazard(HazardKind.FREE_IN_USE, key, access, tensor.pool, None, returned=True)

    def _pass(self, expr: cst.BaseExpression, caller: str) -> None:
        """A value handed to the caller, who goes on on stream `caller`: it escapes, and is read
        only if computing it launches work."""
        self._eval_value(expr)
        self._handed_back(expr, caller)
        self._escape_names(expr)

    def _handed_back(self, expr: cst.BaseExpression, caller: str) -> None:
        """A tensor returned or yielded is used, then dropped, by the caller on `caller`: if its
        memory came from another stream's pool, that stream may reuse the block as soon as the
        caller drops it, while the caller's kernels still use it, unless `record_stream` told
        the allocator of the caller's stream; a view of it (`x[0]`, not `x.reshape(n)`, which may
        copy) hands the same block over. Not a tensor also stored elsewhere (escaped): the code
        that drops that reference decides when the block is free."""
        elements = [element.value for element in expr.elements] if isinstance(expr, (cst.Tuple, cst.List)) else [expr]
        handed: set[str] = set()
        for element in elements:
            base = view_base(element)  # a view hands over its base's block
            key = base.value if isinstance(base, cst.Name) else None  # `self.x` stays referenced
            tensor = self.live.tensors.get(key) if key is not None else None
            if self.silent or key is None or tensor is None or tensor.pool is None or tensor.escaped or key in handed:
                continue
            handed.add(key)
            if distinct(tensor.pool, caller) and caller not in tensor.recorded:
                access = replace(self._make_access(element, write=False), stream=caller)
                self._hazard(HazardKind.FREE_IN_USE, key, access, tensor.pool, None, returned=True)

    def _record_stream(self, node: cst.Call, tensor: cst.BaseExpression, stream_expr: cst.BaseExpression) -> None:
        """`t.record_stream(s)`: bookkeeping of the allocator on the host, no kernel reads `t`.
        On the stream whose pool `t` came from it protects nothing: the allocator waits for that
        stream anyway, and the use it was written for, on another stream, is left unprotected.
        A local name allocated on the entry stream is judged only where it is used here on
        another stream: otherwise its uses here and the caller's are on that stream too."""
        key, stream = dotted_name(tensor), self._stream(stream_expr)
        made_on = self.anypath.made_on.get(key or "")
        base = viewed(tensor)  # `x.view(-1).record_stream(s)`, `x[0]...` of a tensor x: x's block
        if base is not None and dotted_name(base) in self.live.tensors:
            tensor, key = base, dotted_name(base)
        named = key  # as written: `x.data`, `self.x` name memory held by an object that outlives the call
        while key not in self.live.tensors and isinstance(tensor, cst.Attribute):
            if tensor.attr.value not in VIEW_ATTRIBUTES:
                break
            tensor = tensor.value  # `x.data.record_stream(s)` records x's block
            key = dotted_name(tensor)
        if key is not None:
            self.anypath.recorded_somewhere.add(key)
        if key is not None and key in self.live.tensors and stream is not None:
            recorded = self.live.tensors[key]
            self.live.tensors[key] = replace(recorded, recorded=recorded.recorded | {stream})
        made_on = made_on or self.anypath.made_on.get(key or "")
        outlives = named is not None and ("." in named or made_on != CURRENT)  # kept, or made for a side stream
        if key is None or stream is None or made_on != stream or not self._definite(stream):
            return
        access = self._make_access(node, write=False)
        if outlives:
            self._record_on_pool(named or key, access, stream)
        else:  # judged once the function's uses are known (`_judge_records_on_pool`)
            self.anypath.recorded_on_pool[node] = (key, stream, access)

    def _record_on_pool(self, tensor: str, access: Access, stream: str) -> None:
        moved = tensor in self.anypath.made_by_moves or root(tensor) in self.anypath.made_by_moves
        rests = frozenset({assumed.MOVES_ALLOCATE}) if moved else frozenset()
        hazard = Hazard(
            HazardKind.FREE_IN_USE, tensor, access, stream, function=self.function, no_op=True, assumptions=rests
        )
        self.hazards.setdefault(("self-record", access.node), hazard)

    def _judge_records_on_pool(self) -> None:
        """A local allocation recorded on its own stream and used on another here: the record
        was written for that use and does not protect it."""
        for key, stream, access in self.anypath.recorded_on_pool.values():
            if self.anypath.used_off_pool.get(key, set()) - {stream}:
                self._record_on_pool(key, access, stream)

    def _item_of_callers(self, value: cst.BaseExpression) -> bool:
        """`self.buffers[k]`, `params[i]`: an item of a container the caller owns (for a function
        whose parameters are the caller's, `produced_by_caller`)."""
        if not isinstance(value, cst.Subscript):
            return False
        root = (dotted_name(value.value) or "").split(".", 1)[0]
        return root in self.caller.streams or root in ("self", "cls")


def _unprotected(use: Mark, tensor: TrackedTensor, alloc: str) -> bool:
    """A use the allocator does not wait for when `tensor` is freed: on a stream distinct from
    `alloc`, neither recorded nor ordered before it. Of a stream chosen at run time, each choice
    on its own path (`s if c else current_stream()`: `s` is recorded where it is chosen)."""
    if use.access.stream in tensor.recorded:
        return False
    return use.unordered(alloc, distinct=lambda a, b: a not in tensor.recorded and distinct(a, b)) is not None
