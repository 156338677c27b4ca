"""CSL001, a file that does not parse, told once: CPython's position and message.

Every file gets this check, not only the ones the prefilter passes to libcst: a broken file
that uses no stream API was otherwise reported clean. CPython's parser (no bytecode, no
libcst) costs about a millisecond per thousand lines, and nothing for a cached file.
"""

from __future__ import annotations

import ast
import re
import symtable

from csan_lint.lint.model import Finding, Span

SYNTAX_ERROR_CODE = "CSL001"
"""Not a rule: the diagnostic for a file that does not parse. Always on."""
_EMBEDDED_POSITION = re.compile(r"\berror at \d+:\d+: ")


def python_syntax_error(source: str, path: str) -> Finding | None:
    """The CSL001 finding for `source`, or None when CPython parses it.

    CPython's symbol table pass parses the text without building Python's AST objects (a third
    less CPU than an `ast` parse); it also rejects a few texts that do parse (a module-level
    `nonlocal`), so whatever it rejects is parsed again the usual way, for the parser's own
    verdict and message."""
    try:
        symtable.symtable(source, path, "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _parse_error(source, path)
    return None


def _parse_error(source: str, path: str) -> Finding | None:
    try:
        compile(source, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return syntax_error(path, error.lineno or 1, max(error.offset or 1, 1), error.msg)
    except ValueError as error:  # NUL bytes: not Python source at all
        return syntax_error(path, 1, 1, str(error))
    except (RecursionError, MemoryError):  # nesting that CPython cannot compile either
        return syntax_error(path, 1, 1, "too deeply nested for Python's parser")
    return None


def syntax_error(path: str, line: int, column: int, message: str) -> Finding:
    """One position: a parser message that carries its own (libcst's `error at 6:8: ...`, often
    a line off) has it dropped, so the finding's position is the only one shown."""
    text = f"syntax error: {_EMBEDDED_POSITION.sub('', message)}"
    return Finding(path, line, column, SYNTAX_ERROR_CODE, text, line, column, Span(line, line))
