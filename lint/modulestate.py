"""Module state reached by a loop: the tensors a `for` binds that outlive the call.

`for p in m.parameters():` (or `m.buffers()`) binds the parameters of a module, which its
forward reads on the caller's stream; `for b in self.buffers:` binds items of a container the
object keeps. Like `buf = self.buffers[k]` (`borrowed`, lint/returns.py `_return`), what a side
stream still writes there when the function returns is left to the caller.
"""

from __future__ import annotations

import libcst as cst

from csan_lint.lint.names import dotted_name
from csan_lint.lint.nodes import target_names

_STATE_METHODS = frozenset({"parameters", "buffers"})
"""`nn.Module` methods that hand out the module's own tensors (not copies)."""


_VIEWS = frozenset({"keys", "values", "items"})
"""Dict methods that go through a container's own keys and values."""


def state_items(target: cst.BaseExpression, iterable: cst.BaseExpression, *, views: bool = False) -> set[str]:
    """The name a `for` binds to a module's parameter or buffer, or to an item of a container
    kept on `self` or `cls`; with `views`, also the names it binds to such a container's keys
    and values (`for t, k in self.keys.items()`, which may be strings)."""
    method = _method(iterable)
    if method in _STATE_METHODS:
        return {target.value} if isinstance(target, cst.Name) else set()
    if not views and not isinstance(target, cst.Name):
        return set()
    if views and method in _VIEWS:
        assert isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute)
        iterable = iterable.func.value
    root, _, rest = (dotted_name(iterable) or "").partition(".")
    return set(target_names(target)) if root in ("self", "cls") and rest else set()


def _method(iterable: cst.BaseExpression) -> str | None:
    """`m` for a call `x.m()` with no arguments."""
    if isinstance(iterable, cst.Call) and not iterable.args and isinstance(iterable.func, cst.Attribute):
        return iterable.func.attr.value
    return None
