"""Models of code the linter cannot read (lint/models.py): a call of a modelled callable is
analysed as the stream API entry its model declares, and a malformed model is a located error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.model import Spellings
from csan_lint.lint.models import shipped_models
from csan_lint.lint.shell import cache
from csan_lint.lint.shell.config import ConfigError, load_config
from csan_lint.lint.shell.runner import lint_paths

_USER = """\
import torch
import ext


def enter(x: torch.Tensor, s):
    y = x * 2
    with ext.on_side(s):
        z = y + 1
    return z


def sync(x: torch.Tensor, side):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    ext.sync_all()
    return y + 1


def fresh(x: torch.Tensor):
    s = ext.new_stream()
    y = x * 2
    with s:
        z = y + 1
    return z


def event(side):
    e = ext.new_event()
    side.wait_event(e)


def drained(x: torch.Tensor):
    buf = torch.empty(4, pin_memory=True)
    buf.copy_(x, non_blocking=True)
    ext.wait_current()
    return buf.sum()
"""

_MODELS = """\
[[model]]
name = "ext.on_side"
enters-stream = true

[[model]]
name = "ext.sync_all"
synchronizes = "device"

[[model]]
name = "ext.new_stream"
returns = "stream"

[[model]]
name = "ext.new_event"
returns = "event"

[[model]]
name = "ext.wait_current"
synchronizes = "current-stream"
"""


def _lines(tmp_path: Path, pyproject: str) -> set[tuple[str, int]]:
    (tmp_path / "user.py").write_text(_USER)
    (tmp_path / "pyproject.toml").write_text(pyproject)
    return {(f.code, f.line) for f in lint_paths(["."], load_config(["."]), jobs=1).findings}


@pytest.fixture
def unmodelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, int]]:
    monkeypatch.chdir(tmp_path)
    return _lines(tmp_path, "[tool.csan-lint]\n")


def test_each_effect_changes_what_a_call_means(tmp_path: Path, unmodelled: set[tuple[str, int]]) -> None:
    (tmp_path / "csan-models.toml").write_text(_MODELS)
    modelled = _lines(tmp_path, '[tool.csan-lint]\nmodels = "csan-models.toml"\n')
    # enters-stream: the block runs on `s`, so `y`, written before it, is read unordered
    assert ("CSL101", 8) in modelled - unmodelled
    # synchronizes = "device": the side stream's `y` is done before the host goes on
    assert ("CSL102", 17) in unmodelled - modelled
    # returns = "stream": `with s:` enters the new stream
    assert {("CSL101", 24), ("CSL102", 25)} <= modelled - unmodelled
    # returns = "event": a new event waited before any record
    assert ("CSL401", 30) in modelled - unmodelled
    # synchronizes = "current-stream": the copy on the current stream is done before the host read
    assert ("CSL301", 37) in unmodelled - modelled


def test_models_in_pyproject_mean_the_same(tmp_path: Path, unmodelled: set[tuple[str, int]]) -> None:
    inline = _MODELS.replace("[[model]]", "[[tool.csan-lint.model]]")
    (tmp_path / "csan-models.toml").write_text(_MODELS)
    from_file = _lines(tmp_path, '[tool.csan-lint]\nmodels = "csan-models.toml"\n')
    assert _lines(tmp_path, "[tool.csan-lint]\n" + inline) == from_file != unmodelled


def test_a_model_is_matched_as_imported_or_by_its_last_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.csan-lint]\n[[tool.csan-lint.model]]\nname = "pkg.ext.on_side"\nenters-stream = true\n'
    )
    body = "\n\ndef f(x: torch.Tensor, s):\n    y = x * 2\n    with {call}(s):\n        return y + 1\n"
    (tmp_path / "aliased.py").write_text(
        "import torch\nfrom pkg.ext import on_side as enter\n" + body.format(call="enter")
    )
    (tmp_path / "relative.py").write_text("import torch\nfrom .ext import on_side\n" + body.format(call="on_side"))
    (tmp_path / "other.py").write_text("import torch\nfrom other import on_side\n" + body.format(call="on_side"))
    found = {(Path(f.path).name, f.code, f.line) for f in lint_paths(["."], load_config(["."]), jobs=1).findings}
    assert {(name, code, line) for name, code, line in found if code == "CSL101"} == {
        ("aliased.py", "CSL101", 8),
        ("relative.py", "CSL101", 8),
    }


def test_the_cache_key_includes_the_models_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.csan-lint]\nmodels = "m.toml"\n')
    (tmp_path / "m.toml").write_text('[[model]]\nname = "ext.f"\nsynchronizes = "device"\n')
    first = cache.settings_key(load_config(["."]))
    (tmp_path / "m.toml").write_text('[[model]]\nname = "ext.f"\nsynchronizes = "current-stream"\n')
    assert cache.settings_key(load_config(["."])) != first


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (
            '[[model]]\nname = "ext.f"\nsynchronises = "device"\n',
            "m.toml: model[0]: unknown key `synchronises`; did you mean `synchronizes`?",
        ),
        (
            '[[model]]\nname = "ext.f"\nreturns = "stream"\n[[model]]\nname = "ext.g"\nreturns = "steam"\n',
            'm.toml: model[1]: `returns`: expected "stream" or "current-stream" or "event", got "steam"; '
            "did you mean `stream`?",
        ),
        (
            '[[model]]\nname = "ext.f"\nenters-stream = "arg:0"\n',
            'model[0]: `enters-stream`: expected true, got "arg:0"',
        ),
        ('[[model]]\nname = "ext.f"\nsynchronizes = 1\n', "model[0]: `synchronizes`: expected"),
        ('[[model]]\nname = "ext.f()"\nreturns = "event"\n', "model[0]: `name`: expected a dotted name"),
        (
            '[[model]]\nreturns = "event"\n',
            "model[0]: `name`: expected a dotted name like `pkg.module.function`, got None",
        ),
        (
            '[[model]]\nname = "ext.f"\n',
            "model[0]: expected one effect (enters-stream, returns, synchronizes, launches), got none",
        ),
        (
            '[[model]]\nname = "ext.f"\nreturns = "event"\nsynchronizes = "device"\n',
            "model[0]: expected one effect (enters-stream, returns, synchronizes, launches), "
            "got `returns`, `synchronizes`",
        ),
        ('[[models]]\nname = "ext.f"\n', "m.toml: unknown key `models`; did you mean `model`?"),
        ('model = "ext.f"\n', "m.toml: model: expected an array of tables"),
        ("[[model]\n", "m.toml: invalid TOML"),
    ],
)
def test_a_malformed_models_file_is_a_located_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.csan-lint]\nmodels = "m.toml"\n')
    (tmp_path / "m.toml").write_text(models)
    with pytest.raises(ConfigError) as error:
        load_config(["."])
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('models = ["m.toml"]\n', "pyproject.toml [tool.csan-lint]: models: expected the path of a models file"),
        ('models = "missing.toml"\n', "missing.toml: cannot read the models file"),
        (
            '[[tool.csan-lint.model]]\nname = "ext.f"\nreturn = "event"\n',
            "pyproject.toml [tool.csan-lint]: model[0]: unknown key `return`; did you mean `returns`?",
        ),
    ],
)
def test_a_malformed_model_in_pyproject_is_a_located_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("[tool.csan-lint]\n" + table))
    with pytest.raises(ConfigError) as error:
        load_config(["."])
    assert message in str(error.value)


_COLLECTIVE = """\
import torch
import deepspeed.comm as dist


