"""KV5D015: prefill/decode disaggregation under the 5D layout (issue 25 item 2).

Through ``sglang-kv5d check`` with the installed SGLang's own parser (one batch
process: tests/helpers/cli.py), then inside SGLang: real ``ServerArgs`` from
``prepare_server_args`` (SGLang resolves ``mooncake_tcp`` to mooncake, the
decode role's radix cache off) judged by the server-args guard, in one
subprocess. The pure contract module last.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import run_batch
from tests.helpers.subproc import run_py
from tests.helpers.models import tiny_llama

from sglang_kv5d import rules
from sglang_kv5d.disagg import contract
from sglang_kv5d.versions import installed_sglang_version, parse_version

# Flags SGLang added after 0.5.16 (scripts/test.sh runs the rule tests on 0.5.16 too): cases using them
# run on 0.5.23 only (the rule reads a missing flag as its default).
NEW_FLAGS = ("--disaggregation-decode-retraction-backup", "--disaggregation-decode-host-receive-threshold",
             "--enable-pd-role-switch", "--disaggregation-enable-kv-checksum",
             "--disaggregation-decode-allocation-policy")
_INSTALLED = installed_sglang_version()
HAS_NEW_FLAGS = bool(_INSTALLED) and parse_version(_INSTALLED) >= parse_version("0.5.23")

FIVE_D = {"SGLANG_USE_AITER": "1", "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"}
NHD = {"SGLANG_USE_AITER": "1"}
GOOD = ["--model-path", "/models/Llama-3.1-8B-Instruct", "--attention-backend", "aiter", "--kv-cache-dtype",
        "fp8_e4m3", "--page-size", "64"]
CHECK = ["check", "--kv5d-json", "--kv5d-platform", "rocm"]
PREFILL = GOOD + ["--disaggregation-mode", "prefill"]
DECODE = GOOD + ["--disaggregation-mode", "decode"]

# (argv after check, env, refused?, words the KV5D015 message must contain)
PD_CASES = [
    # the verified backends (mooncake is SGLang's default), both roles
    (PREFILL, FIVE_D, False, ()),
    (DECODE + ["--disaggregation-transfer-backend", "nixl"], FIVE_D, False, ()),
    (DECODE + ["--disaggregation-transfer-backend", "mooncake_tcp"], FIVE_D, False, ()),  # SGLang: mooncake + TCP
    # backends not verified for 5D pages
    (PREFILL + ["--disaggregation-transfer-backend", "mori"], FIVE_D, True,
     ("--disaggregation-mode prefill", "--disaggregation-transfer-backend mori", "mooncake, nixl")),
    (DECODE + ["--disaggregation-transfer-backend", "fake"], FIVE_D, True, ("fake",)),
    (DECODE + ["--disaggregation-transfer-backend", "ascend"], FIVE_D, True, ("ascend",)),
    # the decode-side offload manager: refused on the decode role, and on a prefill role that can switch to decode
    (DECODE + ["--disaggregation-decode-enable-offload-kvcache"], FIVE_D, True,
     ("--disaggregation-decode-enable-offload-kvcache", "token slot")),
    (PREFILL + ["--disaggregation-decode-enable-offload-kvcache"], FIVE_D, False, ()),  # a prefill role never offloads
    (PREFILL + ["--disaggregation-decode-enable-offload-kvcache", "--enable-pd-role-switch"], FIVE_D, True,
     ("--enable-pd-role-switch",)),
    # retraction backups: cpu_tensor (cpu-copy-5d) and none accepted; host_pool refused, also when forced
    (DECODE + ["--disaggregation-decode-retraction-backup", "cpu_tensor"], FIVE_D, False, ()),
    (DECODE + ["--disaggregation-decode-retraction-backup", "none"], FIVE_D, False, ()),
    (DECODE + ["--disaggregation-decode-retraction-backup", "host_pool"], FIVE_D, True, ("host_pool", "by token")),
    (DECODE + ["--disaggregation-decode-host-receive-threshold", "0.5"], FIVE_D, True,
     ("--disaggregation-decode-host-receive-threshold 0.5", "host_pool")),
    # staging buffers (head slices per token): refused on either role
    (PREFILL, {**FIVE_D, "SGLANG_DISAGG_STAGING_BUFFER": "true"}, True, ("SGLANG_DISAGG_STAGING_BUFFER",)),
    (PREFILL, {**FIVE_D, "SGLANG_DISAGG_STAGING_BUFFER": "0"}, False, ()),
    # accepted: checksum, decode radix cache, scheduling knobs
    (DECODE + ["--disaggregation-enable-kv-checksum", "--disaggregation-decode-enable-radix-cache",
               "--disaggregation-decode-allocation-policy", "prefill_complete"], FIVE_D, False, ()),
    # never without a PD role or under nhd
    (GOOD + ["--disaggregation-decode-enable-offload-kvcache", "--disaggregation-transfer-backend", "mori"], FIVE_D,
     False, ()),
    (DECODE + ["--disaggregation-transfer-backend", "mori", "--disaggregation-decode-enable-offload-kvcache"], NHD,
     False, ()),
]


@pytest.fixture(scope="module")
def pd_batch():
    return run_batch([{"argv": CHECK + argv, "env": env, "probe": []} for argv, env, _, _ in PD_CASES])


@pytest.mark.parametrize("index", range(len(PD_CASES)),
                         ids=[f"{'refused' if c[2] else 'accepted'}-{i}" for i, c in enumerate(PD_CASES)])
def test_pd_cases_through_check(pd_batch, index):
    argv, env, refused, words = PD_CASES[index]
    if not HAS_NEW_FLAGS and any(f in argv for f in NEW_FLAGS):
        pytest.skip(f"SGLang {_INSTALLED} has no {[f for f in NEW_FLAGS if f in argv]}")
    r = pd_batch[index]
    assert r["code"] in (0, 1), r
    found = [f for f in json.loads(r["out"]) if f["id"] == "KV5D015"]
    assert bool(found) == refused, (PD_CASES[index], r)
    if refused:
        text = " ".join(f["message"] for f in found)
        assert r["code"] == 1 and all(f["severity"] == "error" and f["fix"] for f in found), r
        for w in words:
            assert w in text, (w, text)


def test_every_refusal_of_one_line_is_reported():
    """Several problems on one decode line: one finding each, in one run of the rules."""
    args = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mori",
            "disaggregation_decode_enable_offload_kvcache": True, "disaggregation_decode_retraction_backup": "host_pool"}
    env = {**FIVE_D, "SGLANG_DISAGG_STAGING_BUFFER": "1"}
    found = [f for f in rules.evaluate(rules.make_context(env, args, "0.5.23", "rocm")) if f.id == "KV5D015"]
    assert len(found) == 4, found
    for w in ("mori", "SGLANG_DISAGG_STAGING_BUFFER", "--disaggregation-decode-enable-offload-kvcache", "host_pool"):
        assert sum(w in f.message for f in found) == 1, (w, found)


def test_doc_states_the_contract_and_classifies_the_flags():
    text = rules.explain("KV5D015")
    for item in contract.MUST_AGREE:
        assert item in text, item
    for w in ("float8_e4m3fnuz", "float8_e4m3fn", "head_dim", "bootstrap handshake", "attention-TP",
              "--disaggregation-enable-kv-checksum", "--disaggregation-decode-enable-radix-cache", "cpu-copy-5d",
              "fail-closed-decode-offload", "SGLANG_DISAGG_STAGING_BUFFER", "--enable-pd-role-switch",
              "--enable-hisparse", "mooncake_tcp", "--dcp-size"):
        assert w in text, w
    for backend in contract.VERIFIED_TRANSFER_BACKENDS:
        assert backend in rules.RULES["KV5D015"].fix


def test_contract_is_one_pure_constant():
    assert contract.VERIFIED_TRANSFER_BACKENDS == ("mooncake", "nixl")
    assert contract.transfer_backend_verified("mooncake") and contract.transfer_backend_verified(" NIXL ")
    assert contract.transfer_backend_verified("mooncake_tcp")  # SGLang rewrites it to mooncake
    for bad in ("mori", "fake", "ascend", "", None, "mooncake;x"):
        assert not contract.transfer_backend_verified(bad), bad


_GUARD_SCRIPT = """
import json, os, sys
from sglang.srt.server_args import prepare_server_args
from sglang_kv5d.rules import Kv5dConfigError, guard_server_args
m = sys.argv[1]
five_d = dict(os.environ, SGLANG_USE_AITER="1", SGLANG_AITER_KV_CACHE_LAYOUT="vectorized_5d")
base = ["--model-path", m, "--skip-tokenizer-init", "--device", "cpu", "--attention-backend", "aiter",
        "--page-size", "64"]
