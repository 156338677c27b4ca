"""Our shortcuts around libcst's slow paths answer what libcst answers, for every node of a
corpus (the examples, the rule cases, our own sources, syntax corner cases):
lint/positions.py the ranges of PositionProvider, lint/nodes.py the `children` of each node,
and the hot walks' `type(node) is cst.Call` the answer of `isinstance`."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from csan_lint.lint.nodes import children, descendants, parse_module, remembered_subtrees
from csan_lint.lint.positions import Positions
from csan_lint.lint.registry import all_rules

ROOT = Path(__file__).resolve().parents[2]

TRICKY = {
    "crlf": "import torch\r\ndef f(s):\r\n    with torch.cuda.stream(s):\r\n        x = 1\r\n",
    "lone-cr": "x = 1\ry = (2,\r 3)\r",
    "tabs-and-continuations": "if a:\n\tx = \\\n\t  1\n\ty = [\n 1, 2]\n",
    "decorated-and-strings": '@d\n@e(1)\ndef f():\n    """doc\n    lines"""\n    return f"{x!r:>{w}}"\n',
    "comments-and-blank-lines": "# head\n\n\nclass A:  # trailing\n\n    # inner\n    x: int = 1\n\n\n# tail",
    "unicode": "ä = 'ß' + \"ü\"  # ✓\nλ = lambda µ: µ\n",
    "semicolons-and-one-liners": "a = 1; b = 2\nwhile a: a -= 1\ntry: pass\nexcept (E, F) as e: raise\n",
    "empty": "",
    "syntax-zoo": (
        "from __future__ import annotations\n"
        "import a.b as c, d\nfrom .e import (f as g, h)\nfrom . import *\n"
        "@deco(1, *xs, k=2, **kw)\nasync def f(a, /, b: int = 1, *args, c, d=2, **kwargs) -> T[int]:\n"
        "    global x\n    nonlocal_ = lambda p, *q, r=1: p\n"
        "    async with m() as (n, o), p:\n        await q\n"
        "    async for i in aiter():\n        yield i\n    yield from g()\n"
        "    if (w := v) and not w or u is not t in s:\n        del a[1:2:3], b.c\n"
        "    elif x: pass\n    else: ...\n"
        "    try:\n        raise E from F\n    except* (G, H) as e:\n        assert e, 'm'\n"
        "    finally:\n        return -x ** ~y // z @ w % 2 << 1 >> 1 & 1 | 1 ^ 1\n"
        "class K(B, metaclass=M):\n    x: int\n    y: list[int] = [i for i in r if i]\n"
        "    z = {k: v for k, v in d.items()}, {s for s in t}, (g for g in h)\n"
        "    def m(self): return (f'{self!r:>{w}} {x=}' 'plain' r'\\d', b'raw', 1j, 1.5, 0x1F, x[::2], x[a, ...])\n"
        "match p:\n    case [1, *rest] | {'k': v, **kw} if v: pass\n"
        "    case Point(x=0, y=_) as pt: pass\n    case _: pass\n"
        "a += 1; b: int; c[d] = e = f; g, *h = i\nwhile j: break\nfor k in l: continue\nelse: m = n if o else p\n"
    ),
}


def corpus() -> list[tuple[str, str]]:
    sources = [(name, text) for name, text in TRICKY.items()]
    sources += [(path.name, path.read_text()) for path in sorted((ROOT / "examples").glob("**/*.py"))]
    sources += [
        (f"own-{path.name}", path.read_text())
        for folder in ("lint", "runtime")
        for path in sorted((ROOT / folder).glob("*.py"))
    ]
    for rule in all_rules():
        sources += [
            (f"{rule.code}-{kind}{n}", case.code)
            for kind in ("VALID", "INVALID")
            for n, case in enumerate(getattr(rule, kind))
        ]
    return sources


@pytest.mark.parametrize(("name", "source"), corpus(), ids=[name for name, _ in corpus()])
def test_every_node_where_position_provider_puts_it(name: str, source: str) -> None:
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    positions = Positions(module)
    assert expected, name
    wrong = [(type(node).__name__, want, positions[node]) for node, want in expected.items() if positions[node] != want]
    assert not wrong


@pytest.mark.parametrize(("name", "source"), corpus(), ids=[name for name, _ in corpus()])
def test_every_nodes_children_as_libcst_gives_them(name: str, source: str) -> None:
    todo: list[cst.CSTNode] = [cst.parse_module(source)]
    while todo:
        node = todo.pop()
        expected = node.children
        assert list(children(node)) == list(expected), type(node).__name__
        todo.extend(expected)


def _walk(root: cst.CSTNode) -> list[cst.CSTNode]:
    """The walk the scans did before `descendants`: pop the last node, push its children."""
    walked: list[cst.CSTNode] = []
    todo = [root]
    while todo:
        node = todo.pop()
        walked.append(node)
        todo.extend(node.children)
    return walked


@pytest.mark.parametrize("name", ["syntax-zoo", "decorated-and-strings"])
def test_descendants_are_the_nodes_of_a_fresh_walk_in_its_order(name: str) -> None:
    module = cst.parse_module(TRICKY[name])
    function = next(node for node in _walk(module) if isinstance(node, cst.FunctionDef))
    assert descendants(module) == _walk(module)
    with remembered_subtrees():
        assert descendants(function.body) is descendants(function.body)  # walked once, then remembered
        assert descendants(function.body) == _walk(function.body)
        assert descendants(module) == _walk(module)
    assert descendants(module) is not descendants(module)  # outside: nothing kept alive


def test_a_root_freed_by_the_analysis_leaves_no_descendants_to_a_later_node() -> None:
    """Subtrees are remembered by id(root): the next node of the same size takes a freed node's
    memory, so its id, unless the remembered root is kept alive."""
    with remembered_subtrees():
        for _ in range(50):
            first = cst.Name("a")
            assert len(descendants(first)) == 1
            lpar, rpar = [cst.LeftParen()], [cst.RightParen()]
            del first
            second = cst.Name("b", lpar=lpar, rpar=rpar)
            assert descendants(second) == _walk(second)


def test_no_node_class_of_a_parsed_tree_has_subclasses() -> None:
    """The hot walks (lint/scan.py, `dotted_name`) test node types with `is`, not `isinstance`:
    the same answer only while libcst's concrete node classes stay final."""
    seen: set[type] = set()
    for _, source in corpus():
        todo: list[cst.CSTNode] = [parse_module(source)]
        while todo:
            node = todo.pop()
            seen.add(type(node))
            todo.extend(children(node))
    assert {cst.Call, cst.Name, cst.Attribute, cst.Assign, cst.Comparison} <= seen
    assert not {kind.__name__: kind.__subclasses__() for kind in seen if kind.__subclasses__()}


