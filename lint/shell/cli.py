"""`csan-lint`: `check [PATHS]` (what a bare `csan-lint PATHS` runs), `rule CODE`, `reveal FILE:LINE`,
`server`.

The command line over `load_config` + `lint_paths` + the reporters. Exit status: 0 clean, 1
findings, 2 usage, config or internal error (a file the tool could not check is an error too: the
run cannot claim a result). `--replay`, `--confirm` and `server` hand off to modules imported only
then (the runtime needs torch, the server pygls; the static path imports neither).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from csan_lint import __version__
from csan_lint.lint.shell.confirm_options import with_confirm_options
from csan_lint.lint.shell.tests_option import AmbiguousTestPath, expand_tests

if TYPE_CHECKING:
    from csan_lint.lint.shell.config import Config
    from csan_lint.lint.shell.runner import LintResult
    from csan_lint.lint.shell.staging import StagedLint
    from csan_lint.runtime.warm_python import WarmPython

# The rest of the linter is imported where a command needs it: `--version`, `--help` and
# `rule` stay cheap, and a pre-commit run on one file loads only what linting it takes.

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
STATIC_FORMATS = ("text", "json", "sarif", "github")
CONFIRM_FORMATS = ("text", "json", "junit", "sarif")
REPLAY_FORMATS = ("text", "json", "chrome")
REPLAY_OPTIONS = frozenset({"replay", "output_format", "exit_zero", "quiet", "paths"})
"""What `--replay TRACE` reads; any other option or a path given with it is an error."""
PROGRESS_MIN_FILES = 50
"""A bar for fewer files to parse would flash by; below this, none is drawn."""


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(EXIT_ERROR)


def _split(values: Sequence[str]) -> list[str] | None:
    """`--select CSL1,CSL2 --select CSL3` -> [CSL1, CSL2, CSL3]; None when the flag is absent
    (`--select ""` is an empty list, which load_config refuses)."""
    if not values:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _explain(code: str) -> str:
    from csan_lint.lint.registry import all_rules
    from csan_lint.lint.shell.output import explain_code

    text = explain_code(code)
    if text is None:
        known = ", ".join(rule.code for rule in all_rules())
        _fail(f"unknown rule `{code}` (rules: {known}; also CSL001-CSL005 and CSL901-CSL909)")
    return text


def _replay(trace: str, output_format: str, exit_zero: bool, quiet: bool) -> int:
    from csan_lint.runtime.replay import main as replay_main  # the runtime loads only when asked

    status = replay_main(trace, output_format, quiet)
    return EXIT_CLEAN if status == EXIT_FINDINGS and exit_zero else status


def _confirm(
    staged: StagedLint, paths: list[str], config: Any, options: dict[str, Any], warm: WarmPython | None
) -> int:
    """`--confirm` on the static pass so far: the analyses of the files that hold stream code
    and the syntax checks of the files the prefilter rejected go on in the background while the
    tests start, and are waited for before the verdicts; the tests run in `warm`, the
    interpreter started (importing torch) before the lint."""
    from csan_lint.runtime.confirm import main as confirm_main  # checks its own requirements (torch)
    from csan_lint.runtime.confirm_select import LaterAnalyses

    with staged:
        first = staged.first
        if (staged.checking or staged.analysing) and not options["quiet"]:
            click.echo(
                f"Analysing {len(staged.analysing)} file(s) with stream code and checking the syntax of "
                f"{staged.checking} other file(s) in the background.",
                err=True,
            )
        later = None
        if staged.analysing:
            later = LaterAnalyses(staged.analysing, lambda: (staged.result().findings, staged.result().stream_code))
        return confirm_main(
            first.findings,
            paths,
            config,
            options,
            first.stream_code,
            all_findings=lambda: staged.result().findings,
            warm=warm,
            later=later,
        )


def _diff(result: LintResult, config: Any, unsafe: bool, quiet: bool) -> int:
    """`--diff`: the fixes as a patch on stdout; exit 1 when there is one, 2 on an unreadable file."""
    from csan_lint.lint.shell.fix import fix_paths  # libcst: only when fixing
    from csan_lint.lint.shell.output import format_text
    from csan_lint.lint.shell.runner import LintResult

    report = fix_paths(result, config, write=False, unsafe=unsafe)
    click.echo(report.diff, nl=False)
    click.echo(format_text(LintResult(report.errors, 0, 0), quiet=True), nl=False, err=True)
    if not quiet:
        click.echo(f"Would fix {report.fixed} finding{'' if report.fixed == 1 else 's'}.", err=True)
    return EXIT_ERROR if report.errors else EXIT_FINDINGS if report.diff else EXIT_CLEAN


def _fix(result: LintResult, targets: list[str], config: Any, unsafe: bool, no_cache: bool) -> tuple[LintResult, int]:
    """`--fix`: write the fixes, then lint again for what is left (files it could not write count)."""
    from csan_lint.lint.shell.fix import fix_paths
    from csan_lint.lint.shell.runner import lint_paths

    report = fix_paths(result, config, write=True, unsafe=unsafe)
    after = lint_paths(targets, config, cache=not no_cache)
    findings = sorted([*after.findings, *report.errors], key=lambda f: (f.path, f.line, f.column, f.code))
    return replace(after, findings=findings), report.fixed


def _fixed_listing(before: LintResult, after: LintResult) -> str:
    """`--fix --show-fixes`: what was fixed, per file and code (line numbers move as lines go in)."""
    gone = Counter((f.path, f.code) for f in before.findings) - Counter((f.path, f.code) for f in after.findings)
    return "".join(f"  {path}: {count} x {code}\n" for (path, code), count in sorted(gone.items()))


class _ProgressBar:
    """click's bar on stderr for the engine's work, opened once there is enough of it, and only
    on a terminal (elsewhere click would still print its label: noise in a CI log or a pipe)."""

    def __init__(self) -> None:
        self._bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            if total < PROGRESS_MIN_FILES or not sys.stderr.isatty():
                return
            self._bar = click.progressbar(length=total, label="Linting", file=sys.stderr)
            self._bar.__enter__()
        self._bar.update(done - self._bar.pos)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


def _given(context: click.Context, names: Sequence[str]) -> list[str]:
    """The options among `names` that the command line set (not their defaults)."""
    from click.core import ParameterSource

    return [name for name in names if context.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]


def _lint_stdin(stdin_filename: str | None, config: Config, force_exclude: bool) -> LintResult:
    """stdin, linted as the file `--stdin-filename` names (its config, ignores, suppressions)."""
    from csan_lint.lint.shell.files import Excluder, is_excluded
    from csan_lint.lint.shell.runner import LintResult, lint_text

    source = sys.stdin.read()
    path = Path(stdin_filename or "-").absolute()
    if (
        force_exclude
        and stdin_filename
        and is_excluded(path, Excluder(config.root, config.exclude, config.respect_gitignore))
    ):
        return LintResult([], 0, 0)
    return lint_text(source, path, config)


class _CheckByDefault(click.Group):
    """ruff's spelling: `csan-lint check PATHS`, `csan-lint rule CODE`, `csan-lint server`. A first
    argument that names no subcommand belongs to `check`, so `csan-lint PATHS`, `csan-lint
    --explain CODE` and `csan-lint -` work as they always did."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["check", *args]
        if args[0] == "check":
            try:
                args = ["check", *expand_tests(args[1:])]
            except AmbiguousTestPath as error:
                _fail(str(error))
        return super().parse_args(ctx, args)


