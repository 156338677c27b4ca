"""docs/analysis.md, generated from the table of assumptions (`COMMAND` says how).

Each entry's example is linted with the assumption on and off, so the page shows what it changes
as the code does it, not as someone remembered it.
"""

from __future__ import annotations

import sys

from csan_lint.lint.analysis.assumptions import ASSUMPTIONS, Assumption, Assumptions
from csan_lint.lint.engine import lint_source
from csan_lint.lint.model import Finding

COMMAND = "python -m csan_lint.lint.shell.assumption_docs > docs/analysis.md"
_EXAMPLE = "example.py"
_INTRODUCTION = """\
Where the code does not show what the analysis needs (who produced a value, which stream a
function runs on) the analysis assumes, and each assumption is one entry below. A finding names
the assumptions it rests on (`assumptions` in `--format json`). Switch one for a run with
`--assume NAME=on|off`, or for a project:

```toml
[tool.csan-lint.assumptions]
attributes-written-by-caller = true
stale-stream-capture = false
```

*Evidence* entries take a shape of code as evidence of a second stream the function does not
show (a swap of `p.data`, a container handed over). Defaults are measured on code we did not write:
`python benchmarks/realworld/assumptions.py` flips each one on the corpus and whole
repositories and prints what it finds and costs (benchmarks/realworld/README.md).

**Facts from runs** settle an assumption for one function where a sanitized test run saw what it
takes for granted (`csan-lint --facts facts.json`, or `facts = "facts.json"` in
`[tool.csan-lint]`; the file comes from `pytest --csan --csan-facts facts.json` or `csan-lint
--confirm --save-facts facts.json`, docs/sanitizer.md). Today: a parameter, or a parameter's
`.grad`, a run saw come written on the device by the caller (on the stream the call was entered
on, or another) is taken as the caller's device work, as `annotated-parameters-written-by-caller`,
`unannotated-parameters-written-by-caller` or `attributes-written-by-caller` would take it,
whether they are on or off; the finding
then lists the fact (`observed` in `--format json`, and the message: "observed in
tests/test_comm.py::test_send: ...") instead of the assumption. And a function the runs saw
called, every call entered on the default stream, has the default stream for its caller's:
its `default_stream().wait_stream(side)` joins the caller, and `default-stream-join` reports
nothing there (one call seen on a side stream keeps the finding). A function a run saw copy
to the host without blocking has its `non_blocking=` flags that the code does not tell taken as
`True`, as `untold-non-blocking-flags-may-be-true` would take them, whether it is on or off;
and a parameter a run saw handed pinned host memory is pinned there, so that a non-blocking
copy into it is a download the host must wait for before reading it (other devices settle
nothing yet). A fact about a function whose text changed since the run no longer matches its
hash and is ignored (`-v` counts them)."""


def render() -> str:
    rows = ["| assumption | default | rules | kind |", "| --- | --- | --- | --- |"]
    for entry in ASSUMPTIONS:
        kind = "evidence" if entry.evidence else "producer / stream"
        default = "on" if entry.default else "off"
        rows.append(f"| [`{entry.name}`](#{entry.name}) | {default} | {', '.join(entry.rules)} | {kind} |")
    parts = [
        "# What the analysis assumes",
        f"<!-- Generated from lint/analysis/assumptions.py by `{COMMAND}`; do not edit by hand. -->",
        _INTRODUCTION,
        "\n".join(rows),
        *map(_section, ASSUMPTIONS),
    ]
    return "\n\n".join(parts) + "\n"


def _section(entry: Assumption) -> str:
    on = _describe(_findings(entry, True))
    off = _describe(_findings(entry, False))
    return "\n\n".join(
        [
            f"## {entry.name}",
            entry.summary,
            entry.doc,
            f"Default: **{'on' if entry.default else 'off'}**.",
            f"```python\n{entry.example}```",
            f"On: {on}. Off: {off}.",
        ]
    )


def _findings(entry: Assumption, on: bool) -> list[Finding]:
    switched = Assumptions.from_switches([(entry.name, on)])
    return lint_source(entry.example, _EXAMPLE, assumptions=switched)


def _describe(findings: list[Finding]) -> str:
    if not findings:
        return "no finding"
    return "; ".join(f"{finding.code} at line {finding.line}" for finding in findings)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
