"""`csan-lint server`: a Language Server (LSP over stdio, built on pygls) for editors.

An editor sees what `csan-lint check` prints for the file: the buffer is linted with `lint_text`
as the file at its path, under the config of its project (the nearest pyproject.toml with a
`[tool.csan-lint]` table, as on the command line) and with its suppressions, on open, change and
save; calls into the rest of the project are followed through its index, kept in memory across
requests and updated one module at a time (lint/shell/workspace.py), and an edit re-checks the open
files that looked up the edited module. A finding with a safe fix offers it as a quick fix:
the edit `--fix` would make for it.
docs/editors.md shows how VS Code and Neovim start it.
"""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from csan_lint import __version__
from csan_lint.lint.model import Finding
from csan_lint.lint.registry import rule_by_code
from csan_lint.lint.shell.config import ConfigError, load_config
from csan_lint.lint.shell.fix import apply_edits, fixable
from csan_lint.lint.shell.output import rule_url
from csan_lint.lint.shell.runner import lint_text
from csan_lint.lint.shell.workspace import Workspace

SOURCE = "csan-lint"


def _character(line: str, column: int) -> int:
    """A 1-based code-point column as LSP's default position: UTF-16 code units from 0."""
    return len(line[: column - 1].encode("utf-16-le")) // 2


def to_diagnostic(finding: Finding, lines: list[str]) -> types.Diagnostic:
    """The finding as LSP shows it: its range, `help:` under the message, the rule's docs link."""

    def position(line: int, column: int) -> types.Position:
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        return types.Position(line=line - 1, character=_character(text, column))

    rule = rule_by_code(finding.code)
    return types.Diagnostic(
        range=types.Range(position(finding.line, finding.column), position(finding.end_line, finding.end_column)),
        message=finding.message + (f"\nhelp: {finding.fix}" if finding.fix else ""),
        severity=types.DiagnosticSeverity.Error,
        code=finding.code,
        code_description=types.CodeDescription(href=rule_url(rule)) if rule is not None else None,
        source=SOURCE,
    )


def document_path(uri: str) -> Path:
    return Path(to_fs_path(uri) or uri).absolute()


def lint_document(uri: str, source: str, workspace: Workspace | None = None) -> list[Finding]:
    """The findings `csan-lint check` would report for the file at `uri` holding `source`, with
    the rest of its project as `workspace` keeps it (lint/shell/workspace.py). Raises ConfigError for
    a broken project config."""
    path = document_path(uri)
    config = load_config([str(path)])
    if workspace is None:
        return lint_text(source, path, config).findings
    return workspace.lint(path, source, config)


def quick_fixes(uri: str, source: str, findings: list[Finding], wanted: types.Range) -> list[types.CodeAction]:
    """One quick fix per finding in `wanted` that `--fix` would fix: the whole buffer replaced by
    the buffer with that finding's insertions (the same lines `--fix` writes)."""
    lines = source.splitlines()
    whole = types.Range(types.Position(0, 0), types.Position(len(lines) + 1, 0))
    actions = []
    for finding in findings:
        if (
            not fixable(finding, unsafe=False)
            or finding.line - 1 > wanted.end.line
            or finding.end_line - 1 < wanted.start.line
        ):
            continue
        fixed = apply_edits(source, finding.edits)
        if fixed == source:
            continue
        actions.append(
            types.CodeAction(
                title=f"{SOURCE}: {finding.fix or 'apply the fix'} ({finding.code})",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[to_diagnostic(finding, lines)],
                edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(range=whole, new_text=fixed)]}),
            )
        )
    return actions


def create_server() -> LanguageServer:
    server = LanguageServer(SOURCE, __version__)
    projects = Workspace()

    def current(uri: str) -> tuple[str, list[Finding]]:
        """The buffer's text now and its findings (none, and a message, for a broken config)."""
        source = server.workspace.get_text_document(uri).source
        try:
            return source, lint_document(uri, source, projects)
        except ConfigError as error:
            server.window_show_message(types.ShowMessageParams(types.MessageType.Error, f"{SOURCE}: {error}"))
            return source, []

    def publish(uri: str, dependents: bool = True) -> None:
        """The file's diagnostics, and (`dependents`) again those of the open files that looked
        up its module: their findings may follow from what it now does."""
        source, findings = current(uri)
        lines = source.splitlines()
        diagnostics = [to_diagnostic(finding, lines) for finding in findings]
        server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics))
        if dependents:
            for other in projects.dependents(document_path(uri)):
                if (other_uri := from_fs_path(str(other))) in server.workspace.text_documents:
                    publish(other_uri, dependents=False)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(params: types.DidSaveTextDocumentParams) -> None:
        publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        projects.closed(document_path(params.text_document.uri))
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
        )

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix])
    )
    def code_action(params: types.CodeActionParams) -> list[types.CodeAction]:
        source, findings = current(params.text_document.uri)
        return quick_fixes(params.text_document.uri, source, findings, params.range)

    return server


def serve() -> None:
    """Answer an editor on stdin/stdout until it shuts the server down."""
    create_server().start_io()
