"""sglang_kv5d.platform: the platform decision, the fp8 flavour per arch, the
interpreter check against Triton's own reading of TRITON_INTERPRET, and an
import that costs no torch."""

from __future__ import annotations

import pytest

from sglang_kv5d import platform
from sglang_kv5d.platform import KNOWN_ARCHS, known_target
from tests.helpers.subproc import run_py

pytestmark = pytest.mark.sglang_independent


def test_fp8_flavour_per_arch():
    assert platform.fp8_flavour("gfx942") == "float8_e4m3fnuz"
    assert platform.fp8_flavour("gfx942:sramecc+:xnack-") == "float8_e4m3fnuz"  # as ROCm reports it
    assert platform.fp8_flavour("gfx940") == "float8_e4m3fnuz"  # MI300 family without a table entry
    assert platform.fp8_flavour("gfx950") == "float8_e4m3fn"
    assert platform.fp8_flavour("sm_90") == "float8_e4m3fn"
    assert platform.fp8_flavour("gfx1100") == "float8_e4m3fn"
    assert platform.fp8_flavour(None) == "float8_e4m3fn"  # no GPU
    for arch in KNOWN_ARCHS:  # the flavour is the format the arch converts in hardware
        assert platform.fp8_flavour(arch) in known_target(arch).native_fp8, arch
    import torch

    assert platform.fp8_dtype("gfx942") is torch.float8_e4m3fnuz
    assert set(platform.fp8_kv_dtypes()) == {torch.float8_e4m3fn, torch.float8_e4m3fnuz}


def test_detect_platform_choice_and_rules(tmp_path):
    assert platform.detect_platform("cuda") == ("cuda", "--kv5d-platform")
    with pytest.raises(ValueError, match="rocM"):
        platform.detect_platform("rocM")
    import torch

    if torch.cuda.is_available() or getattr(torch.version, "hip", None):
        pytest.skip("a GPU build with a device decides by itself here")
    # A ROCm install counts for a launch still to happen unless torch is a CUDA build;
    # inside a process only its torch decides.
    expected = "cpu" if torch.version.cuda else "rocm"
    assert platform.detect_platform(environ={"ROCM_PATH": str(tmp_path)})[0] == expected
    assert platform.detect_platform(in_process=True) == ("cpu", "no ROCm or CUDA device found")
    info = platform.describe_platform()
    assert (info.platform, info.device, info.arch, info.fp8, info.error) == (
        "cpu", None, None, "float8_e4m3fn", None)


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "on", "yes", "Y", "0", "false", "off", "", "2", " 1"])
def test_interpreting_reads_the_variable_as_triton_does(monkeypatch, value):
    from triton._C.libtriton import getenv_bool  # what triton.knobs.runtime.interpret reads

    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert platform.interpreting() is bool(getenv_bool("TRITON_INTERPRET", False)), value


def test_import_costs_no_torch():
    r = run_py("""
        import json, sys
        import sglang_kv5d.platform
        print(json.dumps(sorted(m for m in ("torch", "triton", "sglang") if m in sys.modules)))
    """)
    assert r.returncode == 0, r
    assert r.data == [], r


def test_fp8_formats():
    import torch

    assert platform.fp8_format(torch.float8_e4m3fn) == (platform.FP8_E4M3FN, 448.0, 7, False)
    assert platform.fp8_format("float8_e4m3fnuz") == (platform.FP8_E4M3FNUZ, 240.0, 8, True)
    for name in platform.FP8_KV_DTYPE_NAMES:  # the largest finite value is torch's own
        assert platform.fp8_format(name).max == torch.finfo(platform.fp8_torch_dtype(name)).max
    with pytest.raises(ValueError, match="float8_e5m2"):
        platform.fp8_format(torch.float8_e5m2)
    assert set(platform.fp8_any_dtypes()) >= {torch.float8_e5m2, *platform.fp8_kv_dtypes()}
    assert known_target("gfx942").converts(torch.float8_e4m3fnuz)
    assert not known_target("gfx942").converts("float8_e4m3fn")


# What only sglang_kv5d/platform.py may read or spell: the driver's AMD arch
# attribute and the torch fp8 dtype names (as attributes, getattr names or whole
# string constants; prose that mentions them is fine).
_PLATFORM_ONLY = {"gcnArchName", *platform.FP8_ANY_DTYPE_NAMES}


def _platform_reads(path):
    import ast

    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _PLATFORM_ONLY:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in _PLATFORM_ONLY:
            found.append((node.lineno, node.value))
    return found


def test_only_the_platform_module_reads_the_arch_and_names_fp8_formats():
    import os

    root = os.path.dirname(platform.__file__)
    offenders = []
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            if not name.endswith(".py") or os.path.samefile(path, platform.__file__):
                continue
            offenders += [f"{os.path.relpath(path, root)}:{line}: {what}" for line, what in _platform_reads(path)]
    assert not offenders, "ask sglang_kv5d.platform instead:\n" + "\n".join(offenders)


def test_the_scan_sees_each_form(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('import torch\na = torch.float8_e4m3fnuz\nb = getattr(p, "gcnArchName")\n'
                   'c = ("float8_e5m2",)\nd = "a float8_e4m3fn cache"\n')
    assert _platform_reads(str(src)) == [(2, "float8_e4m3fnuz"), (3, "gcnArchName"), (4, "float8_e5m2")]