cases = {
    "tcp": (["--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "mooncake_tcp"], {}),
    "offload": (["--disaggregation-mode", "decode", "--disaggregation-decode-enable-offload-kvcache",
                 "--hicache-storage-backend", "file"], {}),
    "mori": (["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "mori"], {}),
    "selection": ([], {"SGLANG_KV5D_PATCHES": "pool-layout-detection,server-args-guard"}),
}
out = {}
for key, (extra, env) in cases.items():
    sa = prepare_server_args(base + extra)
    if hasattr(sa, "resolve_once"):
        sa.resolve_once()
    try:
        guard_server_args(sa, dict(five_d, **env), platform="rocm")
        out[key] = []
    except Kv5dConfigError as exc:
        out[key] = [[f.id, f.message] for f in exc.findings]
print(json.dumps(out))
"""


def test_inside_sglang_the_guard_refuses_what_check_refuses(tmp_path):
    """The server-args guard on real resolved ServerArgs: KV5D015 on the decode role's offload flag and on an
    unverified backend, not on mooncake_tcp (SGLang resolves it to mooncake); KV5D011 on a selection that keeps
    server-args-guard but leaves the 5D fixes out (issue 26 item 3: refused before the weights load)."""
    model = tiny_llama(tmp_path)
    r = run_py(_GUARD_SCRIPT, args=[str(model)], timeout=300)
    assert r.data is not None, r
    ids = {k: {i for i, _ in v} for k, v in r.data.items()}
    assert "KV5D015" not in ids["tcp"], r.data
    offload = dict(r.data["offload"]).get("KV5D015", "")
    assert "--disaggregation-mode decode" in offload and "--disaggregation-decode-enable-offload-kvcache" in offload
    assert "--disaggregation-transfer-backend mori" in dict(r.data["mori"]).get("KV5D015", ""), r.data
    selection = dict(r.data["selection"]).get("KV5D011", "")
    for w in ("SGLANG_KV5D_PATCHES", "attention-dispatch-5d", "cpu-copy-5d", "fp8-kv-write"):
        assert w in selection, (w, r.data)
    assert "server-args-guard" not in selection.split(", which")[0], selection  # it was selected
