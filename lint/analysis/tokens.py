"""The names the analysis gives streams and events: their grammar, in one place.

Orderings are kept as sets of tokens on each access (lint/ordering.py), and a token says which
stream or event it stands for:
- `CURRENT`, `DEFAULT`, `UNKNOWN`, and `HOST` (a host sync);
- a stream bound to a name or spelled by one: `s`, `self.copy_stream`, `streams[i % 2]`;
- a stream chosen at run time among several: `a or b` (`choice`, `alternatives`);
- an item of a collection picked by a computed key: `c[]` (`item_key`); every item: `c[*]`
  (`every_item`);
- an ordering that holds on the path where a choice was `a` only: `s@a` (`on_path`);
- an event: `event:e` (`event`, `event_name`).
Only this module builds or takes tokens apart; everything else asks it. Pure: no libcst.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CURRENT = "<current>"
"""The stream that is current where the function is entered (the caller's)."""
HOST = "*"
"""Ordering token of a host sync: every later launch on any stream comes after the access."""
DEFAULT = "<default>"
"""The device's default stream inside a function: the caller's stream may be another one
(a side stream it entered), so a wait on it does not order the current stream's work; which
of the two it is stays unknown, so accesses on them never conflict by themselves."""
UNKNOWN = "?"
"""A name bound to different streams on different paths: blocks on it are not judged."""

_OR = " or "
_ON = "@"
_EVENT = "event:"
_ITEMS = "[]"
_ITEM = re.compile(r"(.+?)\[(.*)\]")
_LITERAL_KEY = re.compile(r"-?\d+|'[^']*'|\"[^\"]*\"")
_NAMED = re.compile(r"[A-Za-z_][\w.]*")


def choice(names: Iterable[str | None]) -> str | None:
    """The stream of one of `names` chosen at run time (None: no stream): None, the one named,
    or `a or b` (sorted) for several."""
    distinct_names = sorted({part for name in names if name is not None for part in name.split(_OR)})
    return _OR.join(distinct_names) if distinct_names else None


def alternatives(stream: str) -> list[str]:
    """The streams a token may be: itself, or each choice of a stream chosen at run time."""
    return stream.split(_OR)


def is_choice(stream: str) -> bool:
    return _OR in stream


def is_named(stream: str) -> bool:
    """A stream bound to a name or an attribute (`s`, `self.copy`): not the current or default
    stream, not a choice, not an item picked by a computed key."""
    return _NAMED.fullmatch(stream) is not None


def on_path(token: str, path: str) -> str:
    """`token@path`: ordered on the path where a stream chosen at run time was `path` only."""
    return f"{token}{_ON}{path}"


def path_of(token: str, stream: str) -> str | None:
    """`a` for `stream@a`; None for a token that is not `stream` on a path."""
    before, on, path = token.partition(_ON)
    return path if on and before == stream else None


def without_path(token: str) -> str:
    """`s` for `s@a` and for `s`."""
    return token.partition(_ON)[0]


def issued_on(stream: str) -> frozenset[str]:
    """What an access on `stream` starts ordered before: that stream; for a stream chosen at run
    time (`a or b`: an item of `[current_stream(), cp]` picked by `i % 2`), each choice on its own
    path (`a@a`, `b@b`), so that a wait on `b` orders the `b` path only."""
    parts = alternatives(stream)
    return frozenset({stream, *(on_path(part, part) for part in parts)}) if len(parts) > 1 else frozenset({stream})


def event_token(name: str) -> str:
    """The token of the event bound to `name`."""
    return f"{_EVENT}{name}"


def event_name(token: str) -> str | None:
    """`e` for `event:e`; None for a stream's token."""
    return token.removeprefix(_EVENT) if token.startswith(_EVENT) else None


def is_event(token: str) -> bool:
    return token.startswith(_EVENT)


def is_local(token: str) -> bool:
    """A plain local name (`s`): not an attribute, an item, an event or a token of the analysis."""
    return token.isidentifier()


def root(token: str) -> str:
    """The first name of the binding a token names: `self` for `event:self.done[0]`."""
    return re.split(r"[.\[]", token.removeprefix(_EVENT), maxsplit=1)[0]


def rebased(token: str, holder: str) -> str:
    """The token with its first name replaced: `state.stream` held by `s` is `s.stream`, and
    `event:state.done` is `event:s.done`."""
    prefix = _EVENT if token.startswith(_EVENT) else ""
    bare = token.removeprefix(prefix)
    return prefix + holder + bare[len(root(bare)) :]


def item_key(collection: str) -> str:
    """The binding of an item of a collection picked by a computed key (`streams[i % 2]`): one of
    them, chosen at run time."""
    return f"{collection}{_ITEMS}"


def every_item(collection: str) -> str:
    """The ordering token that stands for every item of a collection (`c[*]`): after a loop in
    which each item waited (lint/itemwaits.py), whichever key picks one later."""
    return f"{collection}[*]"


def spelled(stream: str) -> str:
    """A stream token as a message shows it: an item picked by a computed key, or every item,
    as `c[...]`."""
    for suffix in (_ITEMS, "[*]"):
        if stream.endswith(suffix):
            return f"{stream.removesuffix(suffix)}[...]"
    return stream


def every_item_of_each(stream: str | None) -> set[str]:
    """`c[*]` for each collection an item of which a stream may be (`a[] or b[]`: a's and b's)."""
    return {token for part in alternatives(stream or "") if (token := every_item_of(part)) is not None}


def every_item_of(stream: str) -> str | None:
    """`c[*]` for a stream that is an item of collection `c` (`c[0]`, `c[i % 2]`, `c[]`)."""
    match = _ITEM.fullmatch(stream)
    return every_item(match.group(1)) if match is not None else None


def items_prefix(collection: str, events: bool) -> str:
    """How the tokens of a collection's items begin (`c[`, `event:c[`)."""
    return f"{_EVENT if events else ''}{collection}["


def is_item_of(token: str, prefix: str) -> bool:
    """`token` names an item of the collection `items_prefix` gave (`c[0]`, `c[i % 2]`, `c[]`)."""
    return token.startswith(prefix) and token.endswith("]")


def collection_item(stream: str) -> tuple[str, bool] | None:
    """`streams[i]` -> ("streams", False): the collection, and whether the key is a literal."""
    match = _ITEM.fullmatch(stream)
    if match is None:
        return None
    return match.group(1), _LITERAL_KEY.fullmatch(match.group(2).strip()) is not None


def distinct(a: str, b: str) -> bool:
    """Whether tokens `a` and `b` are known to be different streams, on some path for a stream
    chosen at run time (`a or b`: its choice other than `a` is not `a`). One spelling is one
    stream; a stream of unknown identity, or two items of one collection picked by computed keys
    (`streams[i % 2]`), may be the same: never a finding by itself."""
    if a == b or UNKNOWN in (a, b) or {a, b} == {DEFAULT, CURRENT}:
        return False
    if is_choice(a) or is_choice(b):
        return any(distinct(left, right) for left in alternatives(a) for right in alternatives(b))
    left, right = collection_item(a), collection_item(b)
    return not (left and right and left[0] == right[0] and not (left[1] and right[1]))
