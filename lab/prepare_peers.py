#!/usr/bin/env python
"""Copy SGLang's peer kernels out of the installed SGLang into ignored folders,
so that a GPU machine without SGLang can time ``sglang-kv5d bench`` against them.

    python lab/prepare_peers.py [--attention-dest .peer_sglang] [--fp8-write-dest .device/fp8_write_peers]

* the Triton decode kernel: ``ATTENTION_DEST/sglang_peer/{decode_attention,score_mod}.py``,
  with its three SGLang imports pointed at small local stand-ins (``_stubs.py``:
  the environment flags read as off and the platform as CUDA); the kernel code
  itself is untouched. ``sglang-kv5d bench`` loads it when
  ``SGLANG_KV5D_PEER_PATH`` names ``ATTENTION_DEST`` (an absolute path).
* the FP8 write peers: ``FP8_WRITE_DEST/sglang/kernels/ops/kvcache/{shuffle_5d_cache,cache_ops}.py``
  (they import only torch and triton) with empty ``__init__.py`` files, so that
  ``FP8_WRITE_DEST`` on ``PYTHONPATH`` makes them importable under SGLang's own
  module names.

Both destinations are added to ``.git/info/exclude`` when run in a checkout.
"""

from __future__ import annotations

import argparse
import importlib.util
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


def _sglang_root() -> pathlib.Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("SGLang is not installed here: run this where it is, then carry the folders")
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def _sglang_version() -> str:
    try:
        import importlib.metadata as md

        return md.version("sglang")
    except Exception:
        return "unknown"


def prepare_attention_peer(root: pathlib.Path, dest_root: pathlib.Path, version: str) -> pathlib.Path:
    src_dir = root / "kernels" / "ops" / "attention"
    dest = dest_root / "sglang_peer"
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
    (dest / "SOURCE").write_text(f"sglang {version}: {src_dir}\n")
    return dest


FP8_WRITE_FILES = ("shuffle_5d_cache.py", "cache_ops.py")


def prepare_fp8_write_peers(root: pathlib.Path, dest_root: pathlib.Path) -> pathlib.Path:
    src_dir = root / "kernels" / "ops" / "kvcache"
    found = [f for f in FP8_WRITE_FILES if (src_dir / f).is_file()]
    if not found:
        raise SystemExit(f"{src_dir} has none of {', '.join(FP8_WRITE_FILES)} (they live there from SGLang 0.5.23)")
    if len(found) < len(FP8_WRITE_FILES):
        print(f"note: {src_dir} has only {', '.join(found)}; the 5D writer lives there from SGLang 0.5.23")
    dest = dest_root / "sglang" / "kernels" / "ops" / "kvcache"
    dest.mkdir(parents=True, exist_ok=True)
    for pkg in (dest_root / "sglang", dest_root / "sglang" / "kernels", dest_root / "sglang" / "kernels" / "ops",
                dest):
        (pkg / "__init__.py").write_text("")
    for name in found:
        (dest / name).write_text((src_dir / name).read_text())
    return dest


def _exclude(dest: pathlib.Path) -> None:
    git_dir = pathlib.Path(".git")
    if not git_dir.is_dir():
        return
    excl = git_dir / "info" / "exclude"
    excl.parent.mkdir(exist_ok=True)
    line = "/" + dest.as_posix().strip("/") + "/"
    have = excl.read_text().splitlines() if excl.exists() else []
    if line not in have:
        with excl.open("a") as f:
            f.write(line + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attention-dest", default=".peer_sglang")
    ap.add_argument("--fp8-write-dest", default=".device/fp8_write_peers")
    args = ap.parse_args()
    root, version = _sglang_root(), _sglang_version()
    for dest in (pathlib.Path(args.attention_dest), pathlib.Path(args.fp8_write_dest)):
        if dest.is_absolute() or ".." in dest.parts:
            raise SystemExit(f"{dest}: give a folder inside this checkout (relative, no '..')")
    att = prepare_attention_peer(root, pathlib.Path(args.attention_dest), version)
    fp8 = prepare_fp8_write_peers(root, pathlib.Path(args.fp8_write_dest))
    for dest in (args.attention_dest, args.fp8_write_dest):
        _exclude(pathlib.Path(dest))
    print(f"decode peer copied to {att}, FP8 write peers to {fp8} (sglang {version})")


if __name__ == "__main__":
    main()
