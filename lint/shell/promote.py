"""Files the text prefilter rejected that import a class or function with stream code from
another linted module.

Such a file names no stream API itself, yet a call into that module (`comm.send(y)`, with
`comm = Comm()` from `pkg.comm`) may run the caller's tensors on another stream: the engine
must see it, with the package index beside it. The test is a cost gate on text, a superset of
what the engine follows: every `from module import name` (relative ones resolved against the
file's own package, parenthesized lists included), its module matched against the stream
modules' names by suffix, as the package index resolves imports, and the name against that
module's top-level classes and functions whose own text mentions the stream API
(`stream_definitions`). An imported module object is not followed (`comm.Comm()`), and torch's
own modules are the API table's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from csan_lint.lint.shell.files import might_have_findings
from csan_lint.lint.summaries import module_name

_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<source>\.*[\w.]*)[ \t]+import[ \t]+(?:\((?P<grouped>[^)]*)\)|(?P<names>[\w., \t]*))"
    r"|import[ \t]+(?P<modules>[\w., \t]+))",
    re.MULTILINE,
)


_TOP_LEVEL = re.compile(r"^(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.MULTILINE)
_ANY_TOP_LEVEL = re.compile(r"^\S", re.MULTILINE)


def stream_definitions(source: str) -> frozenset[str]:
    """The top-level classes and functions of a module whose text mentions the stream API."""
    found = set()
    for match in _TOP_LEVEL.finditer(source):
        end = _ANY_TOP_LEVEL.search(source, match.end())
        if might_have_findings(source[match.start() : end.start() if end else len(source)]):
            found.add(match[1])
    return frozenset(found)


def imported_names(source: str, path: str) -> set[tuple[str, str | None]]:
    """(module, name) for every `from module import name` of `source` (the file at `path`), and
    (module, None) for an imported module (`import pkg.comm`, `from pkg import comm`)."""
    package = module_name(path).split(".")[:-1]
    found: set[tuple[str, str | None]] = set()
    for match in _IMPORT.finditer(source):
        if match["modules"] is not None:
            found.update((_dotted(part), None) for part in match["modules"].split(","))
            continue
        base = match["source"]
        dots = len(base) - len(base.lstrip("."))
        if dots:
            parent = package[: len(package) - dots + 1] if dots <= len(package) + 1 else []
            base = ".".join([*parent, base.lstrip(".")]).strip(".")
        names = re.sub(r"#[^\n]*", "", match["grouped"]) if match["grouped"] is not None else match["names"]
        for name in filter(None, map(_dotted, names.split(","))):
            found.update({(base, name), (f"{base}.{name}".strip("."), None)})
    return {(module, name) for module, name in found if module}


def imports_any(source: str, path: str, modules: Mapping[str, frozenset[str]]) -> bool:
    """Whether `source` may import from one of `modules` (dotted names of linted files, each
    with its `stream_definitions`) a name of those. Not torch's own modules: what torch's stream
    API does is the API table's (lint/analysis/api.py), linting torch itself included."""
    if not modules:
        return False
    dotted = {f".{module}": names for module, names in modules.items()}
    for imported, name in imported_names(source, path):
        if name is None or imported == "torch" or imported.startswith("torch."):
            continue  # a module object (`comm.Comm()` is not followed), or torch's own API: the table's
        if any(module.endswith(f".{imported}") and name in names for module, names in dotted.items()):
            return True
    return False


def _dotted(part: str) -> str:
    """`pkg.comm as c` -> `pkg.comm`."""
    return part.split(" as ")[0].strip()
