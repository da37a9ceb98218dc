"""``kernels.aot.compiling_for``: one arch per process, and Triton's own
per-tensor choice of the 32-bit pointer-range attribute (AMD buffer ops) on
meta tensors, caches under and over 2 GiB.

Compiles run in a child interpreter without TRITON_INTERPRET (tests/conftest.py
turns the CPU interpreter on here, and a process that imported Triton that
way cannot compile).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.subproc import ROOT, clean_env

pytestmark = [pytest.mark.sglang_independent]


def _child(code: str, timeout: float = 900):
    env = clean_env()
    env.pop("TRITON_INTERPRET", None)
    env["TRITON_CACHE_DIR"] = os.path.join(ROOT, ".cache", "triton-cache")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)


_MIX = r"""
import json
from sglang_kv5d.kernels.aot import ArchMixError, compiling_for
from sglang_kv5d.platform import known_target
out = {}
with compiling_for(known_target("gfx942")):
    pass
with compiling_for(known_target("gfx942")):  # the same arch again: fine
    pass
for arch in ("gfx950", "sm_90"):
    try:
        with compiling_for(known_target(arch)):
            out[arch] = "entered"
    except ArchMixError as exc:
        out[arch] = str(exc)
print(json.dumps(out))
"""


def test_compiling_for_refuses_a_second_arch_in_one_process():
    """Triton 3.5.1 / 3.6.0 drop gfx950's hardware FP8 conversion after a gfx942
    compile in the same process: a second arch is refused, naming the command
    that compiles it in its own process (kernel_report and doctor start one
    process per arch, and every compile goes through compiling_for)."""
    proc = _child(_MIX, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for arch in ("gfx950", "sm_90"):
        assert "already compiled for gfx942" in out[arch] and f"--arch {arch}" in out[arch], out


_RANGE = r"""
import json, sys, torch
from sglang_kv5d.kernels.aot import compiling_for
from sglang_kv5d.platform import known_target
from sglang_kv5d.kernels.fp8_write import write_kv_fp8
from sglang_kv5d.kernels.attention_5d import decode_attention_5d

t = known_target("gfx942")
m = lambda *s, dtype: torch.empty(*s, dtype=dtype, device="meta")
out = []
for bufops in (True, False):
    for blocks in (1024, 2**31 // (64 * 256) + 1):  # K / V caches of 16 MiB, and of 2 GiB + 16 KiB
        k, v = m(16, 1, 256, dtype=torch.bfloat16), m(16, 1, 256, dtype=torch.bfloat16)
        kc, vc = m(blocks, 1, 16, 64, 16, dtype=torch.uint8), m(blocks, 1, 4, 256, 16, dtype=torch.uint8)
        loc, sc = m(16, dtype=torch.int64), m(1, dtype=torch.float32)
        with compiling_for(t, buffer_ops=bufops) as launches:
            write_kv_fp8(k, v, kc, vc, loc, 0.5, 0.5, fp8_dtype=torch.float8_e4m3fnuz, _target=t)
            q = m(256, 4, 256, dtype=torch.bfloat16)
            bt, ctx = m(256, 64, dtype=torch.int32), m(256, dtype=torch.int64)
            decode_attention_5d(q, kc.view(torch.float8_e4m3fnuz), vc.view(torch.float8_e4m3fnuz), bt, ctx,
                                sm_scale=0.0625, k_scale=sc, v_scale=sc, _target=t)
        for l in launches:
            out.append(dict(bufops=bufops, big=blocks > 1024, bytes=kc.untyped_storage().size(), name=l.name,
                            ranged=l.pointer_range, large=l.constexprs.get("LARGE"),
                            block_t=l.constexprs.get("BLOCK_T"), warps=l.options.get("num_warps")))
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_stand_in_reproduces_the_jits_pointer_range_choice_per_tensor():
    """Caches whose storage exceeds 2**31 - 1 bytes lose the pointer-range
    attribute (no buffer ops on them) while the launch's small tensors keep it,
    as Triton's ROCm JIT decides per tensor at run time; with buffer ops off
    no tensor has it. The write switches to 64-bit offsets over 2 GiB; the
    launch's constexprs and options are recorded."""
    proc = _child(_RANGE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    by = {(r["bufops"], r["big"], r["name"]): r for r in rows}
    assert by[(True, True, "_write_kv_fp8_kernel")]["bytes"] > 2**31 - 1 >= by[(True, False, "_write_kv_fp8_kernel")]["bytes"]
    caches = {"_write_kv_fp8_kernel": {"kc_ptr", "vc_ptr"}, "_decode_5d_kernel": {"K", "V"}}
    small = {"_write_kv_fp8_kernel": {"k_ptr", "v_ptr", "loc_ptr"}, "_decode_5d_kernel": {"Q", "BT", "CTX", "OUT"}}
    for name in caches:
        assert caches[name] | small[name] <= set(by[(True, False, name)]["ranged"]), by[(True, False, name)]
        big = set(by[(True, True, name)]["ranged"])
        assert small[name] <= big and not caches[name] & big, by[(True, True, name)]
        assert by[(False, False, name)]["ranged"] == [] and by[(False, True, name)]["ranged"] == []
    assert by[(True, True, "_write_kv_fp8_kernel")]["large"] is True
    assert by[(True, False, "_write_kv_fp8_kernel")]["large"] is False
    assert all(isinstance(r["warps"], int) for r in rows)
    assert isinstance(by[(True, False, "_write_kv_fp8_kernel")]["block_t"], int)
