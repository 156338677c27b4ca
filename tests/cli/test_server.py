"""`csan-lint server` driven by a real LSP client session over stdio (pygls's client): initialize,
didOpen -> publishDiagnostics, codeAction -> the quick fix, didChange, shutdown and exit."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the server's extra: pip install 'csan-lint[lsp]'")
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.uris import from_fs_path

from csan_lint.lint.shell.config import load_config
from csan_lint.lint.shell.fix import apply_edits, fixable
from csan_lint.lint.shell.runner import lint_text

FLAGGED = (
    "import torch\n\n\ndef f(x, s):\n    y = x * 2\n    with torch.cuda.stream(s):\n        z = y + 1\n    return z\n"
)
"""CSL101 (safe fix: a wait_stream before the block) and CSL201 on line 7."""


class _Session:
    """A client with the diagnostics it has been sent, per uri, as they arrive."""

    def __init__(self) -> None:
        self.client = LanguageClient("csan-lint-test", "1")
        self.published: asyncio.Queue[types.PublishDiagnosticsParams] = asyncio.Queue()

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
            self.published.put_nowait(params)

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)
        def on_message(params: types.ShowMessageParams) -> None:
            self.published.put_nowait(types.PublishDiagnosticsParams(uri="message:" + params.message, diagnostics=[]))

    async def next_diagnostics(self) -> types.PublishDiagnosticsParams:
        return await asyncio.wait_for(self.published.get(), timeout=60)


async def _session(project: Path) -> dict[str, object]:
    session = _Session()
    client = session.client
    await client.start_io(sys.executable, "-m", "csan_lint", "server", cwd=str(project))
    seen: dict[str, object] = {}
    try:
        result = await asyncio.wait_for(
            client.initialize_async(
                types.InitializeParams(
                    capabilities=types.ClientCapabilities(),
                    root_uri=from_fs_path(str(project)),
                    process_id=None,
                )
            ),
            timeout=60,
        )
        seen["capabilities"] = result.capabilities
        client.initialized(types.InitializedParams())
        uri = from_fs_path(str(project / "src" / "flagged.py"))
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                types.TextDocumentItem(uri=uri, language_id="python", version=1, text=FLAGGED)
            )
        )
        seen["opened"] = await session.next_diagnostics()
        seen["actions"] = await asyncio.wait_for(
            client.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    range=types.Range(types.Position(6, 0), types.Position(6, 0)),
                    context=types.CodeActionContext(diagnostics=[]),
                )
            ),
            timeout=60,
        )
        suppressed = FLAGGED.replace("z = y + 1", "z = y + 1  # noqa: CSL101")
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=suppressed)],
            )
        )
        seen["changed"] = await session.next_diagnostics()
        ignored_uri = from_fs_path(str(project / "generated" / "flagged.py"))
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                types.TextDocumentItem(uri=ignored_uri, language_id="python", version=1, text=FLAGGED)
            )
        )
        seen["per_file_ignored"] = await session.next_diagnostics()
        await asyncio.wait_for(client.shutdown_async(None), timeout=60)
        client.exit(None)
    finally:
        await client.stop()
    return seen


@pytest.mark.slow
def test_an_editor_session(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.csan-lint.per-file-ignores]\n"generated/*" = ["CSL101"]\n')
    seen = asyncio.run(_session(tmp_path))

    capabilities = seen["capabilities"]
    assert isinstance(capabilities, types.ServerCapabilities) and capabilities.code_action_provider

    opened = seen["opened"]
    assert isinstance(opened, types.PublishDiagnosticsParams)
    config = load_config([str(tmp_path / "src" / "flagged.py")])
    expected = lint_text(FLAGGED, tmp_path / "src" / "flagged.py", config).findings
    assert [(d.code, d.range.start.line + 1, d.range.start.character + 1) for d in opened.diagnostics] == [
        (f.code, f.line, f.column) for f in expected
    ]
    assert {d.code for d in opened.diagnostics} == {"CSL101", "CSL201"}
    csl101 = next(d for d in opened.diagnostics if d.code == "CSL101")
    assert csl101.source == "csan-lint" and "\nhelp: " in csl101.message
    assert csl101.code_description is not None and csl101.code_description.href.endswith("#csl101-missing-wait-stream")

    actions = seen["actions"]
    assert isinstance(actions, (list, tuple))
    assert [action.diagnostics[0].code for action in actions] == [f.code for f in expected if fixable(f, unsafe=False)]
    assert actions[0].kind == types.CodeActionKind.QuickFix and actions[0].diagnostics[0].code == "CSL101"
    (edit,) = actions[0].edit.changes[opened.uri]
    fixed_finding = next(f for f in expected if f.code == "CSL101")
    assert edit.new_text == apply_edits(FLAGGED, fixed_finding.edits) != FLAGGED
    assert "wait_stream" in edit.new_text

    changed = seen["changed"]
    assert isinstance(changed, types.PublishDiagnosticsParams)
    assert {d.code for d in changed.diagnostics} == {"CSL201"}, "the noqa typed in the buffer applies"
    ignored = seen["per_file_ignored"]
    assert isinstance(ignored, types.PublishDiagnosticsParams)
    assert {d.code for d in ignored.diagnostics} == {"CSL201"}, "the project's per-file-ignores apply"


def test_positions_are_utf16_code_units() -> None:
    from csan_lint.lint.model import Finding, Span
    from csan_lint.lint.shell.server import to_diagnostic

    finding = Finding("m.py", 1, 5, "CSL101", "m", 1, 6, Span(1, 1))
    diagnostic = to_diagnostic(finding, ["😀 = y"])  # one code point, two UTF-16 units, before column 5
    assert (diagnostic.range.start.character, diagnostic.range.end.character) == (5, 6)


async def _edit_helper_session(project: Path, helper: str, edited: str, caller: str) -> list[tuple[str, set[str]]]:
    """Open the caller, then the helper, then edit the helper: the diagnostics published, in order
    (the helper's own, then its open callers')."""
    session = _Session()
    client = session.client
    await client.start_io(sys.executable, "-m", "csan_lint", "server", cwd=str(project))
    published: list[tuple[str, set[str]]] = []

    async def next_published() -> None:
        params = await session.next_diagnostics()
        published.append((Path(params.uri).name, {str(d.code) for d in params.diagnostics}))

    try:
        await asyncio.wait_for(
            client.initialize_async(
                types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=from_fs_path(str(project)))
            ),
            timeout=60,
        )
        client.initialized(types.InitializedParams())
        for name, text, published_files in (("train.py", caller, 1), ("comm.py", helper, 2)):
            item = types.TextDocumentItem(
                uri=from_fs_path(str(project / "pkg" / name)), language_id="python", version=1, text=text
            )
            client.text_document_did_open(types.DidOpenTextDocumentParams(item))
            for _ in range(published_files):
                await next_published()
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(
                    uri=from_fs_path(str(project / "pkg" / "comm.py")), version=2
                ),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=edited)],
            )
        )
        await next_published()
        await next_published()
        await asyncio.wait_for(client.shutdown_async(None), timeout=60)
        client.exit(None)
    finally:
        await client.stop()
    return published


@pytest.mark.slow
def test_editing_a_helper_rechecks_the_open_files_that_call_it(tmp_path: Path) -> None:
    """The server keeps the project's index: the caller's diagnostics follow the helper's unsaved text."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from test_project_index import COMM, COMM_FORKED, TRAIN, _project
    finally:
        sys.path.remove(str(Path(__file__).parent))

    _project(tmp_path)
    published = asyncio.run(_edit_helper_session(tmp_path, COMM, COMM_FORKED, TRAIN))
    assert published == [
        ("train.py", {"CSL101"}),
        ("comm.py", set()),
        ("train.py", {"CSL101"}),  # the helper's buffer stands for it now: its callers are checked again
        ("comm.py", set()),
        ("train.py", set()),  # the unsaved edit: the side stream now waits first
    ]