def test_a_libcst_whose_codegen_calls_other_hooks_gets_position_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """libcst's codegen hooks are internal: should a release stop calling them, positions come
    from PositionProvider instead of being wrong."""
    from csan_lint.lint import positions as positions_module

    monkeypatch.setattr(positions_module._TokenMarks, "after_codegen", lambda self, node: None)
    source = TRICKY["decorated-and-strings"]
    module = cst.parse_module(source)
    found = positions_module.positions(module)
    assert not isinstance(found, Positions)
    assert dict(found) == dict(MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider))


def test_a_libcst_whose_visit_cannot_be_read_falls_back_to_its_children(monkeypatch: pytest.MonkeyPatch) -> None:
    from csan_lint.lint import nodes

    def broken(self: object, node: cst.CSTNode, attribute: str) -> None:
        raise AttributeError("a libcst without on_visit_attribute")

    monkeypatch.setattr(nodes, "_ORDER", {})
    monkeypatch.setattr(nodes._FieldOrder, "on_visit_attribute", broken)
    call = cst.parse_expression("f(a, *b, k=c)")
    assert list(children(call)) == list(call.children)
    assert nodes._ORDER == {cst.Call: None}


@pytest.mark.parametrize(("name", "source"), corpus(), ids=[name for name, _ in corpus()])
def test_parse_module_without_node_checks_builds_libcsts_tree(name: str, source: str) -> None:
    assert parse_module(source).deep_equals(cst.parse_module(source))


def test_nodes_are_checked_again_after_a_parse() -> None:
    with pytest.raises(cst.ParserSyntaxError):
        parse_module("def f(:\n")
    parse_module("x = 1\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")
