"""Modules moved in place: `model.cuda()`, `model.half()`, `model.to(device)` as a statement.

A tensor's move returns a copy, so a move whose result is dropped is an `nn.Module`'s: it
converts the module's parameters in place, a write on the current stream (also of the list a
loop moves the items of, `for chunk in model: chunk.cuda()`). Two uses of such a module read its
parameters: building an object from it (a DDP-like wrapper copies or broadcasts them where it
is made) and calling it (its forward). A name bound to an item of a moved list (`for i, m in
enumerate(model)`) shares its writes. Elsewhere a module stays what it was: a value the
analysis does not track, and building an object from a tensor still only stores it.

A module kept on `self` (`self.shard.to(device, non_blocking=True)`) is followed only where a
side stream moves it without blocking: its parameters are the object's state, written on that
stream, and still being copied when the method returns unless it joins, records an event the
caller can reach, or every caller joins (lint/returns.py `_return`, as for `buf =
self.buffers[k]`). Its other methods (`.train()`, `.parameters()`) stay host-only. A blocking
move syncs the host with the copy; a move on the current stream is ordered for its readers.

Part of `FunctionAnalysis` (lint/accesses.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import libcst as cst

from csan_lint.lint.anypath import AnyPath
from csan_lint.lint.containers import iterated_items
from csan_lint.lint.hostfacts import may_not_block
from csan_lint.lint.names import dotted_name
from csan_lint.lint.ordering import FlowState

MODULE_MOVES = frozenset({"cuda", "to", "half", "float", "double", "bfloat16", "to_empty"})
"""`nn.Module` methods that convert its parameters in place and return the module itself."""


def moved_module(statement: cst.BaseExpression) -> cst.Name | cst.Attribute | None:
    """The receiver of a move whose result the statement drops (`model.cuda(device)`): a local
    name, or an attribute of `self` (`self.shard.to(device)`, see `_move_kept`)."""
    if not (isinstance(statement, cst.Call) and isinstance(statement.func, cst.Attribute)):
        return None
    receiver = statement.func.value
    if statement.func.attr.value not in MODULE_MOVES:
        return None
    if isinstance(receiver, cst.Name) or (
        isinstance(receiver, cst.Attribute) and (dotted_name(receiver) or "").startswith("self.")
    ):
        return receiver
    return None


class ModuleMoves:
    """The module half of `FunctionAnalysis`."""

    anypath: AnyPath

    live: FlowState
    modules: set[str]
    """Names moved in place somewhere in the function, and the lists their loops went through."""
    items_of: dict[str, str]
    """Loop names -> the named list whose items they are bound to."""
    entry_stream: str
    _access: Callable[..., None]
    _eval: Callable[[cst.CSTNode], None]

    def _move(self, receiver: cst.Name | cst.Attribute, call: cst.BaseExpression) -> None:
        """A module moved in place by `call`: its parameters, and the list it is an item of, are
        written."""
        if isinstance(receiver, cst.Attribute):
            self._move_kept(receiver, call)
            return
        for arg in call.args if isinstance(call, cst.Call) else ():
            self._eval(arg.value)
        for written in (receiver.value, self.items_of.get(receiver.value)):
            if written is not None:
                self.modules.add(written)
                self._access(written, receiver, write=True, produced="moved")

    def _move_kept(self, receiver: cst.Attribute, call: cst.BaseExpression) -> None:
        """`self.shard.to(device, non_blocking=True)` on a side stream: the object's module is
        written there, and left to whoever uses it after the return; any other move of an
        attribute is an ordinary call."""
        key = dotted_name(receiver)
        if (
            key is None
            or self.live.current == self.entry_stream
            or not (isinstance(call, cst.Call) and may_not_block(call))
        ):
            self._eval(call)
            return
        for arg in call.args:
            self._eval(arg.value)
        self.modules.add(key)
        self.anypath.borrowed.add(key)
        self._access(key, receiver, write=True, produced="moved")

    def _bind_items(self, target: cst.BaseExpression, iterable: cst.BaseExpression) -> None:
        """`for m in model` (also through `enumerate`, `zip`): `m` is an item of `model`, and
        shares the writes of a moved list of modules."""
        for name, container in iterated_items(target, iterable):
            self.items_of[name] = container
            tensor = self.live.tensors.get(container)
            if container in self.modules and tensor is not None:
                self.modules.add(name)
                self.live.tensors[name] = replace(tensor, uses=frozenset(), alloc=None, escaped=False)

    def _read_moved(self, node: cst.Call) -> None:
        """Building an object from a moved module reads its parameters (a wrapper copies or
        broadcasts them where it is made)."""
        for arg in node.args:
            if self._moved(arg.value):
                self._eval(arg.value)

    def _moved(self, expr: cst.BaseExpression) -> bool:
        """`expr` names a module moved in place whose writes are tracked here."""
        key = dotted_name(expr)
        return key is not None and key in self.modules and key in self.live.tensors
