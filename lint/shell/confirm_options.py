"""The options of `csan-lint --confirm` (and `--save-facts`), declared for the `check` command
(lint/shell/cli.py): only click here, so the static path pays nothing for them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

CONFIRM_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    # `--confirm`'s own options (`--tests`, `--device`, `--timeout`, `--fail-on`, `-v`, `-n`) go here,
    # as click.option(...) decorators. Their values reach csan_lint.runtime.confirm.main as the
    # `options` dict, keyed by parameter name; the static path ignores them.
    # Defaults are None so that `[tool.csan-lint.confirm]` applies unless the flag is given.
    click.option(
        "--tests",
        multiple=True,
        type=click.Path(),
        metavar="PATH",
        help="With --confirm: test files, directories or node ids to choose from (default: pytest's testpaths, "
        "else tests/); several may follow one --tests while they name tests (`--tests tests/a.py tests/b.py`).",
    ),
    click.option(
        "--device",
        type=click.Choice(["auto", "cuda", "emulated"]),
        default=None,
        help="With --confirm: where the tests run (default auto: CUDA if available, else the emulated device).",
    ),
    click.option(
        "--devices",
        type=int,
        default=None,
        metavar="N",
        help="With --confirm: how many devices the emulated machine has (default 1): the tests see cuda:0 to "
        "cuda:N-1 (pytest's --csan-devices).",
    ),
    click.option(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="With --confirm: a test running longer is killed and its findings get `error` (default 60).",
    ),
    click.option(
        "--fail-on",
        "fail_on",
        default=None,
        metavar="VERDICTS",
        help=(
            "With --confirm: also exit 1 on these verdicts "
            "(comma-separated: other-race, unexercised, error, dismissed)."
        ),
    ),
    click.option(
        "-v",
        "--verbose",
        is_flag=True,
        help="With --confirm: print the sanitizer's report under each confirmed finding; else how many --facts hold.",
    ),
    click.option(
        "--all-tests",
        is_flag=True,
        default=None,
        help="With --confirm: run every test file, not only those that import stream code.",
    ),
    click.option(
        "-k",
        "keyword",
        default=None,
        metavar="EXPRESSION",
        help="With --confirm: run only the selected tests that match this pytest -k expression.",
    ),
    click.option(
        "--baseline",
        type=click.Path(dir_okay=False),
        default=None,
        metavar="FILE",
        help="With --confirm: show only the races that FILE (an earlier --confirm --format json report) does not have.",
    ),
    click.option(
        "-n",
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="With --confirm: run the tests in N pytest-xdist worker processes (default 0: one process).",
    ),
    click.option(
        "--trace-out",
        "trace_out",
        type=click.Path(dir_okay=False),
        default=None,
        metavar="FILE",
        help="With --confirm: draw the sanitized run as a Chrome/Perfetto trace (FILE.jsonl: the trace --replay "
        "reads).",
    ),
    click.option(
        "--save-facts",
        "save_facts",
        type=click.Path(dir_okay=False),
        default=None,
        metavar="FILE",
        help="With --confirm: save what the run observed of the code's functions, for --facts (docs/sanitizer.md).",
    ),
]


def with_confirm_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` with every option of `CONFIRM_OPTIONS`, in their order in `--help`."""
    for option in reversed(CONFIRM_OPTIONS):
        command = option(command)
    return command
