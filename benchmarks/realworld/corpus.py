"""The real-world corpus: its manifest, where its sources come from, and how an excerpt is cut.

Public code is never committed here (a workplace rule), so corpus.toml only names each excerpt:
repository, license, commit, path and function, with its label. The excerpt is cut from a
fetched snapshot (a git directory under /work/.mirror/<owner>+<name>/) or from a checkout given
with --source, and written with its original line numbers so that findings can be compared with
the labelled lines directly. Shared by materialize.py, precision_recall.py and lint_repos.py.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "corpus.toml"
CACHE = HERE / ".cache"
"""Ignored by git: materialized excerpts and extracted repositories."""
REPOS_CACHE = CACHE / "repos"
"""Checkouts: a snapshot's .py files at one commit, in <owner>+<name>@<commit[:12]>/."""
DEFAULT_MIRRORS = Path("/work/.mirror")
LABELS = ("bug", "safe")
KEYS = {"id", "repo", "license", "label", "commit", "path", "function", "lines"} | {
    "rules",
    "bug_lines",
    "why",
    "tracker",
    "fixed",
    "other_bugs",
    "needs_context",
    "context",
}
FIXED_KEYS = {"commit", "path", "function", "lines"}
OTHER_BUG_KEYS = {"rules", "lines", "why", "tracker"}


class CorpusError(Exception):
    """A manifest entry that is malformed, or whose source is missing or does not match it."""


@dataclass(frozen=True)
class Version:
    """One version of an excerpt: a function, Class.method or class in a file at a commit."""

    commit: str
    path: str
    function: str
    lines: tuple[int, int]


@dataclass(frozen=True)
class OtherBug:
    """A second real race in the same code, untouched by the excerpt's known fix (so present in
    both versions, at the same lines): a finding of it is true, neither the excerpt's bug nor a
    false positive."""

    rules: tuple[str, ...]
    lines: tuple[int, ...]
    why: str
    tracker: str


@dataclass(frozen=True)
class Excerpt:
    id: str
    repo: str
    license: str
    label: str
    version: Version
    rules: tuple[str, ...]
    bug_lines: tuple[int, ...]
    why: str
    tracker: str | None
    fixed: Version | None
    """The same code after its known fix; it is expected to be safe."""
    other_bugs: tuple[OtherBug, ...] = ()
    context: str | None = None
    """For a bug whose racing access, release or stream is in another module: which one (the
    excerpt and its file cannot show it alone; `needs_context` in the manifest)."""


def load_manifest(path: Path = MANIFEST) -> list[Excerpt]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise CorpusError(f"{path}: {error}") from None
    excerpts = [_parse_entry(entry, index, path) for index, entry in enumerate(data.get("excerpt", []))]
    seen: set[str] = set()
    for excerpt in excerpts:
        if excerpt.id in seen:
            raise CorpusError(f"{path}: excerpt id {excerpt.id!r} is used twice")
        seen.add(excerpt.id)
    return excerpts


def _parse_entry(entry: dict, index: int, path: Path) -> Excerpt:
    where = f"{path}: excerpt #{index + 1} ({entry.get('id', 'no id')})"
    fixed_entry = entry.get("fixed", {})
    if not isinstance(fixed_entry, dict):
        raise CorpusError(f"{where}: fixed must be a table such as {{ commit = ..., lines = [...] }}")
    unknown = sorted(set(entry) - KEYS) + [f"fixed.{key}" for key in sorted(set(fixed_entry) - FIXED_KEYS)]
    if unknown:
        raise CorpusError(f"{where}: unknown field(s) {', '.join(unknown)}")
    try:
        label = entry["label"]
        if label not in LABELS:
            raise CorpusError(f"{where}: label must be one of {LABELS}, not {label!r}")
        rules = tuple(entry.get("rules", ()))
        bug_lines = tuple(entry.get("bug_lines", ()))
        if not all(isinstance(line, int) for line in bug_lines):
            raise CorpusError(f"{where}: bug_lines must be line numbers, not {list(bug_lines)!r}")
        if label == "bug" and not (rules and bug_lines):
            raise CorpusError(f"{where}: a bug needs `rules` and `bug_lines`")
        version = _parse_version(entry, where)
        if label == "bug" and not all(version.lines[0] <= line <= version.lines[1] for line in bug_lines):
            raise CorpusError(f"{where}: bug_lines {bug_lines} lie outside lines {version.lines}")
        fixed = _parse_version({**entry, **fixed_entry}, f"{where} [fixed]") if fixed_entry else None
        other_bugs = tuple(_parse_other_bug(other, f"{where} [other_bugs]") for other in entry.get("other_bugs", ()))
        context = _parse_context(entry, where)
        return Excerpt(
            id=entry["id"],
            repo=entry["repo"],
            license=entry["license"],
            label=label,
            version=version,
            rules=rules,
            bug_lines=bug_lines,
            why=entry["why"],
            tracker=entry.get("tracker"),
            fixed=fixed,
            other_bugs=other_bugs,
            context=context,
        )
    except KeyError as missing:
        raise CorpusError(f"{where}: missing field {missing}") from None


