"""`csan-lint --replay TRACE`: analyse a recorded trace offline with the same engine."""

from __future__ import annotations

import json
import sys

from csan_lint.runtime.chrome import ChromeTrace
from csan_lint.runtime.report import render_text, to_json
from csan_lint.runtime.trace import TraceError, replay
from csan_lint.runtime.tracker import Tracker

OUTPUT_FORMATS = ("text", "json", "chrome")
JSON_VERSION = 1


def main(trace_path: str, output_format: str = "text", quiet: bool = False) -> int:
    """Print the trace's reports (stdout; `chrome`: the run as a Chrome/Perfetto trace, see
    chrome.py) and, unless `quiet`, a summary (stderr). Exit 1 if any error was found, 0 if none
    (warnings alone do not fail), 2 if the trace cannot be read or is malformed."""
    if output_format not in OUTPUT_FORMATS:
        print(
            f"csan-lint: unknown output format {output_format!r} (choose from {', '.join(OUTPUT_FORMATS)})",
            file=sys.stderr,
        )
        return 2
    tracker = Tracker()
    picture = ChromeTrace(tracker, title=f"csan-lint: {trace_path}")
    try:
        replay(trace_path, picture if output_format == "chrome" else tracker)
    except TraceError as error:
        print(f"csan-lint: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"csan-lint: {trace_path}: cannot read the trace: {error.strerror or error}", file=sys.stderr)
        return 2
    reports = tracker.errors
    errors = sum(r.severity == "error" for r in reports)
    warnings = len(reports) - errors
    if output_format == "chrome":
        print(json.dumps(picture.document(), separators=(",", ":")))
    elif output_format == "json":
        document = {
            "version": JSON_VERSION,
            "trace": trace_path,
            "reports": [to_json(r) for r in reports],
            "summary": {"errors": errors, "warnings": warnings},
        }
        print(json.dumps(document, indent=2))
    else:
        for report in reports:
            print(render_text(report))
            print()
    if not quiet:
        summary = (
            f"Found {errors} error(s) and {warnings} warning(s) in {trace_path}."
            if reports
            else f"No errors in {trace_path}."
        )
        print(summary, file=sys.stderr)
    return 1 if errors else 0
