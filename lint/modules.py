"""Modules moved in place: `model.cuda()`, `model.half()`, `model.to(device)` as a statement.

A tensor's move returns a copy, so a move whose result is dropped is an `nn.Module`'s: it
converts the module's parameters in place, a write on the current stream (also of the list a
loop moves the items of, `for chunk in model: chunk.cuda()`). Two uses of such a module read its
parameters: building an object from it (a DDP-like wrapper copies or broadcasts them where it
is made) and calling it (its forward). A name bound to an item of a moved list (`for i, m in
enumerate(model)`) shares its writes. Elsewhere a module stays what it was: a value the
analysis does not track, and building an object from a tensor still only stores it.

Part of `FunctionAnalysis` (lint/accesses.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import libcst as cst

from csan_lint.lint.names import dotted_name
from csan_lint.lint.ordering import FlowState
from csan_lint.lint.values import iterated_items

MODULE_MOVES = frozenset({"cuda", "to", "half", "float", "double", "bfloat16", "to_empty"})
"""`nn.Module` methods that convert its parameters in place and return the module itself."""


def moved_module(statement: cst.BaseExpression) -> cst.Name | None:
    """The receiver of a move whose result the statement drops (`model.cuda(device)`): a local
    name. An attribute's move (`self.shard.to(device)`) is not followed: its readers are other
    methods, where nothing tells a call of the module's own methods from a launch."""
    if not (isinstance(statement, cst.Call) and isinstance(statement.func, cst.Attribute)):
        return None
    receiver = statement.func.value
    if statement.func.attr.value not in MODULE_MOVES or not isinstance(receiver, cst.Name):
        return None
    return receiver


class ModuleMoves:
    """The module half of `FunctionAnalysis`."""

    live: FlowState
    modules: set[str]
    """Names moved in place somewhere in the function, and the lists their loops went through."""
    items_of: dict[str, str]
    """Loop names -> the named list whose items they are bound to."""
    _access: Callable[..., None]
    _eval: Callable[[cst.CSTNode], None]

    def _move(self, receiver: cst.Name, call: cst.BaseExpression) -> None:
        """A module moved in place by `call`: its parameters, and the list it is an item of, are
        written."""
        for arg in call.args if isinstance(call, cst.Call) else ():
            self._eval(arg.value)
        for written in (receiver.value, self.items_of.get(receiver.value)):
            if written is not None:
                self.modules.add(written)
                self._access(written, receiver, write=True)

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
