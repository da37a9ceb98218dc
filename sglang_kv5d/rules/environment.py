"""Rules on the launch environment's variables: names SGLang never reads
(KV5D012), invalid values of sglang-kv5d's switches (KV5D013) and variables
that change which code programs load (KV5D014)."""

from __future__ import annotations

import difflib
import os
import stat
from typing import Optional

from .. import config as _config
from ..surface import ENV_PREFIX, LAUNCH_SERVER
from .context import USE_AITER_ENV, Context
from .registry import ERROR, WARNING, Rule, rule as _rule

# Variables that change which code a program loads (KV5D014), each with where its
# meaning is documented. LOADS: the value names code to load or run (a library, a
# tool, a plugin, a class, a startup file): a profile / --kv5d-env that sets one
# fires; an exported one fires when a path in it is unsafe. SEARCHES: the value
# says where code is looked up (directories): fires when an entry is unsafe,
# whatever set it. Unsafe: relative or empty (the server's working directory
# decides), writable by group or others (anyone can plant code there), or owned
# by another user than you or root.
LOADS = (
    ("LD_PRELOAD", "shared objects loaded before all others, in every process (ld.so(8), "
                   "man7.org/linux/man-pages/man8/ld.so.8.html)"),
    ("LD_AUDIT", "auditing libraries loaded into every process (ld.so(8), same page)"),
    ("HSA_TOOLS_LIB", "tool libraries the ROCm ROCr runtime loads at initialisation (ROCprofiler-SDK docs, "
                      "'ROCprofiler-SDK tool library', rocm.docs.amd.com/projects/rocprofiler-sdk)"),
    ("ROCP_TOOL_LIBRARIES", "libraries ROCprofiler-SDK dlopens at the first ROCm runtime call (ROCprofiler-SDK "
                            "docs, 'Environment variables for custom tools')"),
    ("CUDA_INJECTION64_PATH", "the injection library the CUDA driver loads at initialisation (CUPTI injection "
                              "samples; Nsight Compute 2026.2.1 release notes, 'CUDA injection library')"),
    ("NCCL_NET_PLUGIN", "the network plugin libnccl-net-NAME.so / librccl-net-NAME.so, or a path (NCCL env docs, "
                        "docs.nvidia.com/deeplearning/nccl; RCCL 'Using the NCCL Net plugin API'; NCCL 2.27.5 "
                        "notes: a path is accepted)"),
    ("NCCL_TUNER_PLUGIN", "the tuner plugin, by name or path (RCCL 'Using the RCCL Tuner plugin API')"),
    ("NCCL_PROFILER_PLUGIN", "the profiler plugin, by name or path (NCCL ext-profiler docs; RCCL inspector "
                             "README)"),
    ("NCCL_ENV_PLUGIN", "a library that answers every NCCL/RCCL variable (RCCL 'Using the RCCL environment "
                        "plugin API')"),
    ("TRITON_CACHE_MANAGER", "a module:Class Triton imports to manage its cache (triton/knobs.py, "
                             "cache.manager_class)"),
    ("TRITON_REMOTE_CACHE_BACKEND", "a module:Class Triton imports (triton/knobs.py, cache.remote_manager_class)"),
    ("TRITON_LIBHIP_PATH", "the HIP runtime library Triton dlopens (triton/knobs.py, amd.libhip_path)"),
    ("TRITON_LIBCUDA_PATH", "the CUDA driver library Triton dlopens (triton/knobs.py, nvidia.libcuda_path)"),
    ("CC", "the C compiler Triton runs to build its launcher modules (triton/knobs.py, build.cc)"),
    ("PYTHONSTARTUP", "a file interactive interpreters run (Python docs, 'Command line and environment')"),
    ("PYTHONBREAKPOINT", "a dotted callable whose module breakpoint() imports (Python docs, same page)"),
    ("BASH_ENV", "a file every non-interactive bash runs first (GNU Bash manual, 'Bash Startup Files')"),
    ("ENV", "a file interactive shells in POSIX mode run first (GNU Bash manual, same section)"),
)
SEARCHES = (
    ("LD_LIBRARY_PATH", "directories searched for shared libraries first (ld.so(8))"),
    ("PATH", "directories searched for the programs SGLang, Triton and the ROCm tools start (execvp(3); an "
             "empty entry is the working directory)"),
    ("PYTHONPATH", "directories put before the standard library (Python docs, 'Command line and environment')"),
    ("PYTHONHOME", "the location of the standard library itself (Python docs, same page)"),
    ("PYTHONUSERBASE", "the user site-packages, whose .pth files run at start-up (Python docs, same page; the "
                       "site module, PEP 370)"),
    ("GCONV_PATH", "directories of gconv-modules files and the shared objects iconv loads (GNU C Library "
                   "manual, iconv module data structures)"),
    ("TRITON_HOME", "the root of Triton's ~/.triton: cache, dump, override (triton/knobs.py)"),
    ("TRITON_CACHE_DIR", "Triton's cache: compiled launcher modules ({name}.so) are loaded from it, so a planted "
                         "cache runs host code (triton/knobs.py, triton/runtime/build.py)"),
    ("TRITON_OVERRIDE_DIR", "kernels replaced from this directory with TRITON_KERNEL_OVERRIDE=1 (triton/knobs.py)"),
    (_config.PEER_PATH, "put on sys.path by `sglang-kv5d bench`, whose peer modules then run (sglang-kv5d)"),
)
CODE_LOADING_ENV = tuple(n for n, _ in LOADS + SEARCHES)
# Values that turn a plugin variable off rather than load anything.
_DISABLING = ("", "none", "0")  # NCCL plugins: none; PYTHONBREAKPOINT: 0
# Variables whose value is a module:Class (imported from sys.path), not a path.
_IMPORT_NAMES = ("TRITON_CACHE_MANAGER", "TRITON_REMOTE_CACHE_BACKEND", "PYTHONBREAKPOINT")
# Examples in KV5D012's text of names SGLang does NOT read (a typo of one of its
# variables, a fork's variable); composed from the table's names, which are SGLang's.
_TYPO_EXAMPLE = USE_AITER_ENV.replace("AITER", "AITR")
_FORK_EXAMPLE = f"{ENV_PREFIX}ROCM_USE_AITER_LINEAR_SHUFFLE"


