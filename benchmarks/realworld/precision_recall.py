"""Lint the real-world corpus with an installed csan-lint and print precision and recall.

Cuts the excerpts first (materialize.py), lints them in one `csan-lint --format json` run, and
scores each excerpt file:
- a bug excerpt is found (TP) when a finding of one of its `rules` is on one of its
  `bug_lines`; flagged only elsewhere it counts as a false positive (wrong place) and a miss;
  not flagged at all, a miss (FN);
- a safe excerpt (and the fixed version of a known bug) with any finding is a false positive.
A finding of one of an excerpt's `other_bugs` (another real race there, left by its fix) is set
aside before judging and counted on its own.
precision = TP / (TP + FP), recall = TP / (TP + FN), over excerpt files. For each known bug it
also says whether the buggy version is found and the fixed one carries no finding of its rules.

    python benchmarks/realworld/precision_recall.py [--csan-lint PATH] [--manifest TOML]
                                                    [--mirrors DIR | --source DIR] [--json OUT]
                                                    [--whole-files | --repo-context]

With --whole-files each excerpt's whole file is linted instead of the excerpt (callers, other
methods and classes of the module in view, as the code ships) and scored the same way on the
findings inside the excerpt's lines (the fixed version's lines for a fix); findings elsewhere in
the file are not labelled and are only counted. --repo-context lints each version's file where it
lies in a checkout of its repository at its commit, one csan-lint run per checkout with the
checkout as the project (its modules indexed: the calls into them resolved), and scores it the
same way. --manifest names another manifest (the held-out set: heldout-*.toml).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from corpus import Excerpt, excerpt_file_name, run_csan_lint
from materialize import add_arguments, materialize_from


@dataclass
class Score:
    """One excerpt file's findings, judged against its label."""

    excerpt: str
    version: str
    label: str
    findings: list[dict] = field(default_factory=list)
    matched: int = 0
    other_bugs: list[dict] = field(default_factory=list)
    """Findings of another real race in the excerpt (`other_bugs`), set aside."""

    @property
    def verdict(self) -> str:
        if self.label == "bug":
            if self.matched:
                return "TP"
            return "FN+FP" if self.findings else "FN"
        return "FP" if self.findings else "TN"


def run_linter(linter: str, files: list[Path], options: list[str] | None = None) -> list[dict]:
    """csan-lint's findings on the files, named one by one (directory discovery skips the ignored
    cache); internal and unreadable-file errors abort the run."""
    report = run_csan_lint(linter, [*(options or []), *(str(path) for path in files)])
    broken = [f for f in report["findings"] if f["code"] in ("CSL002", "CSL003")]
    if broken:
        raise SystemExit(f"{linter} could not check {len(broken)} file(s): {broken[0]['path']}: {broken[0]['message']}")
    return report["findings"]


CONTEXT_CONFIG = "csan-lint-context.toml"
"""Written at each checkout's root for --repo-context: with it as the run's config the checkout is
the project (lint/shell/project.py), whose modules the linted file's calls are resolved in."""


def run_in_checkouts(linter: str, files: list[Path], bases: list[Path]) -> list[dict]:
    """csan-lint's findings on each checkout's files, one run per checkout with that checkout as
    the project: named together from one working tree, the files would belong to no project
    (the cache that holds the checkouts is ignored) and no module beside them would be read."""
    by_root: dict[Path, list[Path]] = {}
    for path in files:
        by_root.setdefault(checkout_root(path.resolve(), bases), []).append(path)
    findings = []
    for root, named in sorted(by_root.items()):
        config = root / CONTEXT_CONFIG
        config.write_text("respect-gitignore = false\n", encoding="utf-8")
        findings += run_linter(linter, named, ["--config", str(config)])
    return findings


def checkout_root(path: Path, bases: list[Path]) -> Path:
    """The checkout a file lies in: the folder directly under one of `bases` that holds it."""
    for base in bases:
        if base in path.parents:
            return base / path.relative_to(base).parts[0]
    raise SystemExit(f"{path} is in no checkout under {', '.join(map(str, bases))}")


