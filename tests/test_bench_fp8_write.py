"""CPU tests of the FP8 write benchmark's pure parts: which rows it runs, the
target verdicts and the table (the timing itself needs a GPU: tests/gpu)."""

import pytest

from sglang_kv5d.bench import fp8_write as bench


def _row(geometry, layout, T, loc, fused, flash, *, dtype="float8_e4m3fn", unfused=None, store=None):
    floor = 1.0
    store = fused * 0.5 if store is None else store
    return {
        "geometry": geometry, "H": 8, "D_k": 128, "D_v": 128, "layout": layout, "cache_dtype": dtype,
        "T": T, "loc": loc, "config": {}, "bytes": 0, "floor_us": floor, "fused_us": fused,
        "fused_floor_ratio": fused / floor, "unfused_us": unfused,
        "unfused_floor_ratio": unfused / floor if unfused else None,
        "speedup_vs_unfused": unfused / fused if unfused else None, "flash_us": flash,
        "flash_floor_ratio": flash / floor if flash else None,
        "fused_vs_flash": fused / flash if flash else None,
        "store_us": store, "fused_vs_store": fused / store, "store_vs_flash": store / flash if flash else None,
    }


def test_row_cases_add_decode_batches_and_keep_prefill_rows():
    cases = bench.row_cases(bench.DEFAULT_TOKEN_COUNTS, bench.DEFAULT_DECODE_BATCHES)
    assert cases == [(1, "decode"), (16, "decode"), (128, "decode"), (512, "decode"), (1024, "prefill"),
                     (2048, "decode"), (4096, "prefill"), (32768, "prefill"), (262144, "prefill")]
    # a T asked for both ways gets both rows
    assert bench.row_cases([1024], [1024]) == [(1024, "decode"), (1024, "prefill")]
    assert bench.row_cases([64], []) == [(64, "decode")]


def test_verdicts_name_decode_batches_and_judge_each_target():
    rows = [
        _row("llama-like", "5d", 128, "decode", 2.5, 2.0),  # 1.25x flash: not within 5%
        # a decode batch, also not within 5%, where the layout's store floor alone is 1.25x flash
        _row("llama-like", "5d", 512, "decode", 5.0, 2.4, store=3.0),
        _row("llama-like", "nhd", 1024, "prefill", 2.0, 2.0),  # equal: within 5%
        _row("llama-like", "5d", 4096, "prefill", 7.0, 7.5),  # faster than flash
        _row("llama-like", "5d", 32768, "prefill", 1.2, 2.0, unfused=9.0),  # 1.2x floor; 7.5x unfused
        _row("llama-like", "5d", 32768, "prefill", 1.3, None, dtype="float8_e4m3fnuz", unfused=8.0),
    ]
    v = bench.evaluate_targets({"rows": rows})
    fn = v["float8_e4m3fn"]
    assert fn["T < 4096: fused within 5% of flash"] == {
        "met": False, "checked": 3,
        "failures": ["llama-like/5d/T=128: 1.250", "llama-like/5d/T=512 decode: 2.083"],
        "layout_bound": ["llama-like/5d/T=512 decode: store floor 1.250x flash"]}
    assert fn["T >= 4096: fused faster than flash (NHD peer)"] == {
        "met": True, "checked": 2, "failures": [], "layout_bound": []}
    # "faster than": a store floor equal to flash already misses it
    slow = bench.evaluate_targets({"rows": [_row("tp1", "5d", 4096, "prefill", 8.0, 7.0, store=7.0)]})
    assert slow["float8_e4m3fn"]["T >= 4096: fused faster than flash (NHD peer)"]["layout_bound"] == [
        "tp1/5d/T=4096: store floor 1.000x flash"]
    assert fn["T <= 128: fused <= 6 us"] == {"met": True, "checked": 1, "failures": []}
    assert fn["large T: fused <= 1.15x byte floor"]["failures"] == ["llama-like/5d/T=32768: 1.20x"]
    assert fn["T >= 32768, 5D: >= 7x faster than unfused"]["met"] is True
    fnuz = v["float8_e4m3fnuz"]
    assert fnuz["T >= 32768, 5D: >= 7x faster than unfused"]["failures"] == ["llama-like/T=32768: 6.2x"]
    assert "T < 4096: fused within 5% of flash" not in fnuz  # no peer rows for that format


def test_table_shows_the_slot_kind_of_each_row():
    rows = [_row("llama-like", "5d", 512, "decode", 5.0, 2.4, store=3.0),
            _row("llama-like", "5d", 1024, "prefill", 3.0, 2.9)]
    result = {"rows": rows, "device": {"gpu": "X", "driver": "1", "torch": "t", "triton": "tr"},
              "read_write_bytes_per_s": 2.0e12, "page": 64, "input_dtype": "bfloat16",
              "timing": "CUDA-graph replay median, us per call"}
    result["verdicts"] = bench.evaluate_targets(result)
    lines = bench.format_table(result).splitlines()
    assert lines[2] == "caches: about 1.25 x T slots per buffer (written lines stay in L2)"
    assert "slots" in lines[4]
    body = [ln for ln in lines if ln.startswith("llama-like")]
    assert "decode" in body[0] and " 512 " in body[0] and "2.083" in body[0]
    assert "prefill" in body[1]
    assert "3.00    1.67   1.250" in body[0]  # store, fused / store, store / flash
    assert any("[NOT MET] T < 4096: fused within 5% of flash (2 rows): llama-like/5d/T=512 decode: 2.083" in ln
               for ln in lines)
    assert any("layout-bound" in ln
               and "llama-like/5d/T=512 decode: store floor 1.250x flash" in ln for ln in lines)


def test_cache_pages_default_and_serving_sizes():
    # about 1.25 T slots by default, never fewer
    assert bench.cache_pages(1024, 8, 128, 64) == 24
    assert bench.cache_pages(1, 8, 128, 64) == 5
    # 4 GiB of one buffer: 64 slots x 8 heads x 128 dims = 64 KiB per page
    assert bench.cache_pages(1024, 8, 128, 64, cache_gib=4) == 65536
    # a size smaller than the default keeps the default
    assert bench.cache_pages(262144, 1, 256, 64, cache_gib=0.001) == 5124
    result = {"rows": [], "device": {}, "read_write_bytes_per_s": 1e12, "page": 64, "input_dtype": "bfloat16",
              "timing": "t", "cache_gib": 4.0}
    assert bench.format_table(result).splitlines()[2] == "caches: at least 4 GiB per buffer, slots spread over it"


def test_bench_cli_explains_and_checks_cache_size():
    from click.testing import CliRunner

    from sglang_kv5d.cli.bench import bench as bench_cmd

    out = CliRunner().invoke(bench_cmd, ["--help"])
    assert out.exit_code == 0 and "--cache-gib" in out.output and "L2" in out.output
    for value in ("-1", "inf", "nan"):
        bad = CliRunner().invoke(bench_cmd, ["--cache-gib", value])
        assert bad.exit_code == 2 and "cache-gib" in bad.output, value
    # the library call refuses such sizes before touching a device
    for value in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="cache_gib"):
            bench.run(device="cpu", cache_gib=value)


def test_peer_failures_name_the_cause():
    exc = RuntimeError("at 1:0:\ndef kernel(...):\n^\nfp8e4b8 is not supported in this architecture\n")
    assert bench._error_line(exc) == "RuntimeError: fp8e4b8 is not supported in this architecture"
    assert bench._error_line(ValueError("")) == "ValueError: "
