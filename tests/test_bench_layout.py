"""CPU tests of ``sglang-kv5d bench --what layout`` (the "5D or NHD?" verdict).

* geometry: from a Qwen3.5-like config.json (text_config, head_dim 256, three
  linear-attention layers per full one) and from the command line; hostile
  configs and impossible geometries refused with the field named;
* the verdict arithmetic and the report, from synthetic timings;
* the CLI: ``--what layout`` without a GPU exits 2 with the reason (a real
  subprocess), bad options exit 2 before anything is imported or measured;
* the ROCm wiring with the fake aiter (strict: keyword-only): every aiter
  contender reaches the fake with names of aiter's real signatures, the ones
  the fake computes give the float64 answer, the others are named cells.
"""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from sglang_kv5d.bench import layout_calls, layout_report
from sglang_kv5d.bench.layout_cases import (
    MAX_CONFIG_BYTES, Geometry, GeometryError, build_case, geometry_from_config, parse_ints, parse_prefill, validate,
)
from sglang_kv5d.cli.bench import bench as bench_cmd
from tests.helpers.cli import run_cli
from tests.helpers.fake_aiter import fake_aiter  # noqa: F401  (fixture)


def _qwen35(**text_over):
    """A Qwen3.5-like config: multimodal top level, the language model in text_config."""
    layers = 48
    text = dict(
        model_type="qwen3_5_moe_text", num_attention_heads=32, num_key_value_heads=2, head_dim=256, hidden_size=4096,
        num_hidden_layers=layers, full_attention_interval=4,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
    )
    text.update(text_over)
    return {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
            "text_config": {k: v for k, v in text.items() if v is not None}}


def _model(tmp_path, cfg, name="m"):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return str(d)


# ---------------------------------------------------------------- geometry


