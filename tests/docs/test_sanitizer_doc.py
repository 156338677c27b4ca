"""docs/sanitizer.md shows, for every runtime error kind, a program and the report it gets: each
program must still get exactly that output (addresses aside) and exit status, and the page
must cover every kind."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from csan_lint.runtime.kinds import ALL_KINDS

SANITIZER_MD = Path(__file__).resolve().parents[2] / "docs" / "sanitizer.md"
_SECTION = re.compile(
    r"^### `(?P<kind>[a-z-]+)`\n.*?```python\n# (?P<name>\w+\.py)\n(?P<code>.*?)```\n\n"
    r"```text\n\$ python -m csan_lint\.runtime --device emulated (?P=name); echo \"exit \$\?\"\n"
    r"(?P<output>.*?)\nexit (?P<status>\d+)\n```",
    re.S | re.M,
)
_ADDRESS = re.compile(r"0x[0-9a-f]+")


def _examples() -> list[dict[str, str]]:
    return [m.groupdict() for m in _SECTION.finditer(SANITIZER_MD.read_text())]


def test_every_kind_has_an_example() -> None:
    assert [e["kind"] for e in _examples()] == list(ALL_KINDS)


@pytest.mark.parametrize("example", _examples(), ids=lambda e: e["kind"])
def test_example_gets_the_report_shown(example: dict[str, str], tmp_path, monkeypatch, capsys) -> None:
    pytest.importorskip("torch")
    from csan_lint.runtime.__main__ import main

    (tmp_path / example["name"]).write_text(example["code"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    status = main(["--device", "emulated", example["name"]])
    captured = capsys.readouterr()
    # torch's own warning when numpy is missing is no part of the example's output.
    shown = [
        line
        for line in (captured.out + captured.err).splitlines()
        if "NumPy" not in line and "_conversion_method" not in line
    ]
    assert _ADDRESS.sub("0x", "\n".join(shown)) == _ADDRESS.sub("0x", example["output"])
    assert status == int(example["status"])
    assert any(line.startswith(f"csan: {example['kind']}: ") for line in shown)


DOCS = sorted((SANITIZER_MD.parent).glob("*.md")) + [SANITIZER_MD.parents[1] / "README.md"]
_NAMED = re.compile(r"`(?:python -m )?(csan_lint(?:\.\w+)+)")
"""A dotted name of ours at the start of a code span: `csan_lint.runtime.report.to_json`,
`csan_lint.runtime.sanitize(trace_out=PATH)`, `python -m csan_lint.runtime`."""


def _resolves(name: str) -> bool:
    import importlib

    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_module_and_name_the_docs_give_exists(doc: Path) -> None:
    """A name a reader would import or call (`csan_lint.runtime.report.to_json`) is there."""
    pytest.importorskip("torch")  # the runtime's modules import it
    names = sorted(set(_NAMED.findall(doc.read_text())))
    assert [name for name in names if not _resolves(name)] == []
