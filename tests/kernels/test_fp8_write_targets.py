"""The FP8 write's launch configuration per KernelTarget (fp8_write.launch_config).

NVIDIA (and the interpreter, NVIDIA-shaped) keep the H200-timed choices,
pinned here as they were before the configuration took a target; AMD
(gfx942, gfx950) takes ``config._launch_config_amd``, chosen from the compile
figures (lab/write_config_sweep.py). The AMD configurations are run under the
Triton interpreter on fresh random data against the float64 reference (the
checks of test_fp8_write._write_and_check): poisoned caches, NHD and 5D,
pages 16/32/64, e4m3fn and e4m3fnuz, float and tensor scales, T = 1, 37 and
a multi-run loc.
"""

from __future__ import annotations

import importlib
import itertools
import os

import pytest
import torch
import triton

os.environ.setdefault("TRITON_INTERPRET", "1")

from sglang_kv5d.kernels import fp8_reference as ref  # noqa: E402
from sglang_kv5d.kernels import fp8_write as fw  # noqa: E402
from sglang_kv5d.platform import INTERPRETER, known_target  # noqa: E402

from tests.kernels import test_fp8_write as base  # noqa: E402

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
SM90, GFX942, GFX950 = known_target("sm_90"), known_target("gfx942"), known_target("gfx950")
AMD = (GFX942, GFX950)


@pytest.fixture(scope="module", autouse=True)
def _interpreted_kernels():
    global fw
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") == "1":
        if type(fw.WRITE_KERNEL).__name__ != "InterpretedFunction":
            for module in (fw.quantize, fw.v_store, fw.kernel, fw.host):  # the Triton code, then its launcher
                importlib.reload(module)
            fw = importlib.reload(fw)
            base.fw = fw
    yield


def _cfg(block_t, hb, ds, warps, groups, token_major, v_spec, byte_tokens):
    return {"block_t": block_t, "heads_per_program": hb, "d_split": ds, "split_kv": True, "num_warps": warps,
            "groups": groups, "v_words": True, "parts": "kv", "maxnreg": None, "token_major": token_major,
            "v_spec": v_spec, "byte_tokens": byte_tokens}


# launch_config on sm_90 as it was before it took a target (commit 641ee09)
SM90_PINNED = [
    ((1, 1, 256, 256, True, True), _cfg(4, 1, 2, 4, False, False, False, 4)),
    ((2048, 2, 256, 256, True, True), _cfg(16, 1, 2, 4, False, False, False, 4)),
    ((32768, 1, 256, 256, True, True), _cfg(16, 1, 2, 4, True, True, False, 16)),
    ((8192, 8, 128, 128, True, True), _cfg(16, 2, 1, 4, True, True, True, 16)),
    ((32768, 8, 128, 128, False, True), _cfg(32, 4, 1, 4, False, False, False, 16)),
    ((16, 2, 256, 256, False, True), _cfg(4, 1, 1, 4, False, False, False, 16)),
    ((4096, 8, 128, 128, True, False), _cfg(16, 1, 1, 4, False, True, False, 16)),
]


@pytest.mark.parametrize("args,expected", SM90_PINNED, ids=lambda a: str(a))
def test_nvidia_and_interpreter_configurations_are_unchanged(args, expected):
    assert fw.launch_config(*args, SM90) == expected
    assert fw.launch_config(*args, INTERPRETER) == expected
    assert fw.config._launch_config_nvidia(*args) == expected


# (T, H, D, 5D) -> what the AMD rules give (block_t, heads, d_split, num_warps, byte_tokens)
AMD_PINNED = [
    ((1, 1, 256, True), (4, 1, 2, 1, 4)),  # decode: 4 tokens x 128 dims = 8 per lane, one wave
    ((37, 8, 128, True), (4, 1, 1, 1, 4)),
    ((2048, 2, 256, True), (16, 1, 2, 4, 4)),  # two V store paths: 8 per lane on 4 waves
    ((4096, 2, 256, True), (16, 1, 2, 2, 16)),  # 16 x 128 = 16 per lane on 2 waves
    ((32768, 1, 256, True), (16, 1, 2, 2, 16)),  # no group path (it spills SGPRs on AMD)
    ((32768, 8, 128, True), (16, 1, 1, 2, 16)),
    ((1, 8, 128, False), (4, 1, 1, 1, 16)),
    ((16, 1, 256, False), (4, 1, 1, 1, 16)),  # 4 x 256 = 16 per lane, one wave
    ((4096, 1, 256, False), (16, 1, 1, 4, 16)),  # 16 x 256 = 4096 elements
    ((32768, 2, 256, False), (8, 2, 1, 4, 16)),  # the H200's 32 x 512 needs 146 VGPRs
    ((32768, 8, 128, False), (8, 4, 1, 4, 16)),
]


@pytest.mark.parametrize("target", AMD, ids=lambda t: t.arch)
@pytest.mark.parametrize("shape,expected", AMD_PINNED, ids=lambda a: str(a))
def test_amd_configuration_is_the_amd_function(target, shape, expected):
    T, H, D, five = shape
    cfg = fw.launch_config(T, H, D, D, five, target.converts(FNUZ if target.arch == "gfx942" else FN), target)
    assert cfg == fw.config._launch_config_amd(T, H, D, D, five, True, target)
    got = (cfg["block_t"], cfg["heads_per_program"], cfg["d_split"], cfg["num_warps"], cfg["byte_tokens"])
    assert got == expected
    assert cfg["groups"] is False and cfg["v_spec"] is False and cfg["maxnreg"] is None


