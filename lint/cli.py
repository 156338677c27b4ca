"""`csan-lint [PATHS]...`: the command line over `load_config` + `lint_paths` + the reporters.

Exit status: 0 clean, 1 findings, 2 usage, config or internal error (a file the tool could not
check is an error too: the run cannot claim a result). `--replay` and `--confirm` hand off to the
runtime, imported only then (it needs torch; the static path never imports it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NoReturn

import click

from csan_lint import __version__
from csan_lint.lint.config import ConfigError, load_config
from csan_lint.lint.output import format_explanation, format_github, format_json, format_rule_list, format_text
from csan_lint.lint.registry import all_rules, rule_by_code
from csan_lint.lint.runner import LintResult, lint_paths
from csan_lint.lint.sarif import format_sarif

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
STATIC_FORMATS = ("text", "json", "sarif", "github")
CONFIRM_FORMATS = ("text", "json", "junit")

CONFIRM_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    # `--confirm`'s own options (`--tests`, `--device`, `--timeout`, `--fail-on`, `-v`, `-n`) go here,
    # as click.option(...) decorators. Their values reach csan_lint.runtime.confirm.main as the
    # `options` dict, keyed by parameter name; the static path ignores them.
    # Defaults are None so that `[tool.csan-lint.confirm]` applies unless the flag is given.
    click.option("--tests", multiple=True, type=click.Path(), metavar="PATH", help="With --confirm: test files or directories to choose from (default: pytest's testpaths, else tests/)."),
    click.option("--device", type=click.Choice(["auto", "cuda", "emulated"]), default=None, help="With --confirm: where the tests run (default auto: CUDA if available, else the emulated device)."),
    click.option("--timeout", type=float, default=None, metavar="SECONDS", help="With --confirm: a test running longer is killed and its findings get `error` (default 60)."),
    click.option("--fail-on", "fail_on", default=None, metavar="VERDICTS", help="With --confirm: also exit 1 on these verdicts (comma-separated: other-race, unexercised, error, dismissed)."),
    click.option("-v", "--verbose", is_flag=True, help="With --confirm: print the sanitizer's report under each confirmed finding."),
    click.option("--all-tests", is_flag=True, default=None, help="With --confirm: run every test file, not only those that import stream code."),
    click.option("-n", "--workers", type=int, default=None, metavar="N", help="With --confirm: run the tests in N pytest-xdist worker processes (default 0: one process)."),
]


def _with_confirm_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(CONFIRM_OPTIONS):
        command = option(command)
    return command


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(EXIT_ERROR)


def _split(values: Sequence[str]) -> list[str] | None:
    """`--select CSL1,CSL2 --select CSL3` -> [CSL1, CSL2, CSL3]; None when the flag is absent."""
    if not values:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _explain(code: str) -> str:
    rule = rule_by_code(code)
    if rule is None:
        known = ", ".join(rule.code for rule in all_rules())
        _fail(f"--explain: unknown rule `{code}` (known: {known})")
    return format_explanation(rule)


def _replay(trace: str, output_format: str) -> int:
    from csan_lint.runtime.replay import main as replay_main  # the runtime loads only when asked

    return replay_main(trace, output_format)


def _confirm(result: LintResult, paths: list[str], config: Any, options: dict[str, Any]) -> int:
    from csan_lint.runtime.confirm import main as confirm_main  # checks its own requirements (torch)

    return confirm_main(result.findings, paths, config, options)


def _diff(result: LintResult, config: Any, unsafe: bool, quiet: bool) -> int:
    """`--diff`: the fixes as a patch on stdout; exit 1 when there is one, 2 on an unreadable file."""
    from csan_lint.lint.fix import fix_paths  # libcst: only when fixing

    report = fix_paths(result, config, write=False, unsafe=unsafe)
    click.echo(report.diff, nl=False)
    click.echo(format_text(LintResult(report.errors, 0, 0), quiet=True), nl=False, err=True)
    if not quiet:
        click.echo(f"Would fix {report.fixed} finding{'' if report.fixed == 1 else 's'}.", err=True)
    return EXIT_ERROR if report.errors else EXIT_FINDINGS if report.diff else EXIT_CLEAN


def _fix(result: LintResult, targets: list[str], config: Any, unsafe: bool, no_cache: bool) -> tuple[LintResult, int]:
    """`--fix`: write the fixes, then lint again for what is left (files it could not write count)."""
    from csan_lint.lint.fix import fix_paths

    report = fix_paths(result, config, write=True, unsafe=unsafe)
    after = lint_paths(targets, config, cache=not no_cache)
    findings = sorted([*after.findings, *report.errors], key=lambda f: (f.path, f.line, f.column, f.code))
    return replace(after, findings=findings), report.fixed


@click.command(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Exit status: 0 no findings, 1 findings, 2 usage, config or internal error "
    "(or a file that could not be checked). Settings: [tool.csan-lint] in pyproject.toml.",
)
@click.argument("paths", nargs=-1, type=click.Path())
@click.option(
    "--format", "output_format", type=click.Choice(sorted({*STATIC_FORMATS, *CONFIRM_FORMATS})), default="text",
    show_default=True,
    help="Output format: text, json (docs/json-format.md), sarif (SARIF 2.1.0), github (workflow "
    "annotations); with --confirm: text, json or junit (docs/ci.md).",
)
@click.option(
    "--select", multiple=True, metavar="CODES",
    help="Only these rules (codes, code prefixes or names; comma-separated).",
)
@click.option(
    "--ignore", multiple=True, metavar="CODES",
    help="Also skip these rules (codes, code prefixes or names; comma-separated).",
)
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Read settings from this TOML file.")
@click.option("--statistics", is_flag=True, help="Print a count per rule instead of each finding.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--list-rules", is_flag=True, help="List every rule (code, name, summary) and exit.")
@click.option("--explain", metavar="CODE", help="Explain a rule, with examples, and exit.")
@click.option("--replay", metavar="TRACE", type=click.Path(), help="Analyse a recorded runtime trace (JSON Lines).")
@click.option("--confirm", is_flag=True, help="Run the tests that reach stream code under the runtime sanitizer: a verdict per finding, and every race.")
@click.option("-q", "--quiet", is_flag=True, help="No summary line.")
@click.option(
    "--no-cache", is_flag=True,
    help="Neither read nor write the per-file results cache (.csan_lint_cache/ at the project root).",
)
@click.option("--fix", is_flag=True, help="Apply the safe fixes (docs/rules.md says which rules have them), then report what is left.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff instead of writing them; exit 1 if there are any.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff: also apply fixes that add an import or spell torch through an alias.")
@click.version_option(__version__, "--version", prog_name="csan-lint")
@_with_confirm_options
def main(
    paths: tuple[str, ...],
    output_format: str,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    config_file: str | None,
    statistics: bool,
    exit_zero: bool,
    list_rules: bool,
    explain: str | None,
    replay: str | None,
    confirm: bool,
    quiet: bool,
    no_cache: bool,
    fix: bool,
    diff: bool,
    unsafe_fixes: bool,
    **confirm_options: Any,
) -> None:
    """Find CUDA stream synchronization bugs in PATHS (files or directories; default: .)."""
    if list_rules:
        click.echo(format_rule_list(all_rules()), nl=False)
        return
    if explain is not None:
        click.echo(_explain(explain), nl=False)
        return
    if replay is not None:
        raise SystemExit(_replay(replay, output_format))
    if confirm and (fix or diff):
        _fail("--fix and --diff change files; run them without --confirm")
    formats = CONFIRM_FORMATS if confirm else STATIC_FORMATS
    if output_format not in formats:
        _fail(
            f"--format {output_format} is for {'the static check' if confirm else '--confirm'}; "
            f"{'--confirm' if confirm else 'the static check'} prints {', '.join(formats)}"
        )
    targets = list(paths) or ["."]
    try:
        config = load_config(targets, config_file, _split(select), _split(ignore))
    except ConfigError as error:
        _fail(str(error))
    try:
        result = lint_paths(targets, config, cache=not no_cache)
    except Exception as error:  # a bug outside any one file: say so plainly, not as a traceback
        _fail(f"internal error: {type(error).__name__}: {error}")
    if confirm:
        options = {**confirm_options, "output_format": output_format, "quiet": quiet, "exit_zero": exit_zero}
        raise SystemExit(_confirm(result, targets, config, options))
    if diff:
        raise SystemExit(_diff(result, config, unsafe_fixes, quiet))
    fixed = None
    if fix:
        result, fixed = _fix(result, targets, config, unsafe_fixes, no_cache)
    if output_format == "json":
        click.echo(format_json(result), nl=False)
    elif output_format == "sarif":
        click.echo(format_sarif(result), nl=False)
    elif output_format == "github":
        click.echo(format_github(result, quiet=quiet), nl=False)
    else:
        click.echo(format_text(result, show_statistics=statistics, quiet=quiet), nl=False)
    if fixed is not None and not quiet:
        click.echo(f"Fixed {fixed} finding{'' if fixed == 1 else 's'} ({len(result.findings)} remaining).", err=True)
    if result.has_tool_errors:
        raise SystemExit(EXIT_ERROR)
    raise SystemExit(EXIT_FINDINGS if result.findings and not exit_zero else EXIT_CLEAN)
