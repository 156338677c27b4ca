"""Tensors that come with an event (CSL201): a function that makes a stream wait on an event it
reads from an object says the object's tensors were made on the stream that recorded the event.

A producer copies or computes a batch on its own stream, records an event there and hands both
over together (`batch["ready"] = event; queue.put(batch)`). The consumer takes the batch, makes
its stream wait on the event and uses the tensors there: the wait orders the consumer after the
producer, but the tensors' blocks still belong to the producer's stream. With no `record_stream`
for the consumer's stream, once the batch is dropped (the next iteration of the loop) the
producer's next allocation may reuse a block while the consumer's kernels still read it. Nothing
else in the function shows the producer's stream, so the interpreter (lint/accesses.py) cannot
see this; the wait is the evidence, as a record is in lint/siblings.py.

For precision, only what the function's own code settles is taken:
- the event is read from a holder (`b.ready`, `b["ready"]`, `b.pop("ready")`, `getattr(b, ...)`,
  or a name bound only to one), and the holders are its chain up to what a call handed over
  here (`await queue.get()`), or it is unpacked beside tensors from one (`x, ready = q.get()`);
  a holder made here (a literal, a constructor), rooted at `self`/`cls`, or a parameter or a
  loop item (the caller's, who may keep it alive) gives no evidence;
- the waiting stream is the current stream (the use is in the wait's own stream block) or a
  stream the text names, and the use is in a block that enters it;
- a use of the holder's tensors after the wait: an item read from a holder (`b.x`, `b["x"]`,
  `b.get("x")`) used like a tensor (lint/siblings.py's test), or a holder other than the event's
  own passed whole to a call that may launch work (`step(**batch)`);
- nothing is reported where the function records any of the holders' tensors in any way its
  code shows (also by passing a holder to a function of the module that calls `record_stream`),
  where a holder escapes (returned, stored, put in a container), or where the function may
  order the producer after the uses (a host sync, a wait by another stream).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst

from csan_lint.lint.analysis.uses import event_wait
from csan_lint.lint.facts import Carried
from csan_lint.lint.names import ImportTable, dotted_name
from csan_lint.lint.nodes import target_names
from csan_lint.lint.recognize import NO_FUNCTIONS, ContextFunctions
from csan_lint.lint.siblings import FunctionText, passes_work
from csan_lint.lint.values import code_of
from csan_lint.lint.vocabulary import HOST_ATTRIBUTES

_OWN = ("self", "cls")
_ITEM_METHODS = frozenset({"pop", "get"})
"""Methods that read one item of a container by its key."""
_ITERATING = frozenset({"zip", "enumerate", "iter", "reversed", "sorted", "map", "filter", "list", "tuple"})
"""Builtins that go through a container: what they take holds the values, it is not one."""
_MADE = (cst.Dict, cst.List, cst.Tuple, cst.Set, cst.DictComp, cst.ListComp, cst.SetComp, cst.SimpleString)
"""Values a function makes itself: what they hold was made here, not handed over."""


def unrecorded_carried(
    function: cst.FunctionDef,
    imports: ImportTable,
    contexts: ContextFunctions = NO_FUNCTIONS,
    recorders: frozenset[str] = frozenset(),
) -> list[Carried]:
    """The tensors `function` takes with an event it waits on and uses unrecorded on the waiting
    stream (the caller picks the functions: those whose own code waits on an event, `ModuleUses`).
    `recorders`: the last names of the module's functions that call `record_stream`."""
    text = FunctionText(imports, contexts)
    text.walk(function.body)
    found = []
    for wait, stream, event in _event_waits(text):
        holders, chain = _holders(text, event)
        beside = _unpacked_beside(text, event)
        names = holders + beside
        if not names or any(_escapes(text, name) for name in names):
            continue
        named = None if text.is_current(stream) else code_of(stream)  # None: the current stream
        if text.joins(named) or _covered(text, names, stream, recorders):
            continue
        on_stream, after = text.on_stream(wait, named), text.position[wait]
        candidates = [
            *_uses(text, holders, chain, on_stream),
            *((name, use) for name in beside if (use := _tensor_use(text, name, on_stream)) is not None),
        ]
        uses = [pair for pair in candidates if text.position[pair[1]] > after]
        if uses:
            tensor, use = min(uses, key=lambda pair: text.position[pair[1]])
            found.append(
                Carried(tensor, use, text.statement[use], code_of(event), wait, code_of(stream), named is None)
            )
            break  # one finding per function: the first wait's first use
    return found


