"""Files the text prefilter rejected that import a linted module with stream code.

Such a file names no stream API itself, yet a call into that module (`comm.send(y)`, with
`comm = Comm()` from `pkg.comm`) may run the caller's tensors on another stream: the engine
must see it, with the package index beside it. The test is a cost gate on text, a superset of
what the engine follows: every dotted name an import statement spells (`from pkg import comm`
spells `pkg` and `pkg.comm`; a relative import is resolved against the file's own package),
matched against the stream modules' names by suffix, as the package index resolves imports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from csan_lint.lint.summaries import module_name

_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<source>\.*[\w.]*)[ \t]+import[ \t]+(?:\((?P<grouped>[^)]*)\)|(?P<names>[\w., \t]*))"
    r"|import[ \t]+(?P<modules>[\w., \t]+))",
    re.MULTILINE,
)


def imported_names(source: str, path: str) -> set[str]:
    """Every module an import statement of `source` (the file at `path`) may name."""
    package = module_name(path).split(".")[:-1]
    found: set[str] = set()
    for match in _IMPORT.finditer(source):
        if match["modules"] is not None:
            found.update(_dotted(part) for part in match["modules"].split(","))
            continue
        base = match["source"]
        dots = len(base) - len(base.lstrip("."))
        if dots:
            parent = package[: len(package) - dots + 1] if dots <= len(package) + 1 else []
            base = ".".join([*parent, base.lstrip(".")]).strip(".")
        found.add(base)
        names = re.sub(r"#[^\n]*", "", match["grouped"]) if match["grouped"] is not None else match["names"]
        found.update(f"{base}.{_dotted(name)}".strip(".") for name in names.split(","))
    return {name for name in found if name}


def imports_any(source: str, path: str, modules: Iterable[str]) -> bool:
    """Whether `source` may import one of `modules` (dotted names of linted files)."""
    wanted = frozenset(modules)
    if not wanted:
        return False
    dotted = [f".{module}" for module in wanted]
    return any(module.endswith(f".{name}") for name in imported_names(source, path) for module in dotted)


def _dotted(part: str) -> str:
    """`pkg.comm as c` -> `pkg.comm`."""
    return part.split(" as ")[0].strip()