@click.group(
    cls=_CheckByDefault,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="`csan-lint PATHS` is `csan-lint check PATHS`. Settings: [tool.csan-lint] in pyproject.toml.",
)
def main() -> None:
    """Find CUDA stream synchronization bugs in PyTorch code."""


@main.command(
    epilog="Exit status: 0 no findings, 1 findings, 2 usage, config or internal error "
    "(or a file that could not be checked). Settings: [tool.csan-lint] in pyproject.toml.",
)
@click.argument("paths", nargs=-1, type=click.Path(readable=False))  # unreadable: a located CSL003
@click.option(
    "--format",
    "--output-format",
    "output_format",
    type=click.Choice(sorted({*STATIC_FORMATS, *CONFIRM_FORMATS, *REPLAY_FORMATS})),
    default="text",
    show_default=True,
    help="Output format: text, json (docs/json-format.md), sarif (SARIF 2.1.0), github (workflow "
    "annotations); with --confirm: text, json, junit or sarif (docs/ci.md); with --replay: text, json or chrome "
    "(a Chrome/Perfetto trace).",
)
@click.option(
    "--select",
    multiple=True,
    metavar="CODES",
    help="Only these rules (codes, code prefixes, names or ALL; comma-separated).",
)
@click.option(
    "--extend-select",
    multiple=True,
    metavar="CODES",
    help="Also these rules, on top of --select or the default (e.g. CSL004: unused noqa comments).",
)
@click.option(
    "--ignore",
    multiple=True,
    metavar="CODES",
    help="Also skip these rules (codes, code prefixes or names; comma-separated).",
)
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Read settings from this TOML file.")
@click.option(
    "--assume",
    multiple=True,
    metavar="NAME=on|off",
    help="Switch one of the analysis' assumptions on or off (docs/analysis.md lists them).",
)
@click.option(
    "--facts",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Settle the analysis' assumptions with facts saved by a sanitized run (--save-facts; docs/analysis.md).",
)
@click.option(
    "--force-exclude",
    is_flag=True,
    help="Apply `exclude` and .gitignore to paths named on the command line too (for pre-commit).",
)
@click.option("--stdin-filename", metavar="PATH", help="Read the source from stdin, linted as this file.")
@click.option("--statistics", is_flag=True, help="Print a count per rule instead of each finding.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--list-rules", is_flag=True, help="List every rule (code, name, summary) and exit.")
@click.option("--explain", metavar="CODE", help="Explain a rule, with examples, and exit (as `csan-lint rule CODE`).")
@click.option("--replay", metavar="TRACE", type=click.Path(), help="Analyse a recorded runtime trace (JSON Lines).")
@click.option(
    "--confirm",
    is_flag=True,
    help="Run the tests that reach stream code under the runtime sanitizer: a verdict per finding, and every race.",
)
@click.option("-q", "--quiet", is_flag=True, help="No summary line.")
@click.option(
    "--no-cache",
    is_flag=True,
    help="Neither read nor write the per-file results cache (.csan_lint_cache/ at the project root).",
)
@click.option(
    "--fix",
    is_flag=True,
    help="Apply the safe fixes (docs/rules.md says which rules have them), then report what is left.",
)
@click.option(
    "--diff", is_flag=True, help="Print the fixes as a unified diff instead of writing them; exit 1 if there are any."
)
@click.option(
    "--unsafe-fixes",
    is_flag=True,
    help="With --fix or --diff: also apply fixes that add an import or spell torch through an alias.",
)
@click.option(
    "--show-fixes", is_flag=True, help="Mark the findings --fix would fix ([*]); with --fix, list what it fixed."
)
@click.option(
    "--exit-non-zero-on-fix", is_flag=True, help="With --fix: exit 1 when anything was fixed, even if nothing is left."
)
@click.version_option(__version__, "--version", prog_name="csan-lint")
@with_confirm_options
@click.pass_context
def check(
    context: click.Context,
    /,
    paths: tuple[str, ...],
    output_format: str,
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    config_file: str | None,
    assume: tuple[str, ...],
    facts: str | None,
    force_exclude: bool,
    stdin_filename: str | None,
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
    show_fixes: bool,
    exit_non_zero_on_fix: bool,
    **confirm_options: Any,
) -> None:
    """Find CUDA stream synchronization bugs in PATHS (files or directories; default: .; `-`: stdin)."""
    from csan_lint.lint.registry import all_rules
    from csan_lint.lint.shell.config import ConfigError, load_config
    from csan_lint.lint.shell.output import format_rule_list
    from csan_lint.lint.shell.runner import lint_in_stages

    if list_rules:
        click.echo(format_rule_list(all_rules()), nl=False)
        return
    if explain is not None:
        click.echo(_explain(explain), nl=False)
        return
    if replay is not None:
        others = [name for name in context.params if name not in REPLAY_OPTIONS]
        ignored = ["PATHS"] * bool(paths) + [f"--{name.replace('_', '-')}" for name in _given(context, others)]
        if ignored:
            _fail(f"--replay reads only the trace, --format, --exit-zero and -q; remove {', '.join(ignored)}")
        raise SystemExit(_replay(replay, output_format, exit_zero, quiet))
    if confirm and (fix or diff):
        _fail("--fix and --diff change files; run them without --confirm")
    formats = CONFIRM_FORMATS if confirm else STATIC_FORMATS
    if output_format not in (*STATIC_FORMATS, *CONFIRM_FORMATS):
        _fail(f"--format {output_format} is for --replay TRACE")
    if output_format not in formats:
        _fail(
            f"--format {output_format} is for {'the static check' if confirm else '--confirm'}; "
            f"{'--confirm' if confirm else 'the static check'} prints {', '.join(formats)}"
        )
    from_stdin = paths == ("-",) or (stdin_filename is not None and not paths)
    if "-" in paths and not from_stdin:
        _fail("`-` (stdin) cannot be mixed with other paths")
    if from_stdin and (confirm or fix or diff):
        _fail("stdin is linted only: --confirm, --fix and --diff need files")
    targets = [stdin_filename or "."] if from_stdin else list(paths) or ["."]
    try:
        switches = (_split(select), _split(ignore), _split(extend_select) or (), _split(assume) or ())
        config = load_config(targets, config_file, *switches, facts)
    except ConfigError as error:
        _fail(str(error))
    machine = output_format != "text" or quiet
    progress = None if machine or from_stdin else _ProgressBar()
    warm = None
    if confirm:  # its tests' interpreter imports torch while the static pass runs
        from csan_lint.runtime.warm_python import WarmPython

        warm = WarmPython(sys.executable)
    if confirm and not quiet:  # the first of --confirm's phases: each says what it does, in CI logs too
        click.echo(f"Linting {', '.join(targets)}...", err=True)
    try:
        if from_stdin:
            result = _lint_stdin(stdin_filename, config, force_exclude)
        else:
            staged = lint_in_stages(
                targets,
                config,
                cache=not no_cache,
                progress=progress,
                force_exclude=force_exclude,
                stream_code=confirm,
                checks_later=confirm,
            )
            result = staged.first if confirm else staged.result()
    except Exception as error:  # a bug outside any one file: say so plainly, not as a traceback
        _fail(f"internal error: {type(error).__name__}: {error}")
    finally:
        if progress is not None:
            progress.close()
    if result.files_checked == 0 and not result.findings and not from_stdin:
        click.echo("warning: No Python files found under the given path(s)", err=True)
    if confirm:
        options = {**confirm_options, "output_format": output_format, "quiet": quiet, "exit_zero": exit_zero}
        with warm or nullcontext():
            raise SystemExit(_confirm(staged, targets, config, options, warm))
    if diff:
        raise SystemExit(_diff(result, config, unsafe_fixes, quiet))
    fixed = None
    if fix:
        before = result
        result, fixed = _fix(result, targets, config, unsafe_fixes, no_cache)
        if show_fixes and fixed:
            click.echo(f"Fixed:\n{_fixed_listing(before, result)}", nl=False, err=True)
    _report(result, output_format, statistics, quiet, show_fixes and not fix, unsafe_fixes)
    if confirm_options.get("verbose") and config.facts is not None:
        click.echo(config.facts.summary(), err=True)
    if fixed is not None and not quiet:
        click.echo(f"Fixed {fixed} finding{'' if fixed == 1 else 's'} ({len(result.findings)} remaining).", err=True)
    if result.has_tool_errors:
        raise SystemExit(EXIT_ERROR)
    if exit_non_zero_on_fix and fixed:
        raise SystemExit(EXIT_FINDINGS)
    raise SystemExit(EXIT_FINDINGS if result.findings and not exit_zero else EXIT_CLEAN)


