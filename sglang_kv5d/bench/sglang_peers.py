"""SGLang's own kernels as benchmark peers, reached through the surface table.

Each peer is a READ row of :mod:`sglang_kv5d.surface`; the first of the row's
targets that imports wins, so the peers follow SGLang's moves between
releases. A GPU machine without SGLang can still time the decode peer from a
copy made by ``lab/prepare_peers.py``, found through ``SGLANG_KV5D_PEER_PATH``
(validated here: an existing absolute directory that only this user or root
can change, since its code runs: :mod:`sglang_kv5d.trusted_path`).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from sglang_kv5d import config
from sglang_kv5d.surface import SURFACES, split_target

#: the FP8 write's peers: name in the results -> surface row
FP8_WRITE_PEERS = {
    "shuffle_5d": "kernels.launch_reshape_and_cache_shuffle_5d",
    "flash": "kernels.launch_reshape_and_cache_flash",
}
#: the decode attention peer's surface row
DECODE_PEER = "kernels.decode_attention_fwd"
#: the package ``lab/prepare_peers.py`` writes into the peer directory
COPY_PACKAGE = "sglang_peer"


class PeerPathError(ValueError):
    """SGLANG_KV5D_PEER_PATH has a value the benchmark cannot use."""


def resolve(surface_id: str, importer: Callable[[str], Any] = importlib.import_module) -> Tuple[Any, str]:
    """(object, module) for the first target of the surface row that imports.
    Raises ImportError naming every target tried and why it failed."""
    errors = []
    for target in SURFACES[surface_id].targets:
        module, path = split_target(target)
        try:
            obj = importer(module)
            for part in path:
                obj = getattr(obj, part)
        except Exception as exc:  # noqa: BLE001 - an SGLang import fails with any error: each is named
            errors.append(f"{module}: {type(exc).__name__}: {exc}")
            continue
        return obj, module
    raise ImportError("; ".join(errors))


def fp8_write_peers(importer: Callable[[str], Any] = importlib.import_module) -> Dict[str, Any]:
    """{name: callable, name + "_module": module} per FP8 write peer, or
    {name: "skipped: why"} for one that does not import."""
    peers: Dict[str, Any] = {}
    for name, surface_id in FP8_WRITE_PEERS.items():
        try:
            peers[name], peers[name + "_module"] = resolve(surface_id, importer)
        except ImportError as exc:
            peers[name] = f"skipped: {exc}"
    return peers


def peer_path(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """SGLANG_KV5D_PEER_PATH: None when unset; an existing absolute directory;
    else PeerPathError naming the variable and the fix."""
    env = os.environ if environ is None else environ
    fix = (f"export {config.PEER_PATH}=/absolute/path/.peer_sglang (made by `python lab/prepare_peers.py` "
           "where SGLang is installed), or unset it")
    value, problem = config.read(config.PEER_PATH, env)
    if problem is not None:
        raise PeerPathError(f"{problem.message()}; fix: {fix}")
    if value is not None and not os.path.isdir(value):
        raise PeerPathError(f"{config.PEER_PATH}={env.get(config.PEER_PATH)!r} is not an existing directory; "
                            f"fix: {fix}")
    if value is not None:  # its code runs: it must be as trusted as the package itself
        from sglang_kv5d.trusted_path import import_dir_problem

        problem = import_dir_problem(value, COPY_PACKAGE)
        if problem:
            raise PeerPathError(f"{config.PEER_PATH}: refusing to import code from {value!r}: {problem}; fix: use a "
                                "directory only you (or root) can write, e.g. chmod go-w, and check its owner")
    return value


def decode_peer(environ: Optional[Mapping[str, str]] = None,
                importer: Callable[[str], Any] = importlib.import_module) -> Tuple[Callable, str]:
    """SGLang's Triton ``decode_attention_fwd`` and where it came from: the
    installed SGLang, else the copy under SGLANG_KV5D_PEER_PATH (appended to
    ``sys.path``, so it cannot shadow an installed module). An invalid
    SGLANG_KV5D_PEER_PATH raises PeerPathError even when SGLang is installed;
    no peer at all raises RuntimeError saying how to get one."""
    path = peer_path(environ)
    try:
        fn, module = resolve(DECODE_PEER, importer)
        return fn, module
    except ImportError as exc:
        installed = str(exc)
    if path is None:
        raise RuntimeError(
            f"SGLang's decode_attention_fwd is not importable ({installed}): install SGLang, or copy it with "
            f"`python lab/prepare_peers.py` and export {config.PEER_PATH}=/absolute/path/.peer_sglang")
    if path not in sys.path:
        sys.path.append(path)
    attr = split_target(SURFACES[DECODE_PEER].targets[0])[1][-1]
    try:
        fn = getattr(importer(f"{COPY_PACKAGE}.decode_attention"), attr)
    except Exception as exc:  # noqa: BLE001 - a copied module fails with any error: reported with the directory
        raise RuntimeError(f"{config.PEER_PATH}={path}: no usable {COPY_PACKAGE}/decode_attention.py there "
                           f"({type(exc).__name__}: {exc}); rerun `python lab/prepare_peers.py`") from None
    src = ""
    try:
        with open(os.path.join(path, COPY_PACKAGE, "SOURCE"), encoding="utf-8") as f:
            src = f.read(500).strip()
    except OSError:
        pass
    return fn, f"copy of {src or 'SGLang decode_attention.py'}"
