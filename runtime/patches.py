"""Torch attributes replaced for a while and given back exactly: the one mechanism the
emulated device and the sanitizer both use (`unittest.mock.patch.object` in an `ExitStack`,
so an attribute that was absent, inherited or a C descriptor is restored as it was)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any
from unittest import mock


class Patches:
    """Attributes replaced until `restore()`, which undoes them in reverse order."""

    def __init__(self) -> None:
        self._stack = ExitStack()

    def set(self, owner: Any, name: str, value: Any) -> None:
        """`owner.name = value` until restored; an attribute `owner` lacks is removed again."""
        self._stack.enter_context(mock.patch.object(owner, name, value, create=True))

    def set_items(self, table: dict[Any, Any], items: dict[Any, Any]) -> None:
        """`table.update(items)` until restored (keys it lacked are removed again)."""
        self._stack.enter_context(mock.patch.dict(table, items))

    def wrap(self, owner: Any, name: str, make: Callable[[Any], Callable[..., Any]]) -> None:
        """Replace `owner.name` by `make(original)`; nothing happens when torch lacks it."""
        original = getattr(owner, name, None)
        if original is not None:
            self.set(owner, name, make(original))

    def on_restore(self, undo: Callable[[], object]) -> None:
        """Call `undo()` when restored, in reverse order with the attributes set so far."""
        self._stack.callback(undo)

    def restore(self) -> None:
        self._stack.close()
