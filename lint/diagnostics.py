"""The diagnostics that are not rules (a file unread, undecodable, too costly, or our own
failure) and reading a file's text with a located diagnostic instead of an exception."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

from csan_lint.lint.model import Finding, Span
from csan_lint.lint.syntax import SYNTAX_ERROR_CODE

INTERNAL_ERROR_CODE = "CSL002"
"""The linter itself failed on a file: a bug of ours, reported there instead of a traceback."""
READ_ERROR_CODE = "CSL003"
"""A path that could not be read or analysed: missing, unreadable, not decodable text, or too
large to parse."""
BUDGET_CODE = "CSL005"
"""The analysis of a file ran out of its CPU-time budget (`ANALYSIS_BUDGET_S`): it went unchecked."""
DIAGNOSTIC_NAMES = {
    SYNTAX_ERROR_CODE: "syntax-error",
    INTERNAL_ERROR_CODE: "internal-error",
    READ_ERROR_CODE: "unreadable-file",
    BUDGET_CODE: "analysis-budget-exceeded",
}
"""Codes that are not rules: always reported, never suppressed."""
TOOL_ERROR_CODES = frozenset({INTERNAL_ERROR_CODE, READ_ERROR_CODE, BUDGET_CODE})
"""Diagnostics meaning a file went unchecked: the run cannot claim a result (exit 2)."""

MAX_PARSE_CHARS = 2 * 1024 * 1024
"""Larger sources that pass the prefilter are reported, not parsed: libcst needs about 0.7 GB
and 8 s of CPU per MB of stream-heavy code, so a 10 MB generated file would take minutes and
could exhaust memory. PyTorch's largest source file is 1.4 MB (and fails the prefilter)."""


def diagnostic(path: str, code: str, message: str, line: int = 1, column: int = 1) -> Finding:
    return Finding(path, line, column, code, message, line, column, Span(line, line))


def read_bytes(path: Path, shown: str) -> bytes | Finding:
    try:
        return path.read_bytes()
    except OSError as error:
        return diagnostic(shown, READ_ERROR_CODE, f"cannot read file: {error.strerror or error}")


def decode_source(data: bytes, shown: str) -> str | Finding:
    """The file's text, decoded as Python does (PEP 263 cookie, BOM, else UTF-8), or a located
    diagnostic saying why it cannot be decoded."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        return diagnostic(shown, READ_ERROR_CODE, f"cannot decode file: {error.msg}", error.lineno or 1)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        return diagnostic(shown, READ_ERROR_CODE, f"cannot decode file as {encoding}: {error.reason}", line, column)


def read_text(path: Path, shown: str) -> str | None:
    """The file's text; None if it cannot be read or decoded (the caller's later read says why)."""
    data = read_bytes(path, shown)
    source = decode_source(data, shown) if isinstance(data, bytes) else data
    return source if isinstance(source, str) else None


def too_large(chars: int) -> str:
    mib = 1024 * 1024
    return (
        f"file too large to analyse: {chars / mib:.1f} MiB of source, the limit is {MAX_PARSE_CHARS // mib} MiB "
        "(generated code? exclude it, or split the file)"
    )