def _event_waits(text: FunctionText) -> Iterator[tuple[cst.Call, cst.BaseExpression, cst.BaseExpression]]:
    """(call, waiting stream, event) of each wait on an event, in source order."""
    for node in text.position:
        if isinstance(node, cst.Call) and (wait := event_wait(node)) is not None:
            yield node, *wait


def _holders(text: FunctionText, event: cst.BaseExpression) -> tuple[list[str], set[cst.CSTNode]]:
    """The objects `event` is read from, innermost first (`t.event`, `t = batch.pop(k)`: t, batch),
    and the expressions on the way; no holder unless the outermost is what a call handed over here
    (not made here, not a parameter or loop item the caller may keep, not the object's own state)."""
    holders: list[str] = []
    chain: set[cst.CSTNode] = set()
    node: cst.BaseExpression | None = event
    while node is not None:
        chain.add(node)
        if isinstance(node, cst.Name):
            values = text.binds.get(node.value, [])
            if len(values) > 1 or any(isinstance(value, _MADE) or _constructs(value) for value in values):
                return [], chain
            node = _unawaited(values[0]) if values else None
            if node is None or not isinstance(node, cst.Call) and _item_of(node) is None:
                return [], chain  # a parameter, a loop item: the caller's, who may keep it alive
            if _item_of(node) is None:
                break  # what a call hands over: a queue's item, a future's result
            continue
        base = _item_of(node)
        if base is None:
            break
        holder = dotted_name(base)
        if holder is None or holder.split(".")[0] in _OWN:
            return [], chain
        holders.append(holder)
        node = base
    return holders, chain


def _unpacked_beside(text: FunctionText, event: cst.BaseExpression) -> list[str]:
    """The other names of the one tuple assignment that binds the event to what a call hands over
    (`x, ready = queue.get()`: x); none for any other event."""
    if not isinstance(event, cst.Name) or text.binds.get(event.value) != [None]:
        return []
    for node in text.position:
        if (
            isinstance(node, cst.Assign)
            and len(node.targets) == 1
            and isinstance(value := _unawaited(node.value), cst.Call)
            and not _constructs(value)
        ):
            names = list(target_names(node.targets[0].target))
            if len(names) > 1 and event.value in names:
                return [name for name in names if name not in (event.value, "_") and name in text.loads]
    return []


def _tensor_use(text: FunctionText, name: str, on_stream: Callable[[cst.CSTNode], bool]) -> cst.CSTNode | None:
    """The first use of `name` like a tensor where `on_stream`; None for a container: a value
    iterated (`for n in numels`, `zip(numels, ...)`) holds numbers or tensors, not one."""
    for load in text.loads[name]:
        parent = text.parent.get(load)
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is load:
            return None
        call = _called_with(text, load)
        if call is not None and _leaf(call.func) in _ITERATING and isinstance(call.func, cst.Name):
            return None
    return text.first_use(list[cst.BaseExpression](text.loads[name]), on_stream)


def _unawaited(value: cst.BaseExpression | None) -> cst.BaseExpression | None:
    return value.expression if isinstance(value, cst.Await) else value