@_rule(
    "KV5D012",
    WARNING,
    f"{ENV_PREFIX}* variable the installed SGLang never reads",
    f"""
    SGLang silently ignores environment variables it does not know, so a typo
    (`{_TYPO_EXAMPLE}`) or a variable that only a fork reads (for example
    `{_FORK_EXAMPLE}`) does nothing. The names SGLang reads
    come from a scan of the installed package's sources (the `Envs`
    declarations in `environ.py` and every `{ENV_PREFIX}*` name in its code), done
    once per process. sglang-kv5d's own `SGLANG_KV5D*` variables are judged by
    its switch registry instead: a `SGLANG_KV5D_*` name that is not a switch
    (`SGLANG_KV5D_STRICTT`) fires too.

    Fires (as a warning) for each such variable in the launch environment and
    suggests the closest known name when there is one.
    """,
    fix='rename the variable to the suggested name, or remove it (ignore the warning if another program reads it).',
)
def _kv5d012(ctx: Context, rule: Rule):
    for name, close in _config.unknown_own_names(ctx.env):
        yield rule.finding(
            f"{name} is set but sglang-kv5d has no such switch" + (f"; did you mean {close}?" if close else ""),
            (f"rename it to {close}" if close else f"remove {name}") + " (the README lists every switch)",
        )
    known = ctx.known_env
    if known is None:
        return
    names = sorted(n for n in ctx.env if n.startswith(ENV_PREFIX))
    exact = {k for k in known if not k.endswith("_")}
    prefixes = tuple(k for k in known if k.endswith("_") and len(k) > len(ENV_PREFIX))
    for name in names:
        if name == "SGLANG_KV5D" or name.startswith("SGLANG_KV5D_"):
            continue
        if name in exact or (prefixes and name.startswith(prefixes)):
            continue
        close = difflib.get_close_matches(name, sorted(exact), n=1, cutoff=0.85)
        hint = f"; did you mean {close[0]}?" if close else ""
        yield rule.finding(
            f"{name} is set but the installed SGLang never reads it (a typo, or a variable only a fork reads){hint}",
            (f"rename it to {close[0]}" if close else f"remove {name}") + " (or ignore this warning if another program reads it)",
        )


