"""One rule for the FP8 write's scales, floats and tensors alike, on every
device (issue 26, item 2). CPU, Triton interpreter; tests/gpu/test_hostile_metadata.py
runs the same cases on a GPU, where a tensor scale of 0, inf or 1e-40 used to
turn every byte into NaN and -1 / -0.5 changed every byte.

The rule (``fp8_write.scale_problem``): the float32 scale and its float32
reciprocal are positive normal numbers. Anything else raises ``ScaleError``
(a ValueError) naming the argument and the value, before a byte is written.
A tensor's value is read on the host once per tensor and version, never per
call; through the fp8-kv-write patch a refused tensor scale goes to SGLang's
own write with one warning, as a refused float always did.
"""

from __future__ import annotations

import math
import types

import pytest
import torch

from sglang_kv5d.kernels import fp8_write
from sglang_kv5d.kernels.fp8_reference import reference_write_kv_fp8

FN = torch.float8_e4m3fn
T, H, D, NB, PAGE = 8, 2, 32, 2, 16

# (value, why): every kind of refused scale
REFUSED = [
    (0.0, "positive finite"), (-0.0, "positive finite"), (-1.0, "positive finite"), (-0.5, "positive finite"),
    (math.inf, "positive finite"), (-math.inf, "positive finite"), (math.nan, "positive finite"),
    (1e-40, "subnormal"), (2.0 ** -127, "subnormal"), (3e38, "too large"), (2.0 ** 127, "too large"),
]