def _item_of(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """The container `node` reads one item of: `b` in `b.x`, `b[k]`, `b.pop(k)`, `getattr(b, ...)`."""
    if isinstance(node, (cst.Attribute, cst.Subscript)):
        return node.value
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _ITEM_METHODS:
        return node.func.value if node.args else None  # `queue.get()` takes no key
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "getattr" and node.args:
        return node.args[0].value
    return None


def _constructs(value: cst.BaseExpression | None) -> bool:
    """A call of a class or of a builtin container (`Batch(...)`, `dict(...)`): made here."""
    func = value.func if isinstance(value, cst.Call) else None
    leaf = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return leaf.lstrip("_")[:1].isupper() or leaf in ("dict", "list", "tuple", "set")


def _covered(text: FunctionText, holders: list[str], stream: cst.BaseExpression, recorders: frozenset[str]) -> bool:
    """Whether the function records any tensor of the holders: a `record_stream` of something
    read from one (directly or through a loop over it), or a holder passed to a recorder of the
    module or, with the waiting `stream`, to code we cannot see (`keep_for(batch, stream)`)."""
    for _, recorded, _ in text.records:
        named = {code_of(recorded)} | {holder for holder, _ in text.chains(recorded)}
        if any(_within(name, holder) for name in named for holder in holders):
            return True
    waiting = code_of(stream)
    for holder in holders:
        for load in text.loads.get(holder, []):
            call = _called_with(text, load)
            if call is not None and (
                _leaf(call.func) in recorders or any(code_of(arg.value) == waiting for arg in call.args)
            ):
                return True
    return False


def _within(name: str, holder: str) -> bool:
    return name == holder or name.startswith((f"{holder}.", f"{holder}["))


def _escapes(text: FunctionText, holder: str) -> bool:
    """Whether a holder goes on where this module does not follow it: returned, yielded, bound to
    another name or stored, put in a container or a literal, handed to a constructor."""
    for load in text.loads.get(holder, []):
        parent = text.parent.get(load)
        if isinstance(parent, (cst.Return, cst.Yield, cst.Element, cst.DictElement, cst.StarredElement)):
            return True
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is load:
            return True
        call = _called_with(text, load)
        if call is not None and (passes_work(call) is None or _constructs(call)):
            return True  # `_Transfer(gpu_result=b)` keeps it: a leading underscore hides no class
    return False


def _uses(
    text: FunctionText, holders: list[str], chain: set[cst.CSTNode], on_stream: Callable[[cst.CSTNode], bool]
) -> Iterator[tuple[str, cst.CSTNode]]:
    """(tensor, use) of each holder's tensors used where the waiting stream is current; what the
    event is read through (`chain`) is no tensor."""
    for index, holder in enumerate(holders):
        for (read_holder, attribute), reads in text.reads.items():
            if read_holder == holder and attribute not in HOST_ATTRIBUTES and not chain.intersection(reads):
                use = text.first_use(reads, on_stream)
                if use is not None:
                    yield f"{holder}.{attribute}", use
        for load in text.loads.get(holder, []):
            item = _item_read(text, load)
            if item is not None and item not in chain:
                use = text.first_use([item], on_stream)
                if use is not None:
                    yield code_of(item), use
            elif index > 0 and (call := _called_with(text, load)) is not None and passes_work(call) and on_stream(load):
                yield holder, load  # the event's own holder (a transfer record) is not passed whole


def _item_read(text: FunctionText, load: cst.CSTNode) -> cst.BaseExpression | None:
    """`b[k]` or `b.get(k)`/`b.pop(k)` around a load of `b`."""
    parent = text.parent.get(load)
    if isinstance(parent, cst.Subscript) and parent.value is load:
        return parent
    call = text.parent.get(parent) if isinstance(parent, cst.Attribute) else None
    if isinstance(call, cst.Call) and call.func is parent and _item_of(call) is load:
        return call
    return None


def _called_with(text: FunctionText, load: cst.CSTNode) -> cst.Call | None:
    """The call `load` is an argument of (`f(b)`, `f(*b)`, `f(**b)`), if it is one."""
    parent = text.parent.get(load)
    call = text.parent.get(parent) if isinstance(parent, cst.Arg) else None
    return call if isinstance(call, cst.Call) else None


def _leaf(func: cst.BaseExpression) -> str:
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