def reduce(x: torch.Tensor, side):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        dist.all_reduce(x)
    return x + 1


def waited(x: torch.Tensor, side):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        work = dist.all_reduce(x, async_op=True)
    work.wait()
    return x + 1
"""


def test_shipped_models_launch_deepspeeds_collectives_in_place() -> None:
    """`launches = "in-place"`: the collective writes `x` on the side stream, so the read after
    the block needs a join; with `async_op=True`, waiting on its handle is that join."""
    assert [(f.code, f.line) for f in lint_source(_COLLECTIVE, "m.py")] == [("CSL102", 9)]
    assert dict(shipped_models())["deepspeed.comm.all_reduce"] == "torch.distributed.all_reduce"
    assert all(name.startswith("deepspeed.comm.") for name, _ in shipped_models())


def test_a_project_model_replaces_a_shipped_one() -> None:
    spellings = Spellings(models=(("deepspeed.comm.all_reduce", "torch.cuda.synchronize"),))
    assert lint_source(_COLLECTIVE, "m.py", spellings=spellings) == []


def test_a_shipped_model_is_matched_only_as_imported() -> None:
    """A library's callable, unlike a project's own: a relatively imported `all_reduce` of the
    project's is not DeepSpeed's."""
    relative = _COLLECTIVE.replace("import deepspeed.comm as dist", "from .comm import all_reduce")
    assert lint_source(relative.replace("dist.all_reduce", "all_reduce"), "m.py") == []
    aliased = _COLLECTIVE.replace("import deepspeed.comm as dist", "from deepspeed import comm as dist")
    assert [(f.code, f.line) for f in lint_source(aliased, "m.py")] == [("CSL102", 9)]
