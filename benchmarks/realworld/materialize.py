"""Cut the corpus excerpts out of fetched snapshots into benchmarks/realworld/.cache/excerpts/.

Each excerpt (and the fixed version of a known bug) becomes one file that keeps the original
line numbers. Runs offline: a snapshot that is not fetched is named, and its excerpts skipped.

    python benchmarks/realworld/materialize.py [--manifest TOML] [--mirrors DIR | --source DIR] [--out DIR]
                                               [--whole-files | --repo-context]

--manifest: the manifest to cut (default corpus.toml; the held-out set is heldout-*.toml).
--mirrors:  fetched git directories as <DIR>/<owner>+<name>/repo (default /work/.mirror).
--source:   checkouts as <DIR>/<owner>+<name>/<path>, each already at the manifest's commit; an
            excerpt whose function does not span its recorded lines there is skipped (one checkout
            holds one commit: a known bug's buggy and fixed versions need two runs).
--repo-context: cut nothing; each version is its file inside a checkout of its repository at its
            commit, the snapshot's .py files extracted once under --out (default .cache/repos/,
            shared with lint_repos.py); with --source, its checkouts as they are.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from corpus import (
    CACHE,
    DEFAULT_MIRRORS,
    MANIFEST,
    REPOS_CACHE,
    CorpusError,
    Excerpt,
    checkout_file,
    cut_excerpt,
    excerpt_file_name,
    load_manifest,
    read_source,
)

DEFAULT_OUT = CACHE / "excerpts"
OUT_MARKER = ".materialized"


def materialize(
    excerpts: list[Excerpt],
    out: Path,
    mirrors: Path,
    source: Path | None,
    *,
    whole: bool = False,
    checkouts: Path | None = None,
) -> tuple[dict[str, Path], list[str]]:
    """Write every excerpt it can; return the file to lint for each excerpt file name
    (excerpt_file_name) and one line per excerpt it could not. `out` is emptied first, but only
    when this script made it (its marker file is there).
    `whole`: write each excerpt's whole file (and each known bug's fixed file) instead: the code
    as it ships, callers and other classes of the module in view.
    `checkouts`: write nothing; each version is its own file inside a checkout of its repository
    at its commit, extracted under this folder (several excerpts may share one file)."""
    if checkouts is None:
        _prepare(out)
    written, problems = {}, []
    for excerpt in excerpts:
        versions = [(excerpt.version, False)] + ([(excerpt.fixed, True)] if excerpt.fixed else [])
        for version, fixed in versions:
            name = excerpt_file_name(excerpt, fixed)
            try:
                if checkouts is not None:
                    written[name] = checkout_file(excerpt.repo, version, mirrors, source, checkouts)
                    continue
                text = read_source(excerpt.repo, version, mirrors, source)
                target = out / name
                target.write_text(text if whole else cut_excerpt(text, version), encoding="utf-8")
                written[name] = target
            except CorpusError as error:
                problems.append(f"{excerpt.id}{' [fixed]' if fixed else ''}: {error}")
    return written, problems


def _prepare(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        if not (out / OUT_MARKER).is_file():
            raise CorpusError(f"{out} is not empty and was not made by materialize.py: not clearing it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / OUT_MARKER).write_text("excerpts cut by benchmarks/realworld/materialize.py\n", encoding="utf-8")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say where the manifest, the snapshots and the cut excerpts are."""
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument(
        "--mirrors", type=Path, default=DEFAULT_MIRRORS, help="fetched snapshots: DIR/<owner>+<name>/repo"
    )
    parser.add_argument("--source", type=Path, default=None, help="checkouts at the manifest's commits instead")
    parser.add_argument("--out", type=Path, default=None, help="where the excerpts are cut to (checkouts: extracted)")
    views = parser.add_mutually_exclusive_group()
    views.add_argument(
        "--whole-files",
        action="store_true",
        help="each excerpt's whole file (and each fix's), scored inside the excerpt's lines",
    )
    views.add_argument(
        "--repo-context",
        action="store_true",
        help="each excerpt's file inside a checkout of its repository at its commit, scored like --whole-files",
    )


def materialize_from(args: argparse.Namespace) -> tuple[list[Excerpt], dict[str, Path], list[str]]:
    """Cut the excerpts the options name, saying on stderr which could not be; exit with status 2
    when the manifest or the output folder is wrong, or no excerpt at all could be cut."""
    try:
        excerpts = load_manifest(args.manifest)
        if args.repo_context:
            args.out = args.out or REPOS_CACHE
        else:
            args.out = args.out or (CACHE / "whole-files" if args.whole_files else DEFAULT_OUT)
        checkouts = args.out if args.repo_context else None
        written, problems = materialize(
            excerpts, args.out, args.mirrors, args.source, whole=args.whole_files, checkouts=checkouts
        )
    except CorpusError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    for problem in problems:
        print(f"skipped: {problem}", file=sys.stderr)
    if not written:
        print("error: no excerpt could be cut: fetch the snapshots first", file=sys.stderr)
        raise SystemExit(2)
    return excerpts, written, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args()
    excerpts, written, problems = materialize_from(args)
    if args.repo_context:
        files = len(set(written.values()))
        print(f"{len(written)} excerpt files from {len(excerpts)} entries found in checkouts ({files} files)")
    else:
        print(f"{len(written)} excerpt files from {len(excerpts)} entries written to {args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
