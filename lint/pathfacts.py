"""Path facts: what the tests of `if`/`elif`/`while` say about one name on the path taken, so
that an ordering made under one test holds under a later test that implies it.

    if method != 2:
        side.wait_stream(torch.cuda.current_stream())
    ...
    elif method == 1:          # implies `method != 2`: the wait above was made on this path
        with torch.cuda.stream(side): ...

A fact is a test of one name (a local, or an attribute such as `self.use_streams`) against
literal constants: `x == c`, `x != c`, `x in (a, b)`, `x is None`, a bare `flag` or `not flag`,
and `and`/`or` of them where the outcome says each part. Nothing else is modelled: a test of
anything else gives no fact. A fact holds until its name is rebound here; a call that changes
an attribute behind the function's back (`self.toggle()`) is not seen (assumed not to happen).

The stream-flow interpreter keeps them (`FlowState.facts`, `Mark.held_if` in lint/ordering.py);
hostflow does not: its pending copies and events would need held orderings of their own.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Literal

import libcst as cst

from csan_lint.lint.names import dotted_name

Kind = Literal["in", "not in", "truthy", "falsy"]


@dataclass(frozen=True)
class Fact:
    """`name in values`, `name not in values`, or the name's truth value (`values` empty)."""

    name: str
    kind: Kind
    values: frozenset[Hashable] = frozenset()


Facts = frozenset[Fact]
NO_FACTS: Facts = frozenset()


def facts_of(test: cst.BaseExpression, outcome: bool) -> Facts:
    """What holds where `test` had the truth value `outcome`."""
    return frozenset().union(*(_facts_of_part(part, holds) for part, holds in conjuncts(test, outcome)))


def conjuncts(test: cst.BaseExpression, outcome: bool) -> list[tuple[cst.BaseExpression, bool]]:
    """The parts of `test` whose truth value is known where it had `outcome`, with that value:
    through `not`, each part of `a and b` True or of `a or b` False."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return conjuncts(test.expression, not outcome)
    if isinstance(test, cst.BooleanOperation):
        each = isinstance(test.operator, cst.And) == outcome
        return [known for part in _parts(test) for known in conjuncts(part, outcome)] if each else []
    return [(test, outcome)]


def _facts_of_part(test: cst.BaseExpression, outcome: bool) -> Facts:
    if isinstance(test, cst.Comparison):
        fact = _compared(test)
        if fact is None:
            return NO_FACTS
        return frozenset({fact if outcome else _negated(fact)})
    name = dotted_name(test)
    if name is None:
        return NO_FACTS
    return frozenset({Fact(name, "truthy" if outcome else "falsy")})


def equated(test: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression, bool] | None:
    """The two sides of `a == b` or `a is b` (True: it holds where they are one object), of
    `a != b` or `a is not b` (False); None for any other test."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    [target] = test.comparisons
    if isinstance(target.operator, (cst.Equal, cst.Is)):
        return test.left, target.comparator, True
    if isinstance(target.operator, (cst.NotEqual, cst.IsNot)):
        return test.left, target.comparator, False
    return None


def _parts(test: cst.BooleanOperation) -> list[cst.BaseExpression]:
    """`a`, `b`, `c` of `a and b and c`, without recursing down the chain (generated code makes
    chains longer than the interpreter's recursion limit)."""
    kind = type(test.operator)
    parts: list[cst.BaseExpression] = []
    stack: list[cst.BaseExpression] = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, kind):
            stack += [node.right, node.left]
        else:
            parts.append(node)
    return parts


def _compared(test: cst.Comparison) -> Fact | None:
    """`x == c`, `c != x`, `x in (a, b)`, `x is None` as a fact that holds when it is True."""
    if len(test.comparisons) != 1:
        return None
    [target] = test.comparisons
    operator, left, right = target.operator, test.left, target.comparator
    if isinstance(operator, (cst.In, cst.NotIn)):
        name, values = dotted_name(left), _constants(right)
    else:
        if dotted_name(left) is None:
            left, right = right, left
        name, value = dotted_name(left), _constant(right)
        values = None if value is _NOT_CONSTANT else frozenset({value})
        if isinstance(operator, (cst.Is, cst.IsNot)) and not _singletons(values):
            values = None  # identity with anything but None/True/False is no test of a value
    if name is None or values is None:
        return None
    member = isinstance(operator, (cst.Equal, cst.In, cst.Is))
    if not member and not isinstance(operator, (cst.NotEqual, cst.NotIn, cst.IsNot)):
        return None  # `<`, `>=`: not modelled
    return Fact(name, "in" if member else "not in", values)


_NOT_CONSTANT = object()


def _constant(expr: cst.BaseExpression) -> Hashable:
    """A literal number, string, None, True or False as its Python value (compared as Python
    compares them: `1 == 1.0 == True`)."""
    if isinstance(expr, cst.Integer | cst.Float):
        return expr.evaluated_value
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value
    if isinstance(expr, cst.Name) and expr.value in _NAMED:
        return _NAMED[expr.value]
    if (
        isinstance(expr, cst.UnaryOperation)
        and isinstance(expr.operator, cst.Minus)
        and isinstance(expr.expression, cst.Integer | cst.Float)
    ):
        return -expr.expression.evaluated_value
    return _NOT_CONSTANT