def matches(finding: dict, excerpt: Excerpt) -> bool:
    """A finding of one of the bug's rules on one of its lines. Not its span: a span is the whole
    `with` block, and any finding in the block would cover the bug's lines by chance."""
    return finding["code"] in excerpt.rules and finding["line"] in excerpt.bug_lines


def of_other_bug(finding: dict, excerpt: Excerpt) -> bool:
    return any(finding["code"] in other.rules and finding["line"] in other.lines for other in excerpt.other_bugs)


def score(
    excerpts: list[Excerpt], findings: list[dict], written: Mapping[str, Path], *, whole: bool = False
) -> list[Score]:
    """Each excerpt file's verdict. `written`: the file linted for each excerpt file name
    (excerpt_file_name); several excerpts may share one (checkouts). `whole`: the files are whole
    modules, and only the findings inside the excerpt's lines are judged."""
    by_file: dict[Path, list[dict]] = {}
    for finding in findings:
        by_file.setdefault(Path(finding["path"]).resolve(), []).append(finding)
    scores = []
    for excerpt in excerpts:
        for fixed in (False, True) if excerpt.fixed else (False,):
            name = excerpt_file_name(excerpt, fixed)
            if name not in written:
                continue
            label = "safe" if fixed else excerpt.label
            first, last = (excerpt.fixed if fixed and excerpt.fixed else excerpt.version).lines
            in_file = by_file.get(written[name].resolve(), [])
            judged = [f for f in in_file if not whole or first <= f["line"] <= last]
            other = [f for f in judged if of_other_bug(f, excerpt)]
            file_findings = [f for f in judged if not of_other_bug(f, excerpt)]
            matched = sum(matches(f, excerpt) for f in file_findings) if label == "bug" else 0
            version = "fixed" if fixed else "as-is"
            scores.append(Score(excerpt.id, version, label, file_findings, matched, other))
    return scores


def known_bug_pairs(excerpts: list[Excerpt], scores: list[Score]) -> list[tuple[str, bool, bool]]:
    """(id, buggy version found, fixed version free of the bug's rules) per known bug with a fix."""
    by_key = {(s.excerpt, s.version): s for s in scores}
    pairs = []
    for excerpt in excerpts:
        buggy, fixed = by_key.get((excerpt.id, "as-is")), by_key.get((excerpt.id, "fixed"))
        if buggy is None or fixed is None:
            continue
        fixed_clean = not any(f["code"] in excerpt.rules for f in fixed.findings)
        pairs.append((excerpt.id, buggy.verdict == "TP", fixed_clean))
    return pairs


def summarize(excerpts: list[Excerpt], scores: list[Score]) -> dict:
    """The corpus-wide counts and ratios the report prints (and --json writes)."""
    tp = sum(s.verdict == "TP" for s in scores)
    fp = sum(s.verdict in ("FP", "FN+FP") for s in scores)
    fn = sum(s.verdict in ("FN", "FN+FP") for s in scores)
    pairs = known_bug_pairs(excerpts, scores)
    in_context = {e.id for e in excerpts if e.context is not None}
    return {
        "excerpt_files": len(scores),
        "repositories": len({e.repo for e in excerpts}),
        "bug_files": sum(s.label == "bug" for s in scores),
        "safe_files": sum(s.label == "safe" for s in scores),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / (tp + fn) if tp + fn else None,
        "findings": sum(len(s.findings) for s in scores),
        "matched_findings": sum(s.matched for s in scores),
        "known_bugs": len(pairs),
        "known_bugs_buggy_found": sum(found for _, found, _ in pairs),
        "known_bugs_fixed_clean": sum(clean for _, _, clean in pairs),
        "known_bugs_both": sum(found and clean for _, found, clean in pairs),
        "known_bugs_needing_context": sum(id_ in in_context for id_, _, _ in pairs),
        "known_bugs_both_needing_context": sum(found and clean for id_, found, clean in pairs if id_ in in_context),
        "findings_on_fixed": sum(len(s.findings) for s in scores if s.version == "fixed"),
        "other_bug_files": sum(bool(e.other_bugs) for e in excerpts for _ in ((0, 1) if e.fixed else (0,))),
        "other_bugs_found": sum(bool(s.other_bugs) for s in scores),
    }