def _report(
    result: LintResult, output_format: str, statistics: bool, quiet: bool, show_fixes: bool, unsafe: bool
) -> None:
    """The findings on stdout in `output_format`; only that format's module is imported."""
    if output_format == "sarif":
        from csan_lint.lint.shell.sarif import format_sarif

        click.echo(format_sarif(result), nl=False)
        return
    from csan_lint.lint.shell.output import format_github, format_json, format_text

    if output_format == "json":
        click.echo(format_json(result), nl=False)
    elif output_format == "github":
        click.echo(format_github(result, quiet=quiet), nl=False)
    else:
        text = format_text(result, show_statistics=statistics, quiet=quiet, show_fixes=show_fixes, unsafe=unsafe)
        click.echo(text, nl=False)


@main.command()
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="Explain every rule.")
def rule(code: str | None, show_all: bool) -> None:
    """Explain a rule (a code in any case, or a name): what it flags, why, the fix, examples."""
    from csan_lint.lint.registry import all_rules

    if show_all:
        click.echo("\n".join(_explain(rule.code) for rule in all_rules()), nl=False)
    elif code is None:
        _fail("give a rule code (`csan-lint rule CSL101`) or --all")
    else:
        click.echo(_explain(code), nl=False)


@main.command(epilog="Exit status: 0 shown, 2 a missing file, a bad location or a line with no statement.")
@click.argument("location", metavar="FILE:LINE")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Read settings from this TOML file.")
@click.option(
    "--assume",
    multiple=True,
    metavar="NAME=on|off",
    help="Switch one of the analysis' assumptions on or off (docs/analysis.md lists them).",
)
def reveal(location: str, output_format: str, config_file: str | None, assume: tuple[str, ...]) -> None:
    """Show what the static analysis knows before the statement at FILE:LINE: each tracked value's last
    writes, reads and what they are ordered before, the streams, the current stream, the host's pending
    copies (like mypy's reveal_type; docs/reveal.md)."""
    import json

    from csan_lint.lint.diagnostics import decode_source, read_bytes
    from csan_lint.lint.shell.config import ConfigError, load_config
    from csan_lint.lint.shell.reveal import RevealError, format_text
    from csan_lint.lint.shell.reveal import reveal as reveal_at

    path, _, line = location.rpartition(":")
    if not path or not line.isdigit():
        _fail(f"`{location}`: give a file and a line, as in `csan-lint reveal src/model.py:12`")
    data = read_bytes(Path(path), path)
    source = decode_source(data, path) if isinstance(data, bytes) else data
    if not isinstance(source, str):
        _fail(f"{path}: {source.message}")
    try:
        config = load_config([path], config_file, assume=_split(assume) or ())
        result = reveal_at(source, path, int(line), config.spellings, config.assumptions)
    except (ConfigError, RevealError) as error:
        _fail(str(error))
    except Exception as error:  # a bug, not the input: say so plainly, not as a traceback
        _fail(f"internal error: {type(error).__name__}: {error}")
    click.echo(json.dumps(result, indent=2) + "\n" if output_format == "json" else format_text(result), nl=False)


@main.command()
def server() -> None:
    """Run the language server (LSP, stdio) for editors: docs/editors.md."""
    try:
        from csan_lint.lint.shell.server import serve
    except ImportError as error:
        _fail(f"the server needs pygls ({error}); pip install 'csan-lint[lsp]'")
    serve()
