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

from csan_lint.lint.analysis.tokens import distinct
from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.names import dotted_name
from csan_lint.lint.ordering import Access, FlowState, HazardKind, Mark, TrackedTensor
from csan_lint.lint.views import view_base


class Lifetimes:
    """The lifetime half of `FunctionAnalysis`."""

    function: str | None
    entry_stream: str
    silent: int
    live: FlowState
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
                    rests = frozenset({tensor.assumed_alloc}) if tensor.assumed_alloc else frozenset()
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


def _unprotected(use: Mark, tensor: TrackedTensor, alloc: str) -> bool:
    """A use the allocator does not wait for when `tensor` is freed: on a stream distinct from
    `alloc`, neither recorded nor ordered before it. Of a stream chosen at run time, each choice
    on its own path (`s if c else current_stream()`: `s` is recorded where it is chosen)."""
    if use.access.stream in tensor.recorded:
        return False
    return use.unordered(alloc, distinct=lambda a, b: a not in tensor.recorded and distinct(a, b)) is not None
