"""lint/positions.py gives, for every node, the range libcst's PositionProvider gives."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from csan_lint.lint.positions import Positions
from csan_lint.lint.registry import all_rules

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TRICKY = {
    "crlf": "import torch\r\ndef f(s):\r\n    with torch.cuda.stream(s):\r\n        x = 1\r\n",
    "lone-cr": "x = 1\ry = (2,\r 3)\r",
    "tabs-and-continuations": "if a:\n\tx = \\\n\t  1\n\ty = [\n 1, 2]\n",
    "decorated-and-strings": '@d\n@e(1)\ndef f():\n    """doc\n    lines"""\n    return f"{x!r:>{w}}"\n',
    "comments-and-blank-lines": "# head\n\n\nclass A:  # trailing\n\n    # inner\n    x: int = 1\n\n\n# tail",
    "unicode": "ä = 'ß' + \"ü\"  # ✓\nλ = lambda µ: µ\n",
    "semicolons-and-one-liners": "a = 1; b = 2\nwhile a: a -= 1\ntry: pass\nexcept (E, F) as e: raise\n",
    "empty": "",
}


def corpus() -> list[tuple[str, str]]:
    sources = [(name, text) for name, text in TRICKY.items()]
    sources += [(path.name, path.read_text()) for path in sorted(EXAMPLES.glob("**/*.py"))]
    for rule in all_rules():
        sources += [(f"{rule.code}-{kind}{n}", case.code) for kind in ("VALID", "INVALID") for n, case in enumerate(getattr(rule, kind))]
    return sources


@pytest.mark.parametrize(("name", "source"), corpus(), ids=[name for name, _ in corpus()])
def test_every_node_where_position_provider_puts_it(name: str, source: str) -> None:
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    positions = Positions(module)
    assert expected, name
    wrong = [(type(node).__name__, want, positions[node]) for node, want in expected.items() if positions[node] != want]
    assert not wrong
