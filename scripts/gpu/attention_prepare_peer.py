#!/usr/bin/env python
"""Copy SGLang's Triton decode kernel into an ignored folder so the GPU machine
(which has no SGLang) can run it as the benchmark peer.

    python scripts/gpu/attention_prepare_peer.py [--dest .peer_sglang]

Creates ``DEST/sglang_peer/{decode_attention,score_mod}.py`` from the installed
SGLang with their three SGLang imports pointed at small local stand-ins
(``_stubs.py``: the environment flags read as off and the platform as CUDA). The
kernel code itself is untouched. ``DEST`` is added to ``.git/info/exclude``.
The benchmark finds it through ``SGLANG_KV5D_PEER_PATH`` or ``./.peer_sglang``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import re

STUBS = '''"""Stand-ins for the SGLang helpers the copied decode kernel imports."""
import torch


class _Flag:
    def __init__(self, value):
        self._value = value

    def get(self):
        return self._value


class _Envs:
    SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS = _Flag(False)
    SGLANG_MLA_DECODE_TUNE = _Flag(False)
    SGLANG_FORCE_LEAN_GRID_CU_MULT = _Flag(1.0)

    def __getattr__(self, name):
        return _Flag(None)


envs = _Envs()


def is_hip():
    return bool(getattr(torch.version, "hip", None))


def is_gfx95_supported():
    return False


def is_gfx1250_supported():
    return False


def get_device_core_count(device_id=0):
    return torch.cuda.get_device_properties(device_id).multi_processor_count
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dest", default=".peer_sglang")
    args = ap.parse_args()
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("SGLang is not installed here")
    root = pathlib.Path(list(spec.submodule_search_locations)[0])
    src_dir = root / "kernels" / "ops" / "attention"
    dest = pathlib.Path(args.dest) / "sglang_peer"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "__init__.py").write_text('"""SGLang Triton decode kernel, copied for benchmarking."""\n')
    (dest / "_stubs.py").write_text(STUBS)
    (dest / "score_mod.py").write_text((src_dir / "score_mod.py").read_text())
    text = (src_dir / "decode_attention.py").read_text()
    text = text.replace(
        "from sglang.kernels.ops.attention.score_mod import", "from .score_mod import"
    )
    text = text.replace("from sglang.srt.environ import envs", "from ._stubs import envs")
    text = re.sub(r"from sglang\.srt\.utils import \(", "from ._stubs import (", text)
    if "sglang." in re.sub(r"#.*", "", text):
        left = sorted(set(re.findall(r"sglang\.[\w.]+", text)))
        print("note: SGLang references left (lazy, MLA-only paths):", left)
    (dest / "decode_attention.py").write_text(text)
    try:
        import importlib.metadata as md

        version = md.version("sglang")
    except Exception:
        version = "unknown"
    (dest / "SOURCE").write_text(f"sglang {version}: {src_dir}\n")
    git_dir = pathlib.Path(".git")
    if git_dir.is_dir():
        excl = git_dir / "info" / "exclude"
        excl.parent.mkdir(exist_ok=True)
        line = "/" + pathlib.Path(args.dest).as_posix().strip("/") + "/"
        have = excl.read_text().splitlines() if excl.exists() else []
        if line not in have:
            with excl.open("a") as f:
                f.write(line + "\n")
    print(f"peer copied to {dest} (sglang {version})")


if __name__ == "__main__":
    main()
