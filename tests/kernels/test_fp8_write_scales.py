"""Float scales the fused FP8 write refuses before writing (CPU interpreter).

The kernel divides through the float32 reciprocal of the scale: a scale that
is subnormal in float32 (flushed to zero on GPUs, reciprocal overflows) or
whose float32 reciprocal is not a normal number must raise ValueError naming
the argument, with the caches and inputs unchanged. Before the check, 1e-40
reached the kernel and failed there with Triton's InterpreterError.
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from sglang_kv5d.kernels import fp8_reference as ref  # noqa: E402
from sglang_kv5d.kernels import fp8_write as fw  # noqa: E402

FN = torch.float8_e4m3fn
TINY = 2.0 ** -126  # smallest normal float32


@pytest.fixture(scope="module", autouse=True)
def _interpreted_kernels():
    global fw
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") == "1":
        if type(fw.WRITE_KERNEL).__name__ != "InterpretedFunction":
            for module in (fw.quantize, fw.v_store, fw.kernel, fw.host):  # the Triton code, then its launcher
                importlib.reload(module)
            fw = importlib.reload(fw)
    yield


def _args(layout="5d"):
    g = torch.Generator().manual_seed(7)
    T, H, D, page, nb = 4, 1, 32, 16, 1
    k = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    kc, vc = ref.make_caches(layout, nb, page, H, D, D, gen=g, typed=FN)  # poisoned with random bytes
    return dict(k=k, v=v, k_cache=kc, v_cache=vc, loc=torch.arange(T), k_scale=1.0, v_scale=1.0)


REFUSED = [
    ("k_scale", 1e-40, "subnormal"),          # float32 subnormal (the case)
    ("v_scale", TINY / 2, "subnormal"),       # exactly representable subnormal
    ("k_scale", TINY - 2.0 ** -149, "subnormal"),  # the largest float32 subnormal
    ("v_scale", 2.0 ** 127, "too large"),      # reciprocal 2**-127 is subnormal
    ("k_scale", 3e38, "too large"),
]


@pytest.mark.parametrize("layout", ["5d", "nhd"])
@pytest.mark.parametrize("name,value,word", REFUSED, ids=[f"{n}={v!r}" for n, v, _ in REFUSED])
def test_refused_before_anything_is_written(layout, name, value, word):
    a = _args(layout)
    a[name] = value
    snap = {n: ref.bits(t).clone() for n, t in a.items() if isinstance(t, torch.Tensor)}
    with pytest.raises(ValueError) as info:
        fw.write_kv_fp8(**a)
    msg = str(info.value)
    assert msg.startswith(f"{name}:") and word in msg and "normal float32" in msg, msg
    for n, b in snap.items():
        assert torch.equal(ref.bits(a[n]), b), f"{n} changed although the call was refused"


@pytest.mark.parametrize("value", [TINY, 2.0 ** 126, 1e-30, 1e30])
def test_edges_of_the_accepted_range_write(value):
    """The smallest normal scale and the largest one with a normal reciprocal are taken."""
    a = _args("5d")
    a["k_scale"] = value
    kc0, vc0 = a["k_cache"].view(torch.uint8).clone(), a["v_cache"].view(torch.uint8).clone()
    fw.write_kv_fp8(**a)
    ek, ev = ref.reference_write_kv_fp8(a["k"], a["v"], kc0, vc0, a["loc"], value, 1.0, fp8_dtype=FN, mode="fp32")
    assert torch.equal(a["k_cache"].view(torch.uint8), ek)
    assert torch.equal(a["v_cache"].view(torch.uint8), ev)
