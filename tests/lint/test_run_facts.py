"""The facts file (lint/run_facts.py): how functions are named and hashed, the located errors of a
malformed file, which facts a module's source keeps, how several runs' files merge, and which
observed entry streams settle a default-stream join. The run that writes the file and the static
pass that reads it are tested together in tests/confirm/test_facts.py."""

from __future__ import annotations

import json

import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.run_facts import MAX_TESTS, FactsFileError, function_hashes, load_facts, merge_files
from csan_lint.lint.shell.config import ConfigError, load_config

SOURCE = """\
import functools


class Comm:
    def send(self, x):
        return x

    @functools.cache
    def cached(self):
        def inner(y):
            return y
        return inner


async def pump(queue):
    return await queue.get()
"""


def entry(qualname="Comm.send", source_hash=None, tests=("t.py::a",), written="same", module="app.comm"):
    digest = source_hash or function_hashes(SOURCE)[qualname][1]
    return {
        "module": module,
        "qualname": qualname,
        "source_hash": digest,
        "file": "app/comm.py",
        "contexts": [
            {
                "entry": "default",
                "entry_name": "the default stream",
                "arguments": [{"name": "x", "written": written, "device": "cuda"}],
                "tests": list(tests),
            }
        ],
        "copies": [],
    }


def write(path, functions, version=1):
    path.write_text(json.dumps({"version": version, "functions": functions}))
    return str(path)


def test_functions_are_named_as_python_names_them_from_their_first_decorator():
    hashes = function_hashes(SOURCE)
    assert sorted(hashes) == ["Comm.cached", "Comm.cached.<locals>.inner", "Comm.send", "pump"]
    assert hashes["Comm.send"][0] == 5
    assert hashes["Comm.cached"][0] == 8  # the decorator's line, as co_firstlineno
    assert function_hashes("def broken(:\n") == {}


def test_the_hash_follows_the_function_s_text_not_its_line_endings_or_neighbours():
    before = function_hashes(SOURCE)
    assert function_hashes(SOURCE.replace("\n", "\r\n"))["Comm.send"][1] == before["Comm.send"][1]
    moved = function_hashes("# a new first line\n" + SOURCE)
    assert moved["Comm.send"][1] == before["Comm.send"][1]
    edited = function_hashes(SOURCE.replace("return x", "return x + 1"))
    assert edited["Comm.send"][1] != before["Comm.send"][1]
    assert edited["pump"][1] == before["pump"][1]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{", "not a JSON facts file: Expecting property name"),
        ('{"version": 2, "functions": []}', "expected a facts file of version 1, got version 2"),
        ('{"version": 1, "functions": {}}', "`functions`: expected a list"),
        ('{"version": 1, "functions": [3]}', "functions[0]: expected an object, got int"),
        ('{"version": 1, "functions": [{"module": "m", "qualname": "f"}]}', "functions[0]: `source_hash`: expected"),
    ],
)
def test_a_malformed_file_is_a_located_error(tmp_path, document, message):
    path = tmp_path / "facts.json"
    path.write_text(document)
    with pytest.raises(FactsFileError) as raised:
        load_facts(str(path))
    assert str(raised.value).startswith(f"{path}: ")
    assert message in str(raised.value)


def test_a_bad_value_deep_in_an_entry_names_the_entry(tmp_path):
    path = write(tmp_path / "facts.json", [entry(), entry(written="maybe")])
    with pytest.raises(
        FactsFileError, match=r"functions\[1\]\.contexts\[0\]\.arguments\[0\]: `written`: expected one of"
    ):
        load_facts(path)


def test_the_config_reports_a_bad_facts_file_where_it_is_named(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.csan-lint]\nfacts = "missing.json"\n')
    with pytest.raises(ConfigError, match="missing.json: cannot read the facts file"):
        load_config([str(tmp_path)])
    (tmp_path / "pyproject.toml").write_text("[tool.csan-lint]\nfacts = 3\n")
    with pytest.raises(ConfigError, match="facts: expected the path of a facts file, got 3"):
        load_config([str(tmp_path)])


def test_a_module_keeps_the_facts_of_its_unchanged_functions(tmp_path):
    stale = entry("pump", source_hash="0" * 16)
    facts = load_facts(write(tmp_path / "facts.json", [entry(), stale, entry(module="other.comm")]))
    kept = facts.for_module("src/app/comm.py", SOURCE)
    assert sorted(kept.functions) == ["Comm.send"]
    assert kept.stale == 1
    assert kept.written_argument("Comm.send", "x") == (
        "observed in t.py::a: `x` came as a cuda tensor last written on the stream the call was entered on "
        "(the default stream)"
    )
    assert kept.written_argument("Comm.send", "y") is None
    assert facts.for_module("app/comm_utils.py", SOURCE).functions == {}


def test_a_nested_function_is_known_by_the_linter_s_name(tmp_path):
    facts = load_facts(write(tmp_path / "facts.json", [entry("Comm.cached.<locals>.inner")]))
    assert sorted(facts.for_module("app/comm.py", SOURCE).functions) == ["Comm.cached.inner"]


