"""What annotations say a value is: a tensor, a collection of streams, a Python value.

Annotations are the code's own statement of its types; the analysis reads them where it has
no better knowledge (a parameter's producer, a callee's returned items), as mypy would.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from csan_lint.lint.names import dotted_name
from csan_lint.lint.nodes import descendants


def tensor_annotation(annotation: cst.BaseExpression) -> bool:
    """`torch.Tensor`, `Optional[Tensor]`, `list[Tensor]`, `nn.Parameter`: names a tensor."""
    return not _TENSOR_TYPES.isdisjoint(_annotation_names(annotation))


def streams_annotation(annotation: cst.BaseExpression) -> bool:
    """`list[torch.cuda.Stream]`, `Sequence[Stream]`, `tuple[Stream, ...]`: a collection of streams."""
    return (
        isinstance(annotation, cst.Subscript)
        and set(_annotation_names(annotation.value)) <= _COLLECTIONS
        and "Stream" in _annotation_names(annotation)
    )


_COLLECTIONS = frozenset({"list", "List", "Sequence", "tuple", "Tuple", "Iterable", "typing", "abc", "collections"})
"""Generic collections an annotation may name (`typing.List`, `collections.abc.Sequence`)."""


_TENSOR_TYPES = frozenset(
    {"Tensor", "Parameter"}
    | {
        f"{kind}Tensor"
        for kind in ("Float", "Double", "Half", "BFloat16", "Byte", "Char", "Short", "Int", "Long", "Bool")
    }
)
"""Tensor types as annotations name them, the legacy typed ones (`torch.cuda.FloatTensor`) too."""


def _annotation_names(annotation: cst.BaseExpression) -> Iterator[str]:
    """The last part of every name an annotation spells, a quoted one's (`"torch.Tensor"`) too."""
    for node in descendants(annotation):
        if isinstance(node, cst.Name):
            yield node.value
        elif isinstance(node, cst.Attribute):
            yield node.attr.value
        elif isinstance(node, cst.SimpleString) and isinstance(quoted := node.evaluated_value, str):
            try:
                yield from _annotation_names(cst.parse_expression(quoted))
            except cst.ParserSyntaxError:
                continue


_HOST_RETURNS = frozenset({"int", "float", "bool", "str", "bytes", "None"})
_TUPLES = frozenset({"tuple", "Tuple", "typing.Tuple"})


def returns_host_value(function: cst.FunctionDef | None) -> bool:
    """A function annotated to return a Python number, bool or string: no tensor."""
    returns = function.returns if function is not None else None
    return returns is not None and _host_annotation(returns.annotation)


def host_positions(function: cst.FunctionDef | None) -> frozenset[int]:
    """The items of a returned tuple annotated as Python numbers, bools or strings, by position
    (`-> tuple[Tensor, int]`: 1): no tensor."""
    annotation = function.returns.annotation if function is not None and function.returns is not None else None
    if not (isinstance(annotation, cst.Subscript) and dotted_name(annotation.value) in _TUPLES):
        return frozenset()
    items = [element.slice for element in annotation.slice]
    if not all(isinstance(item, cst.Index) and not isinstance(item.value, cst.Ellipsis) for item in items):
        return frozenset()  # `tuple[int, ...]`
    return frozenset(i for i, item in enumerate(items) if isinstance(item, cst.Index) and _host_annotation(item.value))


def _host_annotation(annotation: cst.BaseExpression) -> bool:
    """`int`, `float | None`: a Python value, no tensor."""
    if isinstance(annotation, cst.BinaryOperation) and isinstance(annotation.operator, cst.BitOr):
        return _host_annotation(annotation.left) and _host_annotation(annotation.right)
    return dotted_name(annotation) in _HOST_RETURNS