def _case(layout, gen):
    k = (torch.randn(T, H, D, generator=gen) * 3).to(torch.bfloat16)
    v = (torch.randn(T, H, D, generator=gen) * 3).to(torch.bfloat16)
    if layout == "5d":
        kc = torch.randint(0, 256, (NB, H, D // 16, PAGE, 16), generator=gen, dtype=torch.uint8)
        vc = torch.randint(0, 256, (NB, H, PAGE // 16, D, 16), generator=gen, dtype=torch.uint8)
    else:
        kc = torch.randint(0, 256, (NB * PAGE, H, D), generator=gen, dtype=torch.uint8)
        vc = torch.randint(0, 256, (NB * PAGE, H, D), generator=gen, dtype=torch.uint8)
    loc = torch.randperm(NB * PAGE, generator=gen)[:T]
    return k, v, kc, vc, loc


@pytest.fixture(autouse=True)
def _fresh_checks():
    fp8_write.host._CHECKED_SCALES.clear()
    yield
    fp8_write.host._CHECKED_SCALES.clear()


@pytest.mark.parametrize("layout", ["5d", "nhd"])
@pytest.mark.parametrize("which", ["k_scale", "v_scale"])
@pytest.mark.parametrize("value,why", REFUSED, ids=[repr(v) for v, _ in REFUSED])
def test_a_refused_tensor_scale_raises_and_writes_nothing(layout, which, value, why):
    gen = torch.Generator().manual_seed(1)
    k, v, kc, vc, loc = _case(layout, gen)
    kc0, vc0 = kc.clone(), vc.clone()
    scales = {"k_scale": torch.tensor([0.5]), "v_scale": torch.tensor([2.0])}
    scales[which] = torch.tensor([value], dtype=torch.float32)
    with pytest.raises(fp8_write.ScaleError, match=rf"^{which}: the scale tensor holds .*{why}"):
        fp8_write.write_kv_fp8(k, v, kc, vc, loc, scales["k_scale"], scales["v_scale"], fp8_dtype=FN)
    assert torch.equal(kc, kc0) and torch.equal(vc, vc0), "a refused scale wrote bytes"


@pytest.mark.parametrize("value,why", REFUSED, ids=[repr(v) for v, _ in REFUSED])
def test_floats_obey_the_same_rule(value, why):
    gen = torch.Generator().manual_seed(2)
    k, v, kc, vc, loc = _case("5d", gen)
    with pytest.raises(fp8_write.ScaleError, match=why):
        fp8_write.write_kv_fp8(k, v, kc, vc, loc, value, 1.0, fp8_dtype=FN)


@pytest.mark.parametrize("value", [2.0 ** -126, 1e-30, 0.37, 3.0, 2.0 ** 126], ids=repr)
@pytest.mark.parametrize("layout", ["5d", "nhd"])
def test_taken_tensor_scales_match_torch_bit_for_bit(layout, value):
    """The edges of the rule are taken, and the bytes are torch's own
    ``clamp(x.float() / s, -max, max).to(fp8)`` (both scales as tensors)."""
    gen = torch.Generator().manual_seed(3)
    k, v, kc, vc, loc = _case(layout, gen)
    ks = torch.tensor([value], dtype=torch.float32)
    vs = torch.tensor([value * 0.5 if value > 2.0 ** -125 else value], dtype=torch.float32)
    ek, ev = reference_write_kv_fp8(k, v, kc, vc, loc, ks, vs, fp8_dtype=FN, mode="fp32")
    fp8_write.write_kv_fp8(k, v, kc, vc, loc, ks, vs, fp8_dtype=FN)
    assert torch.equal(kc, ek) and torch.equal(vc, ev)


def test_a_tensor_is_read_once_per_version(monkeypatch):
    """No device sync per call: the value is read when the tensor is first seen
    (a fresh ``reshape(1)`` view of the same parameter counts as the parameter)
    and again only after an in-place change, which is checked at the next call."""
    reads = []
    real = fp8_write.host._read_scale
    monkeypatch.setattr(fp8_write.host, "_read_scale", lambda t: reads.append(1) or real(t))
    gen = torch.Generator().manual_seed(4)
    k, v, kc, vc, loc = _case("5d", gen)
    ks = torch.nn.Parameter(torch.tensor(0.5), requires_grad=False)  # a layer's k_scale: 0-d
    vs = torch.tensor([2.0])
    for _ in range(3):
        fp8_write.write_kv_fp8(k, v, kc, vc, loc, ks.reshape(1), vs, fp8_dtype=FN)
    assert len(reads) == 2, "one read per scale tensor, not per call"
    with torch.no_grad():
        ks.copy_(torch.tensor(0.25))  # e.g. the loader's copy_ of the checkpoint's scale
    fp8_write.write_kv_fp8(k, v, kc, vc, loc, ks.reshape(1), vs, fp8_dtype=FN)
    assert len(reads) == 3, "an in-place change is read again"
    kc0 = kc.clone()
    with torch.no_grad():
        ks.fill_(0.0)
    with pytest.raises(fp8_write.ScaleError, match="k_scale: the scale tensor holds 0.0"):
        fp8_write.write_kv_fp8(k, v, kc, vc, loc, ks.reshape(1), vs, fp8_dtype=FN)
    assert torch.equal(kc, kc0)


def test_two_scales_viewed_out_of_one_tensor_are_read_once_each(monkeypatch):
    reads = []
    real = fp8_write.host._read_scale
    monkeypatch.setattr(fp8_write.host, "_read_scale", lambda t: reads.append(1) or real(t))
    gen = torch.Generator().manual_seed(6)
    k, v, kc, vc, loc = _case("nhd", gen)
    both = torch.tensor([0.5, 2.0])  # k and v scales in one tensor (e.g. a fused checkpoint entry)
    for _ in range(3):
        fp8_write.write_kv_fp8(k, v, kc, vc, loc, both[0:1], both[1:2], fp8_dtype=FN)
    assert len(reads) == 2


def test_a_dead_tensor_leaves_no_entry():
    gen = torch.Generator().manual_seed(5)
    k, v, kc, vc, loc = _case("nhd", gen)
    fp8_write.write_kv_fp8(k, v, kc, vc, loc, torch.tensor([0.5]), torch.tensor([2.0]), fp8_dtype=FN)
    assert not fp8_write.host._CHECKED_SCALES, "entries of freed scale tensors must go"


# --------------------------------------------------------------------------- through the patch, real SGLang pools


@pytest.fixture
def overlay():
    import sglang_kv5d
    from sglang_kv5d import kernel_check

    kernel_check.reset()
    st = sglang_kv5d.activate(patches=["fp8-kv-write"], strict=False)
    assert st.patch("fp8-kv-write").state in ("applied", "pending"), st
    yield
    sglang_kv5d.deactivate()
    kernel_check.reset()


@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, 1e-40], ids=repr)
@pytest.mark.parametrize("five_d", [True, False], ids=["5d", "nhd"])
@pytest.mark.parametrize("as_tensor", [True, False], ids=["tensor", "float"])
def test_the_patch_refuses_a_bad_scale_naming_the_layer(monkeypatch, overlay, caplog, value, five_d, as_tensor):
    """A refused scale (tensor or float) stops the write with ScaleError naming
    the layer: the fused kernel does not launch (on the GPU it turned every
    byte into NaN), SGLang's write is not called either (it would divide by
    the same scale and poison the cache), the cache and the inputs are
    untouched, and the kernel is not marked as failed."""
    from tests.helpers.pools import enable_5d, make_mha_pool

    if five_d:
        enable_5d(monkeypatch)
    pool = make_mha_pool(dtype=FN, page_size=16, head_num=1, head_dim=64, layer_num=2, size=64)
    launches = []
    real = fp8_write.WRITE_KERNEL

    class Counting:
        def __getitem__(self, grid):
            launches.append(grid)
            return real[grid]

    monkeypatch.setattr(fp8_write.host, "WRITE_KERNEL", Counting())
    for buf in (pool.k_buffer[1], pool.v_buffer[1]):
        buf.view(torch.uint8).fill_(0x5A)
    k = torch.randn(4, 1, 64).to(torch.bfloat16)
    k0 = k.clone()
    scale = torch.nn.Parameter(torch.tensor(value), requires_grad=False) if as_tensor else value
    with pytest.raises(fp8_write.ScaleError, match=r"fp8-kv-write: layer 1: k_scale: .*nothing was written"):
        pool.set_kv_buffer(types.SimpleNamespace(layer_id=1), torch.tensor([0, 1, 2, 3]), k, k.clone(),
                           scale, torch.tensor([1.0]))
    assert launches == [], "the fused kernel ran with a refused scale"
    assert torch.equal(k, k0), "the caller's k was changed"
    for buf in (pool.k_buffer[1], pool.v_buffer[1]):
        assert bool((buf.view(torch.uint8) == 0x5A).all()), "a refused scale wrote into the cache"
    from sglang_kv5d import kernel_check

    assert kernel_check.failures() == {}, "a refused scale is not a kernel failure"
    pool.set_kv_buffer(types.SimpleNamespace(layer_id=1), torch.tensor([0, 1, 2, 3]), k, k.clone(), 1.0, 1.0)
    assert len(launches) == 1, "a good scale afterwards takes the fused kernel"


def test_the_patch_reads_a_layers_scale_once(monkeypatch, overlay):
    from tests.helpers.pools import enable_5d, make_mha_pool

    enable_5d(monkeypatch)
    reads = []
    real = fp8_write.host._read_scale
    monkeypatch.setattr(fp8_write.host, "_read_scale", lambda t: reads.append(1) or real(t))
    pool = make_mha_pool(dtype=FN, page_size=16, head_num=1, head_dim=64, layer_num=1, size=64)
    ks = torch.nn.Parameter(torch.tensor(0.5), requires_grad=False)
    vs = torch.nn.Parameter(torch.tensor(2.0), requires_grad=False)
    reads.clear()
    for step in range(4):
        k = torch.randn(2, 1, 64).to(torch.bfloat16)
        pool.set_kv_buffer(types.SimpleNamespace(layer_id=0), torch.tensor([2 * step, 2 * step + 1]), k, k.clone(),
                           ks, vs)
    assert len(reads) == 2, f"expected one read per scale parameter, got {len(reads)}"