@_rule(
    "KV5D013",
    ERROR,
    "An sglang-kv5d switch has a value it does not accept",
    f"""
    Every `SGLANG_KV5D*` variable has a type and a set of accepted values (the
    README's switch table, generated from `sglang_kv5d.config`). An invalid one
    would otherwise be read as something the operator did not ask for:
    `SGLANG_KV5D=maybe` leaves the overlay off (so SGLang's unpatched 5D code
    runs), `SGLANG_KV5D_ATTN_IMPL=cuda` falls back to `auto`. Inside SGLang,
    activation logs one warning per invalid switch naming what it assumed.

    Fires for each such variable in the launch environment, and for an
    `SGLANG_KV5D` value in the shell or the profile that the launcher replaces
    with `1` (a plain `python -m {LAUNCH_SERVER}` from the same shell
    would run without the overlay). Patch names in `SGLANG_KV5D_PATCHES` must
    be known patches.
    """,
    fix="set the variable to one of the values the message lists, or unset it; the README's switch table lists every switch.",
)
def _kv5d013(ctx: Context, rule: Rule):
    if ctx.in_sglang:
        return
    for p in _config.problems(ctx.env, owners=(_config.OURS,), known_patches=ctx.known_patches):
        yield rule.finding(f"{p.message()} (sglang-kv5d would assume {p.switch.assumed})", p.fix)
    for name, value, origin in ctx.replaced:
        if name != _config.GATE:
            continue
        _, problem = _config.read(name, {name: value})
        if problem is not None:
            yield rule.finding(
                f"{problem.message()} (from the {origin}); the launcher sets {name}=1 for SGLang, but any "
                "other program started with this value runs without the overlay",
                problem.fix,
            )


def _entries(name: str, value: str):
    """The paths in ``value``: PATH-like lists split on ':' (LD_PRELOAD also on
    spaces); module:Class names have none."""
    if name in _IMPORT_NAMES:
        return []
    if name == "LD_PRELOAD":
        return [e for chunk in value.split() for e in chunk.split(":")]
    if name in ("CC", "PYTHONSTARTUP", "BASH_ENV", "ENV", "PYTHONHOME", "PYTHONUSERBASE", "TRITON_HOME",
                "TRITON_CACHE_DIR", "TRITON_OVERRIDE_DIR", "CUDA_INJECTION64_PATH", "TRITON_LIBHIP_PATH",
                "TRITON_LIBCUDA_PATH", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN",
                "NCCL_ENV_PLUGIN", _config.PEER_PATH):
        return [value]
    return value.split(":")


def path_problem(path: str, *, searched: bool, uid: Optional[int] = None) -> Optional[str]:
    """Why code at ``path`` could be planted by someone else, or None.

    ``searched``: a directory searched for code (PATH-like) rather than a file
    to load. Relative and empty entries depend on the working directory. The
    path itself (or, when it does not exist yet, its nearest existing ancestor,
    where it could be created) must not be writable by group or others and
    must be owned by you or root; its ancestors must not be replaceable
    (group/world-writable without the sticky bit, or owned by another user).
    A bare name without '/' in a file variable is looked up on a search path
    (judged there) and is not judged here."""
    if not searched and path and "/" not in path:
        return None
    if not path:
        return "an empty entry means the current working directory"
    if not os.path.isabs(path):
        return f"{path!r} is relative: the server's working directory decides what it names"
    me = os.geteuid() if uid is None else uid
    target = os.path.normpath(path)
    while not os.path.exists(target) and target != os.path.dirname(target):
        target = os.path.dirname(target)
    first = True
    node = target
    while True:
        try:
            st = os.stat(node)
        except OSError:
            return None
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        if st.st_uid not in (me, 0):
            return f"{node} is owned by uid {st.st_uid}, not by you or root"
        if writable and (first or not sticky):
            who = "others" if st.st_mode & stat.S_IWOTH else "its group"
            what = "anyone can create files in it" if stat.S_ISDIR(st.st_mode) else "anyone can replace it"
            return f"{node} is writable by {who} ({oct(st.st_mode & 0o7777)}): {what}"
        parent = os.path.dirname(node)
        if parent == node:
            return None
        node, first = parent, False