def test_every_amd_configuration_passes_the_check():
    """Every configuration the AMD function can return is valid for its shape,
    its tile holds at most 16 elements per lane of its waves, and decode
    windows stay 4 tokens."""
    for target, five, native in itertools.product(AMD, (True, False), (True, False)):
        for DK, DV in ((16, 16), (64, 64), (96, 320), (128, 128), (256, 256), (512, 512), (576, 512), (1024, 64)):
            if not five and DK == 1024:
                DK, DV = 40, 24
            for H in (1, 2, 3, 8, 16, 64):
                for T in (1, 16, 37, 100, 128, 129, 2048, 2049, 4096, 8192, 32768, 300000):
                    cfg = fw.launch_config(T, H, DK, DV, five, native, target)
                    checked = fw.config.check_config(dict(cfg), H, DK, DV, five)
                    assert checked["groups"] is False
                    tile = cfg["block_t"] * cfg["heads_per_program"] * (
                        triton.next_power_of_2(max(DK, DV)) // cfg["d_split"])
                    assert 1 <= cfg["num_warps"] <= 4
                    assert tile <= 16 * 64 * cfg["num_warps"] or cfg["num_warps"] == 4
                    if T <= 128:
                        assert cfg["block_t"] == 4
                    plan = fw.host._Plan(T, H, DK, DV, five, 64, 1 << 20, FN, None, None)
                    assert dict(fw.host._resolve_config(plan, None, native, target)) == checked


def test_default_config_cache_is_keyed_by_target():
    fw.config.default_config.cache_clear()
    a = fw.config.default_config(32768, 1, 256, 256, True, True, SM90)
    b = fw.config.default_config(32768, 1, 256, 256, True, True, GFX942)
    assert a["groups"] is True and b["groups"] is False
    assert fw.config.default_config(32768, 1, 256, 256, True, True, SM90) is a
    info = fw.config.default_config.cache_info()
    assert info.currsize == 2 and info.hits == 1


def test_overrides_apply_on_top_of_the_amd_configuration():
    plan = fw.host._Plan(32768, 1, 256, 256, True, 64, 1 << 20, FNUZ, None, None)
    cfg = fw.host._resolve_config(plan, {"block_t": 8}, True, GFX942)
    assert (cfg["block_t"], cfg["groups"], cfg["num_warps"]) == (8, False, 2)
    with pytest.raises(ValueError, match="heads_per_program"):
        fw.host._resolve_config(plan, {"heads_per_program": 3}, True, GFX950)


# --------------------------------------------------------------------------- #
# The AMD configurations write the right bytes (interpreter)                  #
# --------------------------------------------------------------------------- #

# T the configuration is chosen for: decode windows, the bytes path with
# decode lanes (<= 2048 tokens), the prefill bytes path (where NVIDIA takes
# the group path), NHD decode and prefill tiles.
CFG_T = {"5d": (1, 2048, 32768), "nhd": (1, 32768)}
RUNS = ("one", "decode37", "runs")  # T = 1, T = 37 scattered, a multi-run loc of 100 tokens


def _cases():
    out = []
    combos = itertools.cycle(itertools.product((FN, FNUZ), ("float", "tensor")))
    for target in AMD:
        for layout in ("5d", "nhd"):
            pages = (16, 32, 64) if layout == "5d" else (16,)
            geoms = ((1, 256), (2, 128)) if layout == "5d" else ((2, 256), (8, 128))
            for page, t_cfg, (H, D), run in itertools.product(pages, CFG_T[layout], geoms, RUNS):
                if layout == "5d" and run == "decode37" and page != 32:
                    continue  # keep the count down: every page still meets every other axis
                fp8, scale = next(combos)
                out.append((target.arch, layout, page, t_cfg, H, D, run, fp8, scale))
    return out


@pytest.mark.parametrize("arch,layout,page,t_cfg,H,D,run,fp8,scale", _cases(),
                         ids=lambda v: str(v).replace("torch.float8_", ""))
def test_amd_configurations_write_the_right_bytes(arch, layout, page, t_cfg, H, D, run, fp8, scale):
    """The configuration the AMD function picks for ``t_cfg`` tokens, on the
    AMD target's host path (flat byte-store offsets, 64-lane waves, the FMA
    division), run by the interpreter with the integer encoder (the hardware
    conversion itself needs an AMD GPU; the gate shows it is in the ISA)."""
    target = known_target(arch)
    cfg = fw.launch_config(t_cfg, H, D, D, layout == "5d", True, target)
    assert cfg == fw.config._launch_config_amd(t_cfg, H, D, D, layout == "5d", True, target)
    g = torch.Generator().manual_seed(hash((arch, layout, page, t_cfg, H, D, run, str(fp8), scale)) % (1 << 31))
    T = {"one": 1, "decode37": 37, "runs": 100}[run]
    n_blocks = 24
    k = ref.make_input(T, H, D, torch.bfloat16, gen=g, token_pad=16)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=g, token_pad=16)
    kc, vc = ref.make_caches(layout, n_blocks, page, H, D, D, gen=g)
    if run == "runs":
        # three runs (prefill chunks of three requests): unaligned starts,
        # page crossings, one run starting on a 16-slot group
        loc = torch.cat([torch.arange(8 * page + 5, 8 * page + 45), torch.arange(page + 3, page + 26),
                         torch.arange(16 * page + 16, 16 * page + 53)])
    else:
        loc = ref.loc_pattern("scattered", T, n_blocks * page, page, gen=g)
    ks, vs = (0.375, 1.625) if scale == "float" else (torch.tensor([0.375]), torch.tensor([1.625]))
    base._write_and_check(k, v, kc, vc, loc, ks, vs, fp8, layout, pass_dtype=fp8, _config=cfg,
                          _encoder="bits", _target=target)