def _parse_context(entry: dict, where: str) -> str | None:
    """`needs_context = true` comes with `context`, the module that holds the missing piece."""
    needs = entry.get("needs_context", False)
    context = entry.get("context")
    if not isinstance(needs, bool):
        raise CorpusError(f"{where}: needs_context must be true or false, not {needs!r}")
    if needs != (context is not None):
        raise CorpusError(f'{where}: needs_context = true and context = "<other module>" go together')
    if context is not None and not (isinstance(context, str) and context.strip()):
        raise CorpusError(f"{where}: context must name the other module, not {context!r}")
    return context


def _parse_other_bug(entry: object, where: str) -> OtherBug:
    if not isinstance(entry, dict) or set(entry) != OTHER_BUG_KEYS:
        raise CorpusError(f"{where}: each needs exactly the fields {sorted(OTHER_BUG_KEYS)}")
    lines = entry["lines"]
    if not (isinstance(lines, list) and lines and all(isinstance(line, int) for line in lines)):
        raise CorpusError(f"{where}: lines must be line numbers, not {lines!r}")
    return OtherBug(tuple(entry["rules"]), tuple(lines), entry["why"], entry["tracker"])


def _parse_version(entry: dict, where: str) -> Version:
    lines = entry["lines"]
    if not (isinstance(lines, list) and len(lines) == 2 and all(isinstance(n, int) for n in lines)) or not (
        0 < lines[0] <= lines[1]
    ):
        raise CorpusError(f"{where}: lines must be [start, end] with 0 < start <= end, not {lines!r}")
    start, end = lines
    return Version(commit=entry["commit"], path=entry["path"], function=entry["function"], lines=(start, end))


def mirror_git_dir(mirrors: Path, repo: str) -> Path | None:
    """The git directory of a fetched snapshot of `owner/name`, or None when it was not fetched."""
    root = mirrors / repo.replace("/", "+") / "repo"
    for candidate in (root / ".git", root):
        if (candidate / "HEAD").is_file():
            return candidate
    return None


def read_source(repo: str, version: Version, mirrors: Path, source: Path | None) -> str:
    """The file's text at the version's commit: from --source DIR/<owner>+<name>/ or the snapshot."""
    if source is not None:
        checkout = source / repo.replace("/", "+") / version.path
        if not checkout.is_file():
            raise CorpusError(f"missing source: {checkout} (needed for {repo} at {version.commit})")
        return checkout.read_text(encoding="utf-8")
    git_dir = mirror_git_dir(mirrors, repo)
    if git_dir is None:
        raise CorpusError(f"missing snapshot: {repo} is not fetched under {mirrors}")
    shown = subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{version.commit}:{version.path}"],
        capture_output=True,
        text=True,
    )
    if shown.returncode != 0:
        raise CorpusError(f"{repo} snapshot lacks {version.path} at {version.commit}: {shown.stderr.strip()}")
    return shown.stdout