def unjudged(findings: list[dict], scores: list[Score]) -> int:
    """Findings no excerpt judged (outside every excerpt's lines): counted, never labelled."""
    judged = {id(f) for s in scores for f in (*s.findings, *s.other_bugs)}
    return sum(id(f) not in judged for f in findings)


def ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def print_report(scores: list[Score], totals: dict, form: str) -> None:
    print(f"{'excerpt':52} {'version':7} {'label':5} {'findings':>8}  verdict  rules found")
    for s in scores:
        codes = ",".join(sorted({f["code"] for f in s.findings})) or "-"
        codes += f" (+{len(s.other_bugs)} of another bug)" if s.other_bugs else ""
        print(f"{s.excerpt:52} {s.version:7} {s.label:5} {len(s.findings):8}  {s.verdict:7}  {codes}")
    t = totals
    known = t["known_bugs"]
    print()
    print(
        f"excerpt files: {t['excerpt_files']} from {t['repositories']} repositories"
        f" ({t['bug_files']} bug, {t['safe_files']} safe)"
    )
    print(
        f"other bugs (another real race in an excerpt, set aside): found in {t['other_bugs_found']}"
        f" of {t['other_bug_files']} files"
    )
    if t["unjudged_findings"]:
        print(f"findings outside the excerpts' lines (not labelled, not judged): {t['unjudged_findings']}")
    print(
        f"{form}: TP {t['tp']}  FP {t['fp']}  FN {t['fn']}"
        f"  precision {ratio(t['precision'])}  recall {ratio(t['recall'])}"
    )
    finding_precision = t["matched_findings"] / t["findings"] if t["findings"] else None
    print(
        f"findings: {t['findings']}, of which on a labelled bug line with its rule: {t['matched_findings']}"
        f" (finding precision {ratio(finding_precision)})"
    )
    print(
        f"known bugs: buggy version found and fixed version clean: {t['known_bugs_both']}/{known}"
        f" ({ratio(t['known_bugs_both'] / known if known else None)});"
        f" buggy found: {t['known_bugs_buggy_found']}, fixed clean: {t['known_bugs_fixed_clean']}"
    )
    if t["known_bugs_needing_context"]:
        both, needing = t["known_bugs_both_needing_context"], t["known_bugs_needing_context"]
        print(
            f"  of which needing another module (needs_context): {both}/{needing};"
            f" the others: {t['known_bugs_both'] - both}/{known - needing}"
        )
    print(f"findings on the fixed versions: {t['findings_on_fixed']} for {known} known bugs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csan-lint", dest="linter", default="csan-lint", help="the csan-lint executable to measure")
    parser.add_argument("--json", type=Path, default=None, help="also write the scores here")
    add_arguments(parser)
    args = parser.parse_args()
    excerpts, written, _ = materialize_from(args)
    files = sorted(set(written.values()))
    if args.repo_context:
        bases = [base.resolve() for base in (args.source, args.out) if base is not None]
        findings = run_in_checkouts(args.linter, files, bases)
    else:
        findings = run_linter(args.linter, files)
    whole = args.whole_files or args.repo_context
    scores = score(excerpts, findings, written, whole=whole)
    totals = summarize(excerpts, scores)
    totals["unjudged_findings"] = unjudged(findings, scores)
    form = "checkouts" if args.repo_context else "whole files" if args.whole_files else "excerpts"
    print_report(scores, totals, form)
    if args.json:
        results = {"totals": totals, "scores": [asdict(s) | {"verdict": s.verdict} for s in scores]}
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
