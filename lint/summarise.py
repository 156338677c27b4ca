"""A function's summary (lint/summaries.py): the function run once on symbolic arguments, with a
probe access per stream or event it orders on, and what holds at its returns kept in the
caller's terms. Helpers (lint/effects.py) asks for one on a function's first call.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from csan_lint.lint.accesses import FunctionAnalysis
from csan_lint.lint.analysis.tokens import CURRENT, HOST, collection_item, root
from csan_lint.lint.effects import Helpers, probe_key
from csan_lint.lint.interpret import SUMMARY
from csan_lint.lint.ordering import Mark, join_states
from csan_lint.lint.scan import tensor_params
from csan_lint.lint.summaries import ANY_OTHER, RETURNED, Effect, Summary, returned_key


def summarise(helpers: Helpers, name: str, function: cst.FunctionDef, on_current: frozenset[str]) -> Summary | None:
    """Runs the function on symbolic arguments: a probe access per stream or event it orders
    on (an access made before the call) shows, at the returns, what it is ordered before."""
    if function.asynchronous is not None:
        return None  # calling it only makes a coroutine
    params = function.params
    positional = [p.name.value for p in (*params.posonly_params, *params.params)]
    if positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    names = frozenset({*positional, *(p.name.value for p in params.kwonly_params)})
    tokens = {CURRENT, ANY_OTHER, *names}

    while True:
        analysis = FunctionAnalysis(
            helpers.imports, {}, function=name, params=tensor_params(function), helpers=helpers, probes=tokens
        )
        analysis.role = SUMMARY
        analysis.live.streams.update(dict.fromkeys(on_current, CURRENT))
        analysis.run_function(function.body)
        if analysis.yields:
            return None  # calling a generator runs none of its body
        if analysis.tokens <= tokens:
            break
        tokens |= analysis.tokens
    end = join_states(analysis.exits)
    if end is None:
        return None

    def meaningful(token: str) -> bool:
        first = root(token)
        handed = first.startswith(RETURNED)  # an event returned beside a tensor (lint/returns.py)
        item = collection_item(token)
        if item is not None and not item[1]:
            return False  # `self.streams[i % n]`: picked by a key of the function's own
        return (
            token in (CURRENT, HOST) or handed or first in names or first in ("self", "cls") or first in helpers.globals
        )

    def outside(after: frozenset[str]) -> frozenset[str]:
        return frozenset(token for token in after if meaningful(token))

    rebound = {key for key in analysis.anypath.bound | analysis.anypath.rebound_by_calls if key.startswith("self.")}
    orders = []
    for token in sorted(tokens):
        after = end.tensors[probe_key(token)].writes
        ordered = next(iter(after)).after if after else frozenset()
        if token == ANY_OTHER and HOST in ordered:
            orders.append((token, frozenset({HOST})))
        elif token != ANY_OTHER and meaningful(token) and outside(ordered) != {token}:
            orders.append((token, outside(ordered)))
    effects = {
        Effect(key, mark.access.stream, mark.access.write, outside(mark.after), mark.access.write and key in rebound)
        for key, tensor in end.tensors.items()
        if (key in names and key not in analysis.anypath.bound) or _on_self(key)
        for mark in tensor.writes | tensor.reads
        if meaningful(mark.access.stream)
        and (mark.access.write or mark.access.stream != CURRENT or key.startswith("self."))
    }  # a read of an argument on the caller's stream is the read the call makes anyway; of `self.x`, not
    returned = {
        Effect(returned_key(position), mark.access.stream, True, outside(mark.after))
        for position, mark in analysis.anypath.returned
        if mark.access.stream != CURRENT and meaningful(mark.access.stream) and not mark.orders(CURRENT)
    }
    returned |= _ordered_on_caller(analysis.anypath.returned, outside)
    allocates = {params & names for params in analysis.anypath.allocated_returns}
    captures = tuple(
        (graph, _of_self(inputs), _of_self(outputs))
        for graph, (inputs, outputs) in sorted(analysis.graphs.items())
        if graph.startswith("self.")
    )
    if not orders and not effects and not returned and not allocates and not captures:
        return None
    return Summary(
        tuple(positional),
        names,
        tuple(orders),
        tuple(sorted(effects, key=_replay_order)),
        tuple(sorted(returned, key=_replay_order)),
        tuple(sorted(allocates, key=sorted)),
        captures,
    )


def _of_self(keys: set[str]) -> frozenset[str]:
    return frozenset(filter(_on_self, keys))


def _on_self(key: str) -> bool:
    """`self.x`: a tensor of the object, which the caller and the class's other methods name alike."""
    return key.startswith("self.") and key.count(".") == 1


def _ordered_on_caller(
    returned: set[tuple[int | None, Mark]], outside: Callable[[frozenset[str]], frozenset[str]]
) -> set[Effect]:
    """A value made on the caller's stream on every path, then ordered before other streams by
    the function (`buf = empty_like(x); copy.wait_stream(current)`): the caller's names for it
    start ordered before those too. The orderings every path made."""
    paths: dict[int | None, list[Mark]] = {}
    for position, mark in returned:
        paths.setdefault(position, []).append(mark)
    found = set()
    for position, marks in paths.items():
        if all(mark.access.stream == CURRENT for mark in marks):
            after = frozenset.intersection(*(outside(mark.after) for mark in marks))
            if after - {CURRENT}:
                found.add(Effect(returned_key(position), CURRENT, True, after))
    return found


def _replay_order(effect: Effect) -> tuple[str, bool, str, tuple[str, ...]]:
    """Per key, the last writes before the reads made since, as they ran: replayed the other way
    a write would erase the reads. Never the order of a set of marks, which follows the nodes'
    addresses and so changes from run to run."""
    return effect.key, not effect.write, effect.stream, tuple(sorted(effect.after))
