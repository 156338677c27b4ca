"""Cut the corpus excerpts out of fetched snapshots into benchmarks/realworld/.cache/excerpts/.

Each excerpt (and the fixed version of a known bug) becomes one file that keeps the original
line numbers. Runs offline: a snapshot that is not fetched is named, and its excerpts skipped.

    python benchmarks/realworld/materialize.py [--mirrors DIR | --source DIR] [--out DIR]

--mirrors: fetched git directories as <DIR>/<owner>+<name>/repo (default /work/.mirror).
--source:  checkouts as <DIR>/<owner>+<name>/<path>, each already at the manifest's commit; an
           excerpt whose function does not span its recorded lines there is skipped (one checkout
           holds one commit: a known bug's buggy and fixed versions need two runs).
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
    CorpusError,
    Excerpt,
    cut_excerpt,
    excerpt_file_name,
    load_manifest,
    read_source,
)

DEFAULT_OUT = CACHE / "excerpts"
OUT_MARKER = ".materialized"


def materialize(
    excerpts: list[Excerpt], out: Path, mirrors: Path, source: Path | None, *, whole: bool = False
) -> tuple[list[Path], list[str]]:
    """Write every excerpt it can; return the files written and one line per excerpt it could not.
    `out` is emptied first, but only when this script made it (its marker file is there).
    `whole`: write each excerpt's whole file (and each known bug's fixed file) instead: the code
    as it ships, callers and other classes of the module in view."""
    if out.exists() and any(out.iterdir()):
        if not (out / OUT_MARKER).is_file():
            raise CorpusError(f"{out} is not empty and was not made by materialize.py: not clearing it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / OUT_MARKER).write_text("excerpts cut by benchmarks/realworld/materialize.py\n", encoding="utf-8")
    written, problems = [], []
    for excerpt in excerpts:
        versions = [(excerpt.version, False)] + ([(excerpt.fixed, True)] if excerpt.fixed else [])
        for version, fixed in versions:
            where = f"{excerpt.id}{' [fixed]' if fixed else ''}"
            try:
                text = read_source(excerpt.repo, version, mirrors, source)
                target = out / excerpt_file_name(excerpt, fixed)
                target.write_text(text if whole else cut_excerpt(text, version), encoding="utf-8")
                written.append(target)
            except CorpusError as error:
                problems.append(f"{where}: {error}")
    return written, problems


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say where the manifest, the snapshots and the cut excerpts are."""
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument(
        "--mirrors", type=Path, default=DEFAULT_MIRRORS, help="fetched snapshots: DIR/<owner>+<name>/repo"
    )
    parser.add_argument("--source", type=Path, default=None, help="checkouts at the manifest's commits instead")
    parser.add_argument("--out", type=Path, default=None, help="where the excerpts are cut to")
    parser.add_argument(
        "--whole-files",
        action="store_true",
        help="each excerpt's whole file (and each fix's), scored inside the excerpt's lines",
    )


def materialize_from(args: argparse.Namespace) -> tuple[list[Excerpt], list[Path], list[str]]:
    """Cut the excerpts the options name, saying on stderr which could not be; exit with status 2
    when the manifest or the output folder is wrong, or no excerpt at all could be cut."""
    try:
        excerpts = load_manifest(args.manifest)
        args.out = args.out or (CACHE / "whole-files" if args.whole_files else DEFAULT_OUT)
        written, problems = materialize(excerpts, args.out, args.mirrors, args.source, whole=args.whole_files)
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
    print(f"{len(written)} excerpt files from {len(excerpts)} entries written to {args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