def extract(git_dir: Path, commit: str, target: Path) -> tuple[Path, int]:
    """The commit's .py files under target (reused when already there), and how many of them the
    snapshot lacks (snapshots leave out files of 4 MiB and more)."""
    done = target / ".extracted"
    if done.is_file():
        return target, int(done.read_text(encoding="utf-8").split()[1])
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    listing = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "-z", commit], capture_output=True, check=True
    ).stdout.decode()
    blobs = []
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        _, kind, sha = meta.split()
        if kind == "blob" and path.endswith(".py"):
            blobs.append((sha, path))
    lacking = 0
    with subprocess.Popen(
        ["git", f"--git-dir={git_dir}", "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as batch:
        for sha, path in blobs:
            batch.stdin.write(f"{sha}\n".encode())
            batch.stdin.flush()
            header = batch.stdout.readline().split()
            if header[1] == b"missing":
                lacking += 1
                continue
            content = batch.stdout.read(int(header[2]) + 1)[:-1]
            destination = target / path
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(content)
        batch.stdin.close()
    done.write_text(f"{commit} {lacking}\n", encoding="utf-8")
    return target, lacking


def checkout_file(repo: str, version: Version, mirrors: Path, source: Path | None, checkouts: Path) -> Path:
    """The version's file inside a checkout of its repository at its commit, so that a linter can
    read the modules around it: --source's checkout as it is, or the snapshot's .py files at that
    commit extracted under `checkouts` once. Its function must span the recorded lines there."""
    if source is not None:
        path = source / repo.replace("/", "+") / version.path
    else:
        git_dir = mirror_git_dir(mirrors, repo)
        if git_dir is None:
            raise CorpusError(f"missing snapshot: {repo} is not fetched under {mirrors}")
        try:
            tree, _ = extract(git_dir, version.commit, checkouts / f"{repo.replace('/', '+')}@{version.commit[:12]}")
        except subprocess.CalledProcessError as error:
            raise CorpusError(
                f"{repo} snapshot lacks commit {version.commit}: {error.stderr.decode().strip()}"
            ) from None
        path = tree / version.path
    if not path.is_file():
        raise CorpusError(f"missing source: {path} (needed for {repo} at {version.commit})")
    cut_excerpt(path.read_text(encoding="utf-8"), version)
    return path


def cut_excerpt(text: str, version: Version) -> str:
    """The file with every line blanked except top-level imports, the headers of the enclosing
    classes and the function itself: line numbers stay those of the original file."""
    try:
        tree = ast.parse(text.removeprefix("\ufeff"))  # a byte-order mark: Python reads past it, ast does not
    except SyntaxError as error:
        raise CorpusError(f"{version.path} at {version.commit} does not parse: {error}") from None
    chain = _find_function(tree, version.function.split("."))
    if chain is None:
        raise CorpusError(f"no function {version.function} in {version.path} at {version.commit}")
    function = chain[-1]
    span = (_first_line(function), function.end_lineno)
    if span != version.lines:
        raise CorpusError(
            f"{version.function} spans lines {span[0]}-{span[1]} at {version.commit},"
            f" the manifest says {version.lines[0]}-{version.lines[1]}"
        )
    kept: set[int] = set(range(span[0], span[1] + 1))
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            kept.update(range(node.lineno, node.end_lineno + 1))
    for enclosing in chain[:-1]:
        kept.update(range(_first_line(enclosing), enclosing.body[0].lineno))
    lines = text.splitlines()
    return "\n".join(line if number in kept else "" for number, line in enumerate(lines, 1)) + "\n"


def _find_function(tree: ast.AST, names: list[str]) -> list[ast.AST] | None:
    """The class and function nodes along a dotted path, outermost first; the last one is the
    excerpt (a whole class when the excerpt spans several methods)."""
    scope, chain = tree, []
    for name in names:
        found = next(
            (
                node
                for node in getattr(scope, "body", [])
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
            ),
            None,
        )
        if found is None:
            return None
        chain.append(found)
        scope = found
    return chain


def _first_line(node: ast.AST) -> int:
    return min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])


def excerpt_file_name(excerpt: Excerpt, fixed: bool) -> str:
    return f"{excerpt.id}.fixed.py" if fixed else f"{excerpt.id}.py"


def run_csan_lint(linter: str, arguments: list[str]) -> dict:
    """The JSON report of one `csan-lint --format json` run (docs/json-format.md); a linter that
    is missing or prints no report stops the measurement with the reason."""
    command = [linter, "--format", "json", "--no-cache", "--exit-zero", *arguments]
    try:
        completed = subprocess.run(command, capture_output=True, text=True)
    except OSError as error:
        raise SystemExit(f"cannot run {linter}: {error}") from None
    try:
        return json.loads(completed.stdout)
    except json.JSONDecodeError:
        raise SystemExit(
            f"{linter} gave no JSON report (exit {completed.returncode}): {completed.stderr.strip()[:500]}"
        ) from None