def _rows_doc(rows) -> str:
    return "\n".join(f"    - `{n}`: {src}" for n, src in rows)


@_rule(
    "KV5D014",
    WARNING,
    "A variable that changes which code programs load is set, or points somewhere unsafe",
    f"""
    A profile is a file that may have been pasted or planted; `--kv5d-env` may
    come from a script; an exported variable may point into a directory other
    users can write. Each variable below makes the server's processes (or the
    programs they start) load or run code from where it says.

    Variables whose value names code to load or run. Fires when the profile's
    `[env]` or `--kv5d-env` sets one (a launch profile rarely has a reason to
    inject a tool or plugin; `none` / empty, which turn NCCL plugins off, do not
    fire), and when an exported value names an unsafe path:

{_rows_doc(LOADS)}

    Variables whose value says where code is looked up. Setting them is normal
    (`PATH`, `LD_LIBRARY_PATH` to the ROCm libraries), so they fire only when an
    entry is unsafe, whoever set it:

{_rows_doc(SEARCHES)}

    Unsafe means: empty or relative (the working directory the server starts in
    decides what it names, and an empty `PATH` entry is the working directory),
    writable by group or others (anyone can plant a library, a module or a
    cached kernel there; for a path that does not exist yet, its nearest
    existing directory, where it could be created), or owned by a user other
    than you or root; a directory above it must not be replaceable either
    (group/world-writable without the sticky bit, or another user's). A bare
    library name (no `/`) is resolved through the search paths, which are judged
    themselves. A `PYTHON*` variable set to the empty string is ignored by
    Python, so it does not fire. `HSA_TOOLS_REPORT_LOAD_FAILURE` only reports a failed tool load
    and loads nothing, so it is not listed. Inside SGLang (the server-args
    guard) this rule is silent: the processes have loaded their code already.
    """,
    fix="remove the variable from the profile's [env] / --kv5d-env unless you meant to load that code; point "
        "search paths only at absolute directories that you or root own and only you can write.",
)
def _kv5d014(ctx: Context, rule: Rule):
    if ctx.in_sglang or ctx.env_origins is None:
        return
    loads = {n for n, _ in LOADS}
    for name in CODE_LOADING_ENV:
        value = ctx.env.get(name)
        if value is None or (value == "" and name.startswith("PYTHON")):
            continue  # CPython ignores a PYTHON* variable set to the empty string (as if unset)
        origin = ctx.env_origins.get(name)
        is_load = name in loads
        if is_load and value.strip().lower() in _DISABLING:
            continue
        problems = []
        for entry in _entries(name, value):
            why = path_problem(entry, searched=not is_load)
            if why:
                problems.append(why)
        shown = f"{name}={value!r} " + (f"is set by the {origin}" if origin else "(exported)")
        if problems:
            yield rule.finding(
                f"{shown} and loads code from an unsafe place: {'; '.join(dict.fromkeys(problems))}",
                f"point {name} only at absolute paths that you or root own and only you can write"
                + (f", or remove it from the {origin}" if origin else ""),
            )
        elif is_load and origin:
            yield rule.finding(
                f"{shown}: it makes every SGLang process (or a program it runs) load or run that code",
                f"remove {name} from the {origin} unless you meant it",
            )