def test_geometry_from_a_qwen35_config(tmp_path):
    g = geometry_from_config(_model(tmp_path, _qwen35()), tp=8, page=64)
    assert (g.heads, g.kv_heads, g.head_dim, g.layers, g.attention_layers) == (32, 2, 256, 48, 12)
    assert (g.h_q, g.h_kv) == (4, 1)  # TP8: 4 query heads, the 2 KV heads replicated to 1 per rank
    g2 = geometry_from_config(_model(tmp_path, _qwen35(layer_types=None), "n"), tp=2)
    assert (g2.attention_layers, g2.h_q, g2.h_kv) == (12, 16, 1)  # from full_attention_interval
    llama = {"num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, "num_hidden_layers": 32}
    g3 = geometry_from_config(_model(tmp_path, llama, "l"), tp=1)
    assert (g3.head_dim, g3.attention_layers, g3.h_kv) == (128, 32, 8)


@pytest.mark.parametrize("cfg, field", [
    ("{not json", "not a valid JSON config"),
    ('{"num_attention_heads": NaN}', "not a valid JSON config"),
    ('{"a": 1, "a": 2}', "duplicate key"),
    ("[1, 2]", "top level must be a JSON object"),
    (_qwen35(num_attention_heads="32"), "num_attention_heads"),
    (_qwen35(num_attention_heads=True), "num_attention_heads"),
    (_qwen35(num_attention_heads=10 ** 9), "num_attention_heads"),
    (_qwen35(num_key_value_heads=-2), "num_key_value_heads"),
    (_qwen35(num_key_value_heads=3), "not a multiple of kv_heads=3"),
    (_qwen35(head_dim=200), "head_dim=200 is not a multiple of 16"),
    (_qwen35(head_dim=None, hidden_size=None), "hidden_size"),
    (_qwen35(num_hidden_layers=0), "num_hidden_layers"),
    (_qwen35(layer_types=["full_attention"] * 3), "layer_types must be a list of 48"),
    (_qwen35(layer_types=["linear_attention"] * 48), "names no attention layer"),
    (_qwen35(layer_types=None, full_attention_interval=0), "full_attention_interval"),
])
def test_hostile_configs_are_refused_with_the_field_named(tmp_path, cfg, field):
    with pytest.raises(GeometryError) as exc:
        geometry_from_config(_model(tmp_path, cfg), tp=8)
    assert field in str(exc.value)


def test_config_that_is_too_big_a_directory_or_missing(tmp_path):
    big = _model(tmp_path, " " * (MAX_CONFIG_BYTES + 1) + "{}")
    with pytest.raises(GeometryError, match="over the .*-byte limit"):
        geometry_from_config(big)
    d = tmp_path / "dir"
    (d / "config.json").mkdir(parents=True)
    with pytest.raises(GeometryError, match="not a regular file"):
        geometry_from_config(str(d))
    with pytest.raises(GeometryError, match="no readable config.json"):
        geometry_from_config(str(tmp_path / "nowhere"))


@pytest.mark.parametrize("geom, kv, msg", [
    (Geometry(32, 8, 128, tp=3), ("fp8",), "not divisible by --tp 3"),
    (Geometry(48, 6, 128, tp=4), ("fp8",), "kv_heads=6 and --tp 4"),
    (Geometry(32, 8, 128, page=24), ("fp8",), "--page-size 24 is not divisible by X=16"),
    (Geometry(32, 8, 128, page=12), ("bf16",), "--page-size 12 is not divisible by X=8"),
    (Geometry(32, 8, 100), ("bf16",), "head_dim=100"),
    (Geometry(32, 8, 128, tp=0), ("fp8",), "tp"),
])
def test_impossible_geometries_are_refused(geom, kv, msg):
    with pytest.raises(GeometryError, match=msg):
        validate(geom, kv)


def test_page_16_and_replicated_kv_heads_are_accepted():
    g = validate(Geometry(16, 2, 256, tp=4, page=16), ("fp8", "bf16"))
    assert (g.h_q, g.h_kv) == (4, 1)
    assert validate(Geometry(32, 8, 128, page=8), ("bf16",)).page == 8


def test_shape_lists_parse_and_refuse_junk():
    assert parse_ints("1, 32,128", "--batches") == (1, 32, 128)
    assert parse_prefill("1x4096+0,4x1024+8192,2x64") == ((1, 4096, 0), (4, 1024, 8192), (2, 64, 0))
    for bad in ("1,-2", "1e3", "", "1," * 20 + "1"):
        with pytest.raises(GeometryError, match="--batches"):
            parse_ints(bad, "--batches")
    for bad in ("4096", "1x+0", "ax1+2"):
        with pytest.raises(GeometryError, match="REQUESTSxNEW\\+PREFIX"):
            parse_prefill(bad)


def test_case_holds_the_same_kv_in_both_layouts():
    g = Geometry(4, 1, 64, page=16)
    c = build_case(g, 2, 40, 3, "bf16", "cpu")
    assert c["q"].shape == (6, 4, 64) and c["new_slots"].shape == (6,) and c["slots"].shape == (86,)
    s = int(c["slots"][41])  # request 0, token 41 (a new token)
    blk, off = divmod(s, 16)
    k5 = c["k5"][blk, 0, :, off, :].reshape(-1)  # (D/X, X) -> D
    v5 = c["v5"][blk, 0, off // 8, :, off % 8]
    assert torch.equal(c["k_nhd"][s, 0], k5) and torch.equal(c["v_nhd"][s, 0], v5)
    assert int(c["new_slots"][0]) == int(c["slots"][40]) and c["kv_lens"].tolist() == [43, 43]


# ---------------------------------------------------------- verdict, report


def _cells(nhd_w, nhd_a, d5_w, d5_a, extra=()):
    cells = [dict(layout="nhd", part="write", name="sglang_flash", us=nhd_w),
             dict(layout="nhd", part="attn", name="sglang_triton", us=nhd_a, splits=4),
             dict(layout="5d", part="write", name="kv5d_fused", us=d5_w),
             dict(layout="5d", part="attn", name="kv5d_portable", us=d5_a)]
    return [c for c in cells if c["us"] is not None] + list(extra)


def test_verdict_arithmetic():
    v = layout_report.verdict("decode", "fp8 bs 32 ctx 4096", _cells(10.0, 90.0, 8.0, 72.0), attention_layers=12)
    assert v["ratio_5d_to_nhd"] == pytest.approx(0.8)
    assert "5D is 20% faster per decode layer here" in v["line"]
    assert "5D 80.0 us = kv5d_fused + kv5d_portable; NHD 100.0 us = sglang_flash + sglang_triton" in v["line"]
    assert "x 12 attention layers: 5D 0.96 ms, NHD 1.20 ms per step" in v["line"]
    slow = layout_report.verdict("prefill", "x", _cells(10.0, 90.0, 25.0, 100.0))
    assert "5D is 25% slower per prefill layer here" in slow["line"] and slow["ratio_5d_to_nhd"] == 1.25
    even = layout_report.verdict("decode", "x", _cells(10.0, 90.0, 10.0, 91.0))
    assert "within 2% (noise)" in even["line"]
    # the fastest contender of a part counts
    more = _cells(10.0, 90.0, 8.0, 72.0, [dict(layout="nhd", part="attn", name="aiter_unified", us=50.0)])
    assert layout_report.layer(more)["nhd"]["attn"]["name"] == "aiter_unified"
    assert "5D is 33% slower" in layout_report.verdict("decode", "x", more)["line"]


def test_no_verdict_names_what_did_not_run():
    why = "unavailable: not ROCm (aiter runs on AMD GPUs only)"
    cells = _cells(10.0, None, 8.0, 50.0, [dict(layout="nhd", part="attn", name="aiter_prefill", note=why)])
    v = layout_report.verdict("prefill", "fp8 1 x 4096 new + 0 cached", cells)
    assert v["ratio_5d_to_nhd"] is None
    assert "no prefill verdict: nothing ran for NHD attention (aiter_prefill: " + why in v["line"]
    assert "write alone: 5D is 20% faster" in v["line"]


def test_report_has_a_table_per_phase_and_names_every_peer():
    rows = []
    for phase, extra in (("decode", dict(bs=32, ctx=4096)), ("prefill", dict(bs=1, new=4096, prefix=0))):
        r = dict(phase=phase, kv="fp8", **extra)
        r["cells"] = _cells(10.0, 90.0, 8.0, 72.0, [dict(layout="5d", part="attn", name="aiter_gluon",
                                                         note="unavailable: not ROCm")])
        r["verdict"] = layout_report.verdict(phase, layout_report.row_label(r), r["cells"])
        rows.append(r)
    text = layout_report.format_table(dict(geometry=Geometry(32, 2, 256, tp=8).to_dict(), device={"gpu": "G"},
                                           rows=rows))
    assert "### decode" in text and "### prefill" in text
    assert "| fp8 bs 32 ctx 4096 | 10.0 (sglang_flash) | 90.0 (sglang_triton) | 100.0 | 8.0 (kv5d_fused) |" in text
    assert "fp8 bs 32 ctx 4096: 5D is 20% faster per decode layer here" in text
    assert "fp8 1 x 4096 new + 0 cached: 5D is 20% faster per prefill layer here" in text
    assert "not timed: 5D attn aiter_gluon: unavailable: not ROCm" in text
    assert "NHD attn sglang_triton 90.0 @4 splits" in text
    assert "32/2 heads D=256 tp 8 (4/1 per rank)" in text


# ------------------------------------------------------------------- CLI


def test_layout_without_a_gpu_exits_2_with_the_reason():
    proc = run_cli(["bench", "--what", "layout", "--heads", "32", "--kv-heads", "8", "--head-dim", "128"],
                   env={"CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "needs a GPU (CUDA or ROCm); none is visible here" in proc.stderr


@pytest.mark.parametrize("args, msg", [
    (["--heads", "30", "--head-dim", "128", "--tp", "4"], "heads=30 is not divisible by --tp 4"),
    (["--page-size", "24"], "--page-size 24 is not divisible by X=16"),
    (["--kv-dtype", "bf16", "--page-size", "12"], "X=8"),
    (["--heads", "32"], "give --heads and --head-dim"),
    (["--batches", "1,x"], "--batches '1,x'"),
    (["--prefill", "4096"], "REQUESTSxNEW+PREFIX"),
    (["--contexts", "1"], "context=1 is outside"),
])
def test_layout_options_are_validated_before_anything_runs(args, msg):
    out = CliRunner().invoke(bench_cmd, ["--what", "layout", *args])
    assert out.exit_code == 2 and msg in out.output, out.output
    assert "Traceback" not in out.output


def test_layout_model_path_refuses_a_hostile_config_and_other_suites_refuse_layout_options(tmp_path):
    out = CliRunner().invoke(bench_cmd, ["--what", "layout", "--model-path",
                                         _model(tmp_path, _qwen35(num_key_value_heads="2"))])
    assert out.exit_code == 2 and "num_key_value_heads must be an integer" in out.output, out.output
    out = CliRunner().invoke(bench_cmd, ["--what", "layout", "--model-path", _model(tmp_path, _qwen35(), "b"),
                                         "--heads", "4"])
    assert out.exit_code == 2 and "drop --heads" in out.output
    out = CliRunner().invoke(bench_cmd, ["--what", "attention", "--tp", "8"])
    assert out.exit_code == 2 and "--tp: only for --what layout" in out.output


# --------------------------------------------------- ROCm wiring (fake aiter)

#: parameter names of aiter's Python signatures (aiter/ops/attention.py, ops/triton/attention/unified_attention.py)
RAGGED_PARAMS = {"out", "workspace_buffer", "query", "key_cache", "value_cache", "scale", "kv_indptr",
                 "kv_page_indices", "kv_last_page_lens", "block_size", "max_num_partitions", "alibi_slopes",
                 "kv_cache_dtype", "kv_cache_layout", "logits_soft_cap", "k_scale", "v_scale", "fp8_out_scale",
                 "partition_size", "mtp"}
UNIFIED_PARAMS = {"q", "k", "v", "out", "cu_seqlens_q", "max_seqlen_q", "seqused_k", "max_seqlen_k", "softmax_scale",
                  "causal", "window_size", "block_table", "softcap", "q_descale", "k_descale", "v_descale",
                  "alibi_slopes", "output_scale", "qq_bias", "sinks"}


def _aiter_cells(cells):
    return {k: v for k, v in cells.items() if k[2].startswith("aiter")}


def _call_once(fn):
    fn()
    return 1.0


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_rocm_decode_wiring_reaches_the_fake_aiter(fake_aiter, kv):
    from sglang_kv5d.bench import aiter_peers
    from sglang_kv5d.kernels.attention_reference import decode_attention_5d_ref

    g = Geometry(4, 1, 128, page=64)
    c = build_case(g, 2, 99, 1, kv, "cpu")
    aiter = aiter_peers.load(rocm=True)
    nhd = layout_calls.load_nhd_peers(rocm=True)
    assert nhd["reshape_and_cache_flash"] == "unavailable: aiter has no reshape_and_cache_flash"
    out = torch.zeros_like(c["q"])
    cells = layout_calls.writers(c, sglang={}, aiter=aiter, nhd=nhd)
    cells |= layout_calls.decoders(c, out, sm_scale=128 ** -0.5, decode_peer="unavailable: test", aiter=aiter,
                                   nhd=nhd)
    with fake_aiter._fake.strict():  # a positional argument raises TypeError: the cell would say "failed"
        timed = layout_calls.time_cells(_aiter_cells(cells), _call_once)
    assert timed[("5d", "attn", "aiter_gluon")] == {"us": 1.0}
    one = c["one"] if c["fp8"] else None
    ref = decode_attention_5d_ref(c["q"], c["k5"], c["v5"], c["bt"], c["kv_lens"], sm_scale=128 ** -0.5,
                                  k_scale=one, v_scale=one)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)
    for name, params in (("unified_attention", UNIFIED_PARAMS), ("paged_attention_ragged", RAGGED_PARAMS)):
        (call,) = fake_aiter._fake.calls(name)
        assert not call.args and set(call.kwargs) <= params, set(call.kwargs) - params
    ua = fake_aiter._fake.calls("unified_attention")[0].kwargs
    assert ua["k"].shape == (c["k_nhd"].shape[0] // 64, 64, 1, 128) and ua["block_table"] is c["bt"]
    assert ua["max_seqlen_q"] == 1 and (ua["q_descale"] is not None) == c["fp8"]
    pr = fake_aiter._fake.calls("paged_attention_ragged")[0].kwargs
    assert pr["block_size"] == 1 and pr["max_num_partitions"] == 1 and pr["kv_cache_layout"] == "NHD"
    assert pr["kv_cache_dtype"] == ("fp8_e4m3" if c["fp8"] else "auto")
    assert torch.equal(pr["kv_page_indices"].long(), c["slots"])
    assert timed[("nhd", "attn", "aiter_unified")]["note"].startswith("failed: NotImplementedError")
    assert timed[("nhd", "write", "aiter_flash")]["note"] == "unavailable: aiter has no reshape_and_cache_flash"
    assert timed[("5d", "write", "aiter_5d")]["note"] == "unavailable: aiter has no reshape_and_cache"


def test_rocm_decode_at_a_page_aiter_is_not_written_for_is_a_named_cell(fake_aiter):
    """Page 32: the aiter 5D decode cell says why (the routing's rule), never calls
    pa_decode_gluon; the portable 5D decode still runs."""
    from sglang_kv5d.bench import aiter_peers

    c = build_case(Geometry(4, 1, 128, page=32), 2, 99, 1, "fp8", "cpu")
    aiter = aiter_peers.load(rocm=True)
    nhd = layout_calls.load_nhd_peers(rocm=True)
    cells = layout_calls.decoders(c, torch.zeros_like(c["q"]), sm_scale=128 ** -0.5, decode_peer="unavailable: test",
                                  aiter=aiter, nhd=nhd)
    note = cells[("5d", "attn", "aiter_gluon")]
    assert isinstance(note, str) and note.startswith("unavailable: pa_decode_gluon is written for pages"), note
    assert callable(cells[("5d", "attn", "kv5d_portable")])
    assert not fake_aiter._fake.calls("pa_decode_gluon")


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_rocm_prefill_wiring_nhd_and_5d_give_one_answer(fake_aiter, kv):
    from sglang_kv5d.bench import aiter_peers

    g = Geometry(4, 1, 128, page=64)
    c = build_case(g, 2, 70, 6, kv, "cpu", seed=2)
    aiter = aiter_peers.load(rocm=True)
    nhd = layout_calls.load_nhd_peers(rocm=True)
    out = torch.zeros_like(c["q"])
    cells = _aiter_cells(layout_calls.prefillers(c, out, sm_scale=128 ** -0.5, aiter=aiter, nhd=nhd))
    with fake_aiter._fake.strict():
        res5 = cells[("5d", "attn", "aiter_prefill")]()
        resn = cells[("nhd", "attn", "aiter_prefill")]()
        timed = layout_calls.time_cells({("nhd", "attn", "aiter_unified"): cells[("nhd", "attn", "aiter_unified")]},
                                        _call_once)
    five, nhd_call = fake_aiter._fake.calls("mha_batch_prefill_func")
    assert nhd_call.kwargs["k"] is c["k_nhd"] and nhd_call.kwargs["causal"] is True
    assert len(nhd_call.kwargs["kv_page_indices"]) == c["slots"].numel() + 256  # CK read-ahead pad
    # the NHD rows through the requests' slots are the same keys as the 5D cache gathered: one answer
    torch.testing.assert_close(resn.double(), res5.double(), atol=1e-6, rtol=1e-6)
    ua = fake_aiter._fake.calls("unified_attention")[0].kwargs
    assert set(ua) <= UNIFIED_PARAMS and ua["max_seqlen_q"] == 6 and ua["max_seqlen_k"] == 76
    assert timed[("nhd", "attn", "aiter_unified")]["note"].startswith("failed: NotImplementedError")


def test_off_rocm_every_aiter_peer_is_a_named_cell_and_prefill_has_no_nhd_attention():
    g = Geometry(4, 1, 64, page=16)
    c = build_case(g, 1, 20, 4, "fp8", "cpu")
    nhd = layout_calls.load_nhd_peers(rocm=False)
    assert all(v.startswith("unavailable: not ROCm") for v in nhd.values())
    out = torch.zeros_like(c["q"])
    cells = layout_calls.prefillers(c, out, sm_scale=0.125, aiter={}, nhd=nhd)
    cells |= layout_calls.writers(c, sglang={"flash": "skipped: no sglang", "shuffle_5d": "skipped: no sglang"},
                                  aiter={}, nhd=nhd, kv5d_write=lambda *a: None)
    timed = layout_calls.time_cells({k: v for k, v in cells.items() if k[2] != "kv5d_portable"}, _call_once)
    rows = layout_calls.cells_by_part(timed)
    assert [(r["layout"], r["part"]) for r in rows] == sorted(
        [(r["layout"], r["part"]) for r in rows], key=lambda t: ({"nhd": 0, "5d": 1}[t[0]], t[1] != "write"))
    notes = {(r["layout"], r["part"], r["name"]): r.get("note") for r in rows}
    assert notes[("nhd", "attn", "aiter_prefill")].startswith("unavailable: not ROCm")
    assert "no other NHD prefill attention peer runs here" in notes[("nhd", "attn", "aiter_prefill")]
    assert notes[("5d", "attn", "aiter_prefill")] == "unavailable: not ROCm (aiter runs on AMD GPUs only)"
    assert notes[("nhd", "write", "sglang_flash")] == "unavailable: no sglang"
    assert notes[("5d", "write", "kv5d_fused")] is None  # ran (stub writer)
    v = layout_report.verdict("prefill", "x", rows)
    assert v["ratio_5d_to_nhd"] is None and "NHD attention" in v["line"]
