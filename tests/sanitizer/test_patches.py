"""The one patch-and-restore mechanism: what was there comes back exactly."""

from __future__ import annotations

import torch

from csan_lint.runtime.patches import Patches


class Base:
    def inherited(self) -> str:
        return "base"


class Child(Base):
    own = "own"


def test_restore_gives_back_own_inherited_and_absent_attributes():
    patches = Patches()
    patches.set(Child, "own", "patched")
    patches.set(Child, "inherited", lambda self: "patched")
    patches.set(Child, "absent", 1)
    assert (Child.own, Child().inherited(), Child.absent) == ("patched", "patched", 1)
    patches.restore()
    assert Child.own == "own"
    assert "inherited" not in vars(Child) and Child().inherited() == "base"
    assert not hasattr(Child, "absent")


def test_wrap_sees_the_original_and_skips_what_torch_lacks():
    patches = Patches()
    original = torch.Tensor.tolist
    patches.wrap(torch.Tensor, "tolist", lambda base: lambda self: ["wrapped", *base(self)])
    patches.wrap(torch.Tensor, "no_such_method_in_torch", lambda base: base)
    try:
        assert torch.tensor([1]).tolist() == ["wrapped", 1]
        assert not hasattr(torch.Tensor, "no_such_method_in_torch")
    finally:
        patches.restore()
    assert torch.Tensor.tolist is original


def test_a_restored_set_can_patch_again():
    patches = Patches()
    for value in ("first", "second"):
        patches.set(Child, "own", value)
        assert Child.own == value
        patches.restore()
        assert Child.own == "own"


def test_torchs_external_stream_constructor_is_wrapped_and_restored_exactly():
    """The sanitizer wraps `torch.cuda.ExternalStream.__new__` (a staticmethod) on a GPU."""
    constructor = vars(torch.cuda.ExternalStream)["__new__"]
    seen: list[tuple[object, ...]] = []

    def make(original):
        def wrapper(*args, **kwargs):
            seen.append(args)
            return original(*args, **kwargs)

        return wrapper

    patches = Patches()
    patches.wrap(torch.cuda.ExternalStream, "__new__", make)
    try:
        torch.cuda.ExternalStream(0x7F10)
    except (RuntimeError, TypeError, AssertionError):
        pass  # this CPU build cannot make a CUDA stream; the call reached torch's constructor
    patches.restore()
    assert seen == [(torch.cuda.ExternalStream, 0x7F10)]
    assert vars(torch.cuda.ExternalStream)["__new__"] is constructor


def test_on_restore_runs_in_reverse_order_with_the_attributes():
    patches = Patches()
    seen: list[object] = []
    patches.set(Child, "own", "patched")
    patches.on_restore(lambda: seen.append(Child.own))
    patches.set(Child, "own", "patched again")
    patches.restore()
    assert seen == ["patched"] and Child.own == "own"
