"""`python -m csan_lint.runtime [options] script.py [args...]`: run a script under the sanitizer
(like `TORCH_CUDA_SANITIZER=1 python script.py`), print every report at exit, exit 1 on races."""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import traceback

from csan_lint.runtime import sanitize


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m csan_lint.runtime",
        description="Run a Python script under the CUDA stream sanitizer.",
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cuda", "emulated"),
        default="auto",
        help="real CUDA, the emulated device, or auto (CUDA when available)",
    )
    parser.add_argument("--trace-out", metavar="PATH", help="also write the event trace (JSON Lines)")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="reports as text (default) or one JSON object a line"
    )
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return parser


def main(argv: list[str] | None = None) -> int:
    options = _parser().parse_args(argv)
    from csan_lint.runtime.report import render_text, to_json

    trace = open(options.trace_out, "w", encoding="utf-8") if options.trace_out else None
    sys.argv = [options.script, *options.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(options.script)))
    status = 0
    # The script's globals (and an exception's frames) outlive the sanitizer: tensors freed
    # as the program ends are never reused, and reporting those frees would be noise.
    leftovers: object = None
    try:
        with sanitize(options.device, trace) as sanitizer:
            # runpy's call into the script: stack walks stop there.
            sanitizer.stack_stop.add(id(runpy._run_code.__code__))  # type: ignore[attr-defined]
            try:
                leftovers = runpy.run_path(options.script, run_name="__main__")
            except SystemExit as exit_:
                status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
                leftovers = exit_
            except Exception as error:
                # Shown like Python shows it; the races found before still get reported.
                traceback.print_exc()
                status = 1
                leftovers = error
    finally:
        if trace is not None:
            trace.close()
    del leftovers
    for report in sanitizer.errors:
        if options.format == "json":
            print(json.dumps(to_json(report)), file=sys.stderr)
        else:
            print(render_text(report), file=sys.stderr)
    for message in sanitizer.internal_errors:
        print(f"csan: internal error: {message}", file=sys.stderr)
    races = [r for r in sanitizer.errors if r.severity == "error"]
    if races:
        print(f"csan: {len(races)} race(s) found", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
