"""What a container keeps of the tensors put in it, as keys of the interpreter's state: the
items of a container kept on the object (`self.outputs[][0]`, across its methods) and of a
local list (`c[]`, `c[][1]` by position, for a later loop over it). Pure functions of the
state's tensors."""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from csan_lint.lint.analysis.tokens import item_key
from csan_lint.lint.names import dotted_name
from csan_lint.lint.ordering import TrackedTensor, join_tensor


def kept_items(tensors: dict[str, TrackedTensor], target: cst.BaseExpression, value: cst.BaseExpression) -> None:
    """`self.outputs[k] = pair` keeps the writes of the items of a returned tuple (`pair[0]`,
    `_bind_returned`) as those of any item of the object's container (`self.outputs[][0]`),
    for its other methods; and `pair = self.outputs[k]` starts from them. A list of results
    in flight between calls, with their events; only a return hands them on."""
    stored = isinstance(target, cst.Subscript)
    if isinstance(target, cst.Subscript):
        container, name = dotted_name(target.value), dotted_name(value)
    elif isinstance(value, cst.Subscript):
        container, name = dotted_name(value.value), dotted_name(target)
    else:
        return
    if container is None or name is None or not (container.startswith("self.") and container.count(".") == 1):
        return
    source, destination = (name, item_key(container)) if stored else (item_key(container), name)
    for key in [key for key in tensors if key.startswith(f"{source}[")]:
        kept = f"{destination}{key.removeprefix(source)}"
        old = tensors.get(kept) if stored else None  # another item may be this one
        tensor = replace(tensors[key], uses=frozenset(), alloc=None, escaped=False)  # an alias: not its owner
        tensors[kept] = tensor if old is None else join_tensor(old, tensor)


def keep_item(tensors: dict[str, TrackedTensor], container: str, value: cst.BaseExpression) -> None:
    """`c.append(t)`, `c.append((t, buf))` on a local list: its items carry what is known
    of the tensors put in (`c[]`, or `c[][0]` by position in a tuple; joined over the
    calls), for a later `for t in c` or `for t, _ in c`; the list keeps them alive, so an
    item is no owner to release."""
    if "." in container:
        return
    item = item_key(container)
    packed = isinstance(value, (cst.Tuple, cst.List))
    elements = [element.value for element in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
    for position, element in enumerate(elements):
        name = dotted_name(element)
        if name is None or (tensor := tensors.get(name)) is None:
            continue
        key, kept = f"{item}[{position}]" if packed else item, replace(tensor, escaped=True)
        tensors[key] = kept if key not in tensors else join_tensor(tensors[key], kept)


def bind_kept_items(
    tensors: dict[str, TrackedTensor], target: cst.BaseExpression, iterable: cst.BaseExpression
) -> None:
    """`for t in c`, `for t, _ in c`: each name a target binds starts from what the items of
    the local list `c` carry at its position (`keep_item`)."""
    container = dotted_name(iterable)
    if container is None:
        return
    item = item_key(container)
    if isinstance(target, (cst.Tuple, cst.List)):
        bound = [(element.value, f"{item}[{position}]") for position, element in enumerate(target.elements)]
    else:
        bound = [(target, item)]
    for name, key in bound:
        if isinstance(name, cst.Name) and key in tensors:
            tensors[name.value] = tensors[key]
