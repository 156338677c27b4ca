"""Weights swapped out through `.data` while the caller's kernels may still read them (CSL201).

An offloader swaps a module's weights in and out by rebinding `.data`. One method swaps them
in inside a stream block, into memory the copy stream allocates (`p.data = host.to(dev,
non_blocking=True)`: lint/bindings.py `swapped_in`); the module's forward then reads them on
the caller's stream. A method of the same class that swaps them out
(`p.data = torch.empty_like(p.data, device="cpu")`) releases that memory to the copy stream's
pool, which may hand it to the next swap-in while the forward's kernels still read it: unless
the method orders those kernels first (a host sync, a wait) or records the caller's stream
(`record_stream`). Any such call in the swapping method, on any path, is taken to order them
(`_orders`); a `record_stream` made where the weights were swapped in is not (it may be made on
some paths only, or on the copy stream itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Kind
from csan_lint.lint.analysis.assumptions import DATA_SWAP
from csan_lint.lint.analysis.tokens import CURRENT
from csan_lint.lint.bindings import rebound_storage
from csan_lint.lint.hostfacts import may_not_block
from csan_lint.lint.modulestate import state_items
from csan_lint.lint.nodes import descendants
from csan_lint.lint.ordering import Access, Hazard, HazardKind


def swapped_out(
    owner: str,
    functions: Sequence[tuple[str, cst.FunctionDef]],
    swapped_in: Mapping[str, set[str]],
    hazards: dict[tuple[object, ...], Hazard],
) -> None:
    """Reports, in each other method of class `owner`, a `.data` rebinding of the module's
    tensors made outside any `with`, where a method of the class swapped memory of a side
    stream in (`swapped_in`: method -> streams, where it rebinds the `.data` of the module's
    tensors to an asynchronous copy made inside a `with`) and nothing orders the caller's stream
    first."""
    methods = {name: function for name, function in functions if name.rpartition(".")[0] == owner}
    swaps = {name: found for name, function in methods.items() if (found := _swaps(function))}
    installers = sorted(name for name in swaps if swapped_in.get(name) and any(swap.made for swap in swaps[name]))
    if not installers:
        return
    installer = installers[0]
    stream = sorted(swapped_in[installer])[0]
    for name, found in swaps.items():
        outside = [swap for swap in found if not swap.in_with]
        if name in installers or not outside:
            continue
        if _orders(methods[name]):
            continue
        for swap in outside:
            access = Access(swap.target, CURRENT, False, swap.statement, name)
            tensor = rebound_storage(swap.target) or ""
            hazard = Hazard(
                HazardKind.FREE_IN_USE,
                tensor,
                access,
                stream,
                swap.target,
                name,
                installer,
                assumptions=frozenset({DATA_SWAP}),
            )
            hazards.setdefault((HazardKind.FREE_IN_USE, tensor, swap.target, stream), hazard)


@dataclass(frozen=True)
class _Swap:
    """`x.data = v`, `x` a name a `for` bound to the module's tensors (lint/modulestate.py)."""

    target: cst.Attribute
    statement: cst.Assign
    in_with: bool
    made: bool
    """Inside a `with`, to an asynchronous copy made there: memory the block's stream allocates."""


def _swaps(function: cst.FunctionDef) -> list[_Swap]:
    finder = _Swaps()
    function.body.visit(finder)
    return finder.found


class _Swaps(cst.CSTVisitor):
    def __init__(self) -> None:
        self.items: set[str] = set()
        self.withs = 0
        self.found: list[_Swap] = []

    def visit_For(self, node: cst.For) -> None:
        self.items |= state_items(node.target, node.iter, views=True)

    def visit_With(self, node: cst.With) -> None:
        self.withs += 1

    def leave_With(self, original_node: cst.With) -> None:
        self.withs -= 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Attribute) and rebound_storage(target.target) in self.items:
                made = bool(self.withs) and _asynchronous_copy(node.value)
                self.found.append(_Swap(target.target, node, bool(self.withs), made))


def _orders(function: cst.FunctionDef) -> bool:
    """Whether the method calls anything that orders the caller's kernels before a swap: a host
    sync (`torch.cuda.synchronize()`, `s.synchronize()`), a stream's wait, a `record_stream`."""
    for node in descendants(function.body):
        if type(node) is not cst.Call:
            continue
        func = node.func
        leaf = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        op, by_stream = api.method_op(leaf)
        if (op == api.SYNC_RECEIVER and not node.args) or api.records_stream(leaf):
            return True
        if op is not None and op.kind is Kind.WAIT and by_stream:
            return True
    return False


def _asynchronous_copy(value: cst.BaseExpression) -> bool:
    """`x.to(device, non_blocking=...)`: an offloader's onload. A blocking move (`p.data =
    p.data.to(device)`) is taken as a one-off, not memory the caller's kernels read while the
    next onload runs."""
    return isinstance(value, cst.Call) and may_not_block(value)
