"""Waits on every item of a collection, `for s in self.streams: current_stream().wait_stream(s)`,
and waits by every item, `for s in self.streams: s.wait_stream(current_stream())`.

Inside the loop the item is a stream of unknown identity, so each pass's wait names no stream
the analysis knows. After the loop, though, the waiter has waited on each item of the
collection, so on every stream the analysis names as one of its items (`self.streams[0]`,
`self.streams[i % n]`), and on events alike (`for e in self.events: s.wait_event(e)`). That
holds whether or not the loop ran: a collection it ran zero times over is empty, and an empty
collection has no item any work was launched on. Only a loop that does nothing but wait
(`only_waits`) qualifies: work launched on an item between two passes would follow the wait.

A loop in which each item waits (`items_wait`) orders every item of the collection after what
it waited on, whichever key later picks one (`self.streams[i % n]`): the token `every_item`
stands for all of them (lint/analysis/tokens.py). Only a loop that does nothing else qualifies.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.tokens import is_item_of, items_prefix
from csan_lint.lint.containers import iterated_items
from csan_lint.lint.interpret import only_waits
from csan_lint.lint.vocabulary import STREAM_WAITS


@dataclass(frozen=True)
class ItemWait:
    """`waiter.wait_stream(item)` (or `wait_event`) in a loop over the items of `collection`."""

    waiter: cst.BaseExpression
    collection: str
    event: bool

    @property
    def item_prefix(self) -> str:
        """How the ordering tokens of the collection's items begin (`c[`, `event:c[`)."""
        return items_prefix(self.collection, self.event)


def item_waits(loop: cst.For | cst.While) -> Iterator[ItemWait]:
    """The waits on an item of a named collection that a loop which only waits makes in every pass."""
    if not isinstance(loop, cst.For) or loop.orelse is not None or not only_waits(loop):
        return
    collections = dict(iterated_items(loop.target, loop.iter))
    for statement in loop.body.body:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            call = small.value if isinstance(small, cst.Expr) else None
            if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and len(call.args) == 1):
                continue
            waited, method = call.args[0].value, call.func.attr.value
            if isinstance(waited, cst.Name) and waited.value in collections:
                yield ItemWait(
                    call.func.value, collections[waited.value], api.method_op(method) == (api.WAIT_EVENT, True)
                )


def is_item_token(token: str, wait: ItemWait) -> bool:
    """`token` names an item of the waited collection (`c[0]`, `c[i % 2]`, `c[]`)."""
    return is_item_of(token, wait.item_prefix)


@dataclass(frozen=True)
class ItemsWait:
    """`item.wait_stream(waited)` (or `wait_event`) in a loop over the items of `collection`:
    every item waits."""

    collection: str
    waited: cst.BaseExpression
    event: bool


def items_wait(loop: cst.For | cst.While) -> Iterator[ItemsWait]:
    """The waits each item of a named collection makes in a loop that does nothing else."""
    if not isinstance(loop, cst.For) or loop.orelse is not None:
        return
    collections = dict(iterated_items(loop.target, loop.iter))
    found = []
    for statement in loop.body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            return
        for small in statement.body:
            call = small.value if isinstance(small, cst.Expr) else None
            if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and len(call.args) == 1):
                return
            item, method, waited = call.func.value, call.func.attr.value, call.args[0].value
            if api.method_op(method) == (api.WAIT_EVENT, False):  # `event.wait(item)`
                item, waited = waited, item
            elif method not in STREAM_WAITS:
                return
            if not (isinstance(item, cst.Name) and item.value in collections) or _names_an_item(waited, collections):
                return
            event = api.method_op(method)[0] == api.WAIT_EVENT
            found.append(ItemsWait(collections[item.value], waited, event))
    yield from found


def _names_an_item(expr: cst.BaseExpression, collections: dict[str, str]) -> bool:
    return isinstance(expr, cst.Name) and expr.value in collections
