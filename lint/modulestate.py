"""Module state reached by a loop: the tensors a `for` binds that outlive the call.

`for p in m.parameters():` (or `m.buffers()`) binds the parameters of a module, which its
forward reads on the caller's stream; `for b in self.buffers:` binds items of a container the
object keeps. Like `buf = self.buffers[k]` (`borrowed`, lint/returns.py `_return`), what a side
stream still writes there when the function returns is left to the caller.
"""

from __future__ import annotations

import libcst as cst

from csan_lint.lint.names import dotted_name

_STATE_METHODS = frozenset({"parameters", "buffers"})
"""`nn.Module` methods that hand out the module's own tensors (not copies)."""


def state_items(target: cst.BaseExpression, iterable: cst.BaseExpression) -> set[str]:
    """The name a `for` binds to a module's parameter or buffer, or to an item of a container
    kept on `self` or `cls`; none for a tuple target or any other iterable."""
    if not isinstance(target, cst.Name):
        return set()
    if (
        isinstance(iterable, cst.Call)
        and not iterable.args
        and isinstance(iterable.func, cst.Attribute)
        and iterable.func.attr.value in _STATE_METHODS
    ):
        return {target.value}
    root, _, rest = (dotted_name(iterable) or "").partition(".")
    return {target.value} if root in ("self", "cls") and rest else set()