_NAMED: dict[str, Hashable] = {"None": None, "True": True, "False": False}


def _constants(expr: cst.BaseExpression) -> frozenset[Hashable] | None:
    """The values of a literal tuple, list or set of constants; None for anything else."""
    if not isinstance(expr, cst.Tuple | cst.List | cst.Set):
        return None
    values = [_constant(element.value) for element in expr.elements if not isinstance(element, cst.StarredElement)]
    if len(values) != len(expr.elements) or _NOT_CONSTANT in values:
        return None
    return frozenset(values)


def _singletons(values: frozenset[Hashable] | None) -> bool:
    return values is not None and all(value is None or isinstance(value, bool) for value in values)


def _negated(fact: Fact) -> Fact:
    opposite: dict[Kind, Kind] = {"in": "not in", "not in": "in", "truthy": "falsy", "falsy": "truthy"}
    return Fact(fact.name, opposite[fact.kind], fact.values)


@dataclass(frozen=True)
class _Known:
    """Everything a set of facts says of one name."""

    allowed: frozenset[Hashable] | None
    """The values it may have; None: any value but the excluded ones."""
    excluded: frozenset[Hashable]
    truth: bool | None
    contradictory: bool


def _known(facts: Iterable[Fact], name: str) -> _Known:
    allowed: frozenset[Hashable] | None = None
    excluded: frozenset[Hashable] = frozenset()
    truths = set()
    for fact in facts:
        if fact.name != name:
            continue
        if fact.kind == "in":
            allowed = fact.values if allowed is None else allowed & fact.values
        elif fact.kind == "not in":
            excluded |= fact.values
        else:
            truths.add(fact.kind == "truthy")
    if allowed is not None:
        allowed = frozenset(value for value in allowed if value not in excluded)
        truth_values = {bool(value) for value in allowed}
        if len(truth_values) == 1:  # `x in (1, 2)`: x is truthy
            truths |= truth_values
    contradictory = len(truths) > 1 or (allowed is not None and not allowed)
    return _Known(allowed, excluded, truths.pop() if len(truths) == 1 else None, contradictory)


def contradicts(facts: Facts) -> bool:
    """No path can have all of `facts`."""
    return any(_known(facts, name).contradictory for name in {fact.name for fact in facts})


def implies(facts: Facts, condition: Facts) -> bool:
    """Every path with `facts` has `condition` (a conjunction) too."""
    return all(_implies(facts, fact) for fact in condition)


def _implies(facts: Facts, fact: Fact) -> bool:
    known = _known(facts, fact.name)
    if known.contradictory:
        return True
    if fact.kind == "in":
        return known.allowed is not None and known.allowed <= fact.values
    if fact.kind == "not in":
        return fact.values <= known.excluded or (known.allowed is not None and not known.allowed & fact.values)
    return known.truth is not None and known.truth == (fact.kind == "truthy")


def none_names(facts: Facts) -> set[str]:
    """The names `facts` say are None (`x is None`, or `x is not None` False)."""
    return {fact.name for fact in facts if fact.kind == "in" and fact.values == frozenset({None})}


def host_resident(facts: Facts) -> set[str]:
    """The tensors `facts` say live on the host (`x.device.type == "cpu"`, `x.is_cpu`, `not
    x.is_cuda`): they have no device memory, so no stream accesses it or allocates it."""
    names = set()
    for fact in facts:
        base, _, attribute = fact.name.rpartition(".")
        if attribute == "type" and base.endswith(".device") and fact.kind == "in" and fact.values == {"cpu"}:
            names.add(base.removesuffix(".device"))
        elif (attribute, fact.kind) in (("is_cpu", "truthy"), ("is_cuda", "falsy")) and base:
            names.add(base)
    return names


def about(facts: Facts, name: str) -> bool:
    """Whether a fact of `facts` tests `name`, or an attribute of it."""
    return any(fact.name == name or fact.name.startswith(f"{name}.") for fact in facts)


def without(facts: Facts, name: str) -> Facts:
    """`facts` once `name` is rebound: those of other names."""
    return frozenset(fact for fact in facts if not about(frozenset({fact}), name)) if about(facts, name) else facts


def describe_fact(fact: Fact) -> str:
    """A fact as a test that holds (`method != 2`, `x is None`, `not flag`), for a reader."""
    if fact.kind in ("truthy", "falsy"):
        return fact.name if fact.kind == "truthy" else f"not {fact.name}"
    values = sorted(map(repr, fact.values))
    member = fact.kind == "in"
    if len(values) == 1:
        identity = _singletons(fact.values)
        operator = ("is" if member else "is not") if identity else ("==" if member else "!=")
        return f"{fact.name} {operator} {values[0]}"
    return f"{fact.name} {fact.kind} ({', '.join(values)})"