def test_an_argument_never_written_on_the_device_settles_nothing(tmp_path):
    facts = load_facts(write(tmp_path / "facts.json", [entry(written="never")]))
    assert facts.for_module("app/comm.py", SOURCE).written_argument("Comm.send", "x") is None


def test_runs_merge_by_function_and_context_keeping_a_few_tests(tmp_path):
    first = write(tmp_path / "a.json", [entry(tests=("t.py::a", "t.py::b"))])
    second = write(tmp_path / "b.json", [entry(tests=("t.py::c", "t.py::d")), entry(written="other")])
    out = tmp_path / "merged.json"
    merge_files([first, second], str(out))
    (merged,) = json.loads(out.read_text())["functions"]
    assert [context["tests"] for context in merged["contexts"]] == [
        ["t.py::a", "t.py::b", "t.py::c"][:MAX_TESTS],
        ["t.py::a"],
    ]
    assert [context["arguments"][0]["written"] for context in merged["contexts"]] == ["same", "other"]
    assert len(load_facts(str(out)).functions) == 1


JOIN = """\
import torch


class Comm:
    def gather(self, x, side):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x + 1
        torch.cuda.default_stream().wait_stream(side)
        return y
"""


@pytest.mark.parametrize(
    ("entries", "reported"),
    [
        ((), True),
        (("default",), False),
        (("default", "side"), True),  # one call on a side stream: there the join misses its caller
    ],
    ids=["no call observed", "every call on the default stream", "one call on a side stream"],
)
def test_a_default_stream_join_is_settled_only_where_every_observed_call_entered_on_the_default_stream(
    tmp_path, entries, reported
):
    function = {**entry("Comm.gather", source_hash=function_hashes(JOIN)["Comm.gather"][1]), "contexts": []}
    for kind in entries:
        name = "the default stream" if kind == "default" else "stream created at t.py:3 (side)"
        function["contexts"].append({"entry": kind, "entry_name": name, "arguments": [], "tests": ["t.py::a"]})
    observed = load_facts(write(tmp_path / "facts.json", [function])).for_module("app/comm.py", JOIN)
    codes = [(finding.code, finding.line) for finding in lint_source(JOIN, "app/comm.py", observed=observed)]
    assert codes == ([("CSL102", 9)] if reported else [])


FETCH = """\
import torch


class Store:
    def fetch(self, x):
        host = x.to("cpu", non_blocking=self.non_blocking)
        return host.tolist()
"""


@pytest.mark.parametrize(
    ("copies", "reported"),
    [
        ((), False),
        ((("d2h", False),), False),
        ((("h2d", True),), False),
        ((("d2h", True),), True),
    ],
    ids=["no copy observed", "a blocking download", "a non-blocking upload", "a non-blocking download"],
)
def test_a_flag_the_code_does_not_tell_is_settled_where_a_run_saw_the_function_download_without_blocking(
    tmp_path, copies, reported
):
    function = {**entry("Store.fetch", source_hash=function_hashes(FETCH)["Store.fetch"][1]), "contexts": []}
    function["copies"] = [
        {"direction": direction, "non_blocking": flag, "tests": ["t.py::fetch"]} for direction, flag in copies
    ]
    observed = load_facts(write(tmp_path / "facts.json", [function])).for_module("app/comm.py", FETCH)
    found = lint_source(FETCH, "app/comm.py", observed=observed)
    assert [(finding.code, finding.line) for finding in found] == ([("CSL301", 7)] if reported else [])
    if reported:
        assert found[0].assumptions == ()
        assert found[0].observed == ("observed in t.py::fetch: the function made a non-blocking copy to the host",)
        assert found[0].message.endswith("(observed in t.py::fetch: the function made a non-blocking copy to the host)")


DRAIN = """\
class Store:
    def drain(self, x, out):
        out.copy_(x, non_blocking=True)
        return out.tolist()
"""


@pytest.mark.parametrize(("device", "reported"), [(None, False), ("cuda", False), ("cpu", False), ("pinned", True)])
def test_a_destination_a_run_saw_handed_in_pinned_makes_a_non_blocking_copy_a_download(tmp_path, device, reported):
    source = "import torch\n\n\n" + DRAIN
    function = {**entry("Store.drain", source_hash=function_hashes(source)["Store.drain"][1]), "contexts": []}
    if device is not None:
        arguments = [
            {"name": "x", "written": "same", "device": "cuda"},
            {"name": "out", "written": "never", "device": device},
        ]
        function["contexts"] = [
            {"entry": "default", "entry_name": "the default stream", "arguments": arguments, "tests": ["t.py::drain"]}
        ]
    observed = load_facts(write(tmp_path / "facts.json", [function])).for_module("app/comm.py", source)
    found = lint_source(source, "app/comm.py", observed=observed)
    assert [(finding.code, finding.line) for finding in found] == ([("CSL301", 7)] if reported else [])
    if reported:
        assert found[0].observed == (
            "observed in t.py::drain: `out` came as a pinned tensor never written on the device",
        )
