"""What host-side analysis (lint/hostflow.py) knows of `self` attributes across a module's
methods: which attribute is a view of which (`self.part = self.buf[a:b].view(dtype)` in
`__init__`: one storage under two names, so a host write to `self.part` writes `self.buf`), and
which functions bind each attribute (a buffer bound in one place keeps its storage from one call
of a method to the next).

Precision over recall: an attribute bound to anything but one definite view of one attribute is
nobody's view; `reshape`, `flatten`, `contiguous` may copy, and indexing by a variable may gather.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from csan_lint.lint.names import dotted_name
from csan_lint.lint.views import basic_index
from csan_lint.lint.vocabulary import VIEW_ATTRIBUTES

_VIEWS = frozenset(
    {
        "view", "view_as", "narrow", "select", "transpose", "t", "permute", "squeeze", "unsqueeze",
        "unflatten", "unfold", "as_strided", "detach", "diagonal", "movedim", "swapaxes", "expand",
        "expand_as", "numpy",
    }
)  # fmt: skip
"""Methods whose result always shares the receiver's storage."""


def view_base(expr: cst.BaseExpression) -> str | None:
    """The named tensor `expr` is a definite view of (`x[a:b].view(t)`, `x[0]`, `x.T`, a ctypes
    pointer to `x.data_ptr()`); None for `x` itself or anything that may copy."""
    steps = 0
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _VIEWS:
            expr = expr.func.value
        elif isinstance(expr, cst.Attribute) and expr.attr.value in VIEW_ATTRIBUTES:
            expr = expr.value
        elif isinstance(expr, cst.Subscript) and all(basic_index(element.slice) for element in expr.slice):
            expr = expr.value
        elif (address := _raw_pointer(expr)) is not None:
            expr = address
        else:
            return dotted_name(expr) if steps else None
        steps += 1


def _raw_pointer(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """`ctypes.cast(x.data_ptr(), ...)`: a pointer into x's memory; x, or None."""
    if not (isinstance(expr, cst.Call) and dotted_name(expr.func) in ("ctypes.cast", "cast") and expr.args):
        return None
    address = expr.args[0].value
    if isinstance(address, cst.Call) and isinstance(address.func, cst.Attribute) and not address.args:
        return address.func.value if address.func.attr.value == "data_ptr" else None
    return None


@dataclass
class SelfAttributes:
    """The `self.x = ...` bindings of a module, gathered by hostfacts.scan_facts."""

    _binders: dict[str, set[cst.FunctionDef | None]] = field(default_factory=dict)
    """Attribute -> the functions binding it to something other than None."""
    _bases: dict[str, str | None] = field(default_factory=dict)
    """Attribute -> the attribute it is a view of on every binding; None if any binding is not."""
    owners: dict[cst.FunctionDef | None, cst.ClassDef] = field(default_factory=dict)
    """Method -> its class: `self.x` of one class is not `self.x` of another."""

    def bind(
        self, target: cst.BaseExpression, value: cst.BaseExpression | None, function: cst.FunctionDef | None
    ) -> None:
        """`target = value` in `function` (None: the module body); `value` None: unknown."""
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.bind(element.value, None, function)
            return
        key = dotted_name(target)
        if key is None or not key.startswith("self."):
            return
        if isinstance(value, cst.Name) and value.value == "None":
            return  # a placeholder until the real buffer comes
        self._binders.setdefault(key, set()).add(function)
        base = view_base(value) if value is not None else None
        if base is None or not base.startswith("self.") or self._bases.get(key, base) != base:
            base = None
        self._bases[key] = base

    def views_of(self, pinned: set[str]) -> set[str]:
        """The attributes that are views of a pinned one: pinned too."""
        return {key for key in self._bases if any(name in pinned for name in self.storage(key))}

    def storage(self, key: str) -> Iterator[str]:
        """`key`, then the attribute it is a view of, and so on."""
        seen = {key}
        yield key
        while (base := self._bases.get(key)) is not None and base not in seen:
            seen.add(base)
            yield base
            key = base

    def kept(self, key: str, function: cst.FunctionDef) -> bool:
        """Each storage `key` names is bound in at most one function of `function`'s class other
        than `function`, so another call of `function` finds the same buffer (its own rebinding
        it sees itself)."""
        owner = self.owners.get(function)
        return all(
            len({binder for binder in self._binders.get(name, set()) if self.owners.get(binder) is owner} - {function})
            <= 1
            for name in self.storage(key)
        )
