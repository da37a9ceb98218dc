"""``sglang-kv5d doctor``: is the overlay working on this machine, and if not, why.

Each check is a :class:`Check` with a status (ok | warn | fail), a one-line
detail and, when not ok, a fix. A ``fail`` on anything the overlay needs makes
the command exit non-zero. Paste the output (or ``--json``) into bug reports.

The report is a list of sections (:data:`SECTIONS`), each a function of a
:class:`DoctorContext` returning checks, run in order; a new section is one
:class:`Section` appended there (options for it travel in
``DoctorContext.options``).
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
import sysconfig
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional

from . import config
from . import platform as _platform
from . import versions as _versions
from ._version import __version__
from .surface import PACKAGE as SGLANG_PACKAGE
from .surface import PLUGIN_GROUP

OK, WARN, FAIL = "ok", "warn", "fail"
PLUGIN_NAME = "kv5d"  # our entry point's name in SGLang's plugin group (pyproject.toml)


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _version_of(dist: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def check_versions() -> List[Check]:
    out = [Check("python", OK, f"{platform.python_version()} ({sys.executable})"),
           Check("sglang-kv5d", OK, __version__)]
    for dist, needed in (("wrapt", True), ("click", True), ("torch", True), ("triton", False)):
        v = _version_of(dist)
        if v is None and dist == "triton":
            v = _version_of("pytorch-triton-rocm")
        if v:
            out.append(Check(dist, OK, v))
        else:
            out.append(Check(dist, FAIL if needed else WARN, "not installed",
                             f"install {dist} (for torch/triton: the build matching your ROCm/CUDA stack)"))
    return out


def check_sglang_install() -> Optional[Check]:
    """A warning when the ``sglang`` that would be imported looks like a stand-in."""
    problem = _versions.stand_in_problem()
    if problem is None:
        return None
    return Check("sglang install", WARN, problem + "; the verdict above uses the package's own version",
                 "reinstall SGLang with pip into this environment, and remove other 'sglang' packages from "
                 "the path (PYTHONPATH, the working directory)")


def check_environment(environ=None) -> List[Check]:
    """Every switch through the registry: invalid values fail with their rule id and fix."""
    env = os.environ if environ is None else environ
    out: List[Check] = []
    from .activation.registry import known_patch_names

    for p in config.problems(env, known_patches=known_patch_names()):
        out.append(Check(f"switch {p.name}", FAIL, f"{p.rule}: {p.message()}; sglang-kv5d assumes {p.switch.assumed}"
                         if p.switch.owner == config.OURS else f"{p.rule}: {p.message()}", p.fix))
    for name, close in config.unknown_own_names(env):
        out.append(Check(f"switch {name}", WARN, "KV5D012: sglang-kv5d has no such switch"
                         + (f"; did you mean {close}?" if close else ""),
                         f"rename it to {close}" if close else f"unset {name}"))
    directory = config.status_dir(env)
    if directory and os.path.isdir(directory):
        from .state import status_dir_problem

        problem = status_dir_problem(directory)
        if problem:
            out.append(Check(f"switch {config.STATUS_DIR}", WARN, f"{problem}; no status files will be written",
                             "use a directory only you can write (mkdir -m 700 DIR)"))
    shown = ", ".join(f"{k}={env[k]!r}" for k in config.SWITCHES if k in env)
    out.insert(0, Check("environment", OK, shown or "no sglang-kv5d switches set"))
    return out


def check_sglang(environ=None) -> Check:
    verdict = _versions.verdict(allow_untested=config.allow_untested(environ))
    status = {
        _versions.SUPPORTED: OK,
        _versions.BEST_EFFORT: WARN,
    }.get(verdict.kind, OK if verdict.allowed else FAIL)
    fix = "" if status == OK else (
        "install SGLang" if verdict.kind == _versions.MISSING else
        f"use SGLang {_versions.SUPPORTED_RANGE[0]} .. {_versions.SUPPORTED_RANGE[1]}")
    return Check("sglang", status, f"{verdict.version or 'missing'}: {verdict.kind} - {verdict.message}", fix)


def check_platform(info: _platform.PlatformInfo) -> Check:
    """The platform (decided like ``sglang-kv5d check``), the GPU and its fp8 KV dtype."""
    detail = f"{info.platform} ({info.how})"
    if info.device:
        detail += f", {info.device} ({info.arch})"
    detail += f", fp8 KV cache dtype {info.fp8}"
    if info.error:
        return Check("platform", FAIL, info.error, "install torch (the build matching your ROCm/CUDA stack)")
    if info.platform != _platform.ROCM:
        return Check("platform", WARN, detail + "; the 5D layout is only consumed on ROCm (aiter)",
                     "nothing to fix for development; serve 5D on MI300/MI355")
    return Check("platform", OK, detail)


def check_aiter(platform_name: str) -> Check:
    try:
        mod = importlib.import_module("aiter")
        version = getattr(mod, "__version__", None) or _version_of("amd-aiter") or "unknown version"
        missing = []
        try:
            gluon = importlib.import_module("aiter.ops.triton.gluon.pa_decode_gluon")
            for n in ("pa_decode_gluon", "get_recommended_splits"):
                if not hasattr(gluon, n):
                    missing.append(n)
        except Exception as exc:  # aiter's module code runs on import (Triton, HIP probes): any error means unusable
            missing.append(f"pa_decode_gluon module ({type(exc).__name__})")
        if not hasattr(mod, "mha_batch_prefill_func"):
            missing.append("mha_batch_prefill_func")
        if missing:
            return Check("aiter", WARN, f"{version}, missing {', '.join(missing)}: the portable Triton path is used",
                         "install an aiter build with pa_decode_gluon (v0.1.10 or newer)")
        return Check("aiter", OK, f"{version}, pa_decode_gluon and mha_batch_prefill_func present")
    except Exception as exc:  # importing aiter runs its own code: whatever it raises is the finding, reported
        status = FAIL if platform_name == "rocm" else WARN
        return Check("aiter", status, f"not importable ({type(exc).__name__}: {str(exc)[:120]}); "
                     "5D attention uses the portable Triton path",
                     "install aiter on ROCm servers" if platform_name == "rocm" else "")


def check_entry_point(environ=None) -> Check:
    from importlib.metadata import entry_points

    env = os.environ if environ is None else environ
    eps = [ep for ep in entry_points(group=PLUGIN_GROUP) if ep.name == PLUGIN_NAME]
    if not eps:
        return Check("plugin entry point", FAIL, f"{PLUGIN_NAME} is not registered in group {PLUGIN_GROUP}",
                     "reinstall sglang-kv5d into the same environment as SGLang")
    allowed = [x.strip() for x in env.get(config.PLUGINS, "").split(",") if x.strip()]
    if allowed and PLUGIN_NAME not in allowed:
        return Check("plugin entry point", WARN,
                     f"discovered ({eps[0].value}) but {config.PLUGINS}={env[config.PLUGINS]} filters it out; "
                     "the .pth bootstrap still activates the overlay",
                     f"add {PLUGIN_NAME} to {config.PLUGINS}")
    return Check("plugin entry point", OK, f"{PLUGIN_NAME} -> {eps[0].value}")


def find_pth() -> Optional[str]:
    dirs = []
    try:
        import site

        dirs.extend(site.getsitepackages())
        dirs.append(site.getusersitepackages())
    except AttributeError:  # an old virtualenv's site module has no getsitepackages
        pass
    dirs.append(sysconfig.get_paths()["purelib"])
    for d in dict.fromkeys(dirs):
        path = os.path.join(d, "sglang_kv5d.pth")
        if os.path.exists(path):
            return path
    return None


def check_pth() -> Check:
    path = find_pth()
    if path is None:
        return Check(".pth bootstrap", FAIL, "sglang_kv5d.pth not found in site-packages",
                     "install sglang-kv5d from its wheel (pip install sglang-kv5d), not with a tool that drops root files")
    return Check(".pth bootstrap", OK, path)


def check_patches(environ=None) -> List[Check]:
    from .activation import probe_patches
    from .activation.install import NOT_APPLICABLE
    from .state import DISABLED, SKIPPED

    env = os.environ if environ is None else environ
    five_d = config.wants_5d(env)
    left_out: List[str] = []
    out = []
    for p in probe_patches(import_modules=True, environ=environ):  # p.state: the gate activation applies
        name = f"patch {p.name}"
        if p.state == SKIPPED and not p.required_for_5d and p.reason.startswith(NOT_APPLICABLE):
            out.append(Check(name, OK, p.reason))  # its SGLang surface is newer than this SGLang
        elif not p.ok:
            out.append(Check(name, FAIL if (p.required_for_5d or p.internal) else WARN, p.reason,
                             "this SGLang differs from the tested ones: upgrade sglang-kv5d or use a tested SGLang"))
        elif p.state == SKIPPED:
            out.append(Check(name, FAIL if p.required_for_5d else WARN, f"probe ok, but skipped: {p.state_reason}"))
        elif p.state == DISABLED:
            if p.required_for_5d:
                left_out.append(p.name)
            out.append(Check(name, (FAIL if five_d else WARN) if p.required_for_5d else OK,
                             f"probe ok, disabled by {config.PATCHES}"
                             + (": vectorized_5d is refused without it (KV5D011)" if p.required_for_5d else ""),
                             f"add {p.name} to {config.PATCHES}" if p.required_for_5d else ""))
        else:
            out.append(Check(name, OK, p.reason))
    if left_out:
        out.append(selection_check(left_out, env, five_d))
    return out


SELECTION_CHECK = "patch selection"


def selection_check(left_out: List[str], environ: Mapping[str, str], five_d: bool) -> Check:
    """The verdict on a ``SGLANG_KV5D_PATCHES`` that leaves out patches 5D needs:
    FAIL when this environment asks for 5D, else WARN (an nhd-only use is fine)."""
    names = ", ".join(left_out)
    value = environ.get(config.PATCHES, "")
    detail = (f"{config.PATCHES}={value!r} leaves out {names}, which vectorized_5d needs: `check` and `launch` "
              "refuse a 5D launch (KV5D011) and SGLang raises Kv5dNotReadyError at the first 5D pool build")
    if not config.strict(environ):
        detail += f"; with {config.STRICT}=0 it would serve 5D with {names} unpatched (silently wrong)"
    if not five_d:
        detail += f" ({config.LAYOUT} is not vectorized_5d here, so nhd use is unaffected)"
    return Check(SELECTION_CHECK, FAIL if five_d else WARN, detail,
                 f"add {names} to {config.PATCHES}, or unset it to select every patch")


def _spawn_probe_child(queue) -> None:
    """Runs in a ``spawn`` child: import SGLang and report whether the overlay activated."""
    import json

    try:
        importlib.import_module(SGLANG_PACKAGE)  # the .pth bootstrap activates on this import

        from .activation import status

        st = status()
        queue.put(json.dumps({"active": st.active, "routes": st.routes, "pid": os.getpid()}))
    except Exception as exc:  # a child process: whatever SGLang's import raises is the finding, sent to the parent
        queue.put(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))


def check_spawn(timeout: float = 120.0) -> Check:
    """A multiprocessing ``spawn`` child (how SGLang starts its schedulers) with
    SGLANG_KV5D=1 must activate the overlay on its own."""
    import json
    import multiprocessing
    import queue as _queue

    previous = os.environ.get(config.GATE)
    os.environ[config.GATE] = "1"  # inherited by the child at start
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_spawn_probe_child, args=(q,), name="sglang-kv5d-spawn-probe")
    try:
        proc.start()
    finally:
        if previous is None:
            os.environ.pop(config.GATE, None)
        else:
            os.environ[config.GATE] = previous
    try:
        data = json.loads(q.get(timeout=timeout))
    except _queue.Empty:
        proc.kill()
        return Check("spawn probe", FAIL, f"spawn child did not report in {timeout:.0f} s")
    finally:
        proc.join(10)
    if "error" in data:
        return Check("spawn probe", FAIL, f"spawn child failed: {data['error']}",
                     "run `python -c 'import sglang'` with SGLANG_KV5D=1 to see the error")
    if data.get("active"):
        return Check("spawn probe", OK, f"spawn child pid {data['pid']} activated via {'+'.join(data['routes'])}")
    return Check("spawn probe", FAIL, "spawn child with SGLANG_KV5D=1 did not activate the overlay",
                 "check that sglang_kv5d.pth is in site-packages and children run without -S")


@dataclass
class DoctorContext:
    """What sections share: the environment, the progress callback, results of
    earlier sections (``facts``), and command-line options (``options``)."""

    environ: Mapping[str, str]
    spawn: bool = True
    progress: Callable[[str], None] = lambda _msg: None
    facts: Dict[str, Any] = field(default_factory=dict)
    options: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    name: str  # shown as progress
    run: Callable[[DoctorContext], List[Check]]


def _versions_section(ctx: DoctorContext) -> List[Check]:
    out = check_versions() + [check_sglang(ctx.environ)]
    install = check_sglang_install()
    return out + ([install] if install else [])


def _platform_section(ctx: DoctorContext) -> List[Check]:
    info = _platform.describe_platform()
    ctx.facts["platform"] = info
    return [check_platform(info), check_aiter(info.platform)]


def _install_section(ctx: DoctorContext) -> List[Check]:
    return [check_entry_point(ctx.environ), check_pth()]


def _patches_section(ctx: DoctorContext) -> List[Check]:
    if _versions.installed_sglang_version() is None:
        return []
    from .launch.quiet import import_noise_note, quiet_sglang_imports

    noise: List[str] = []
    with quiet_sglang_imports(noise):  # SGLang's import-time prints, explained once below
        checks = check_patches(ctx.environ)
    note = import_noise_note(noise)
    if note:
        checks.append(Check("sglang import output", OK, note))
    return checks


def _spawn_section(ctx: DoctorContext) -> List[Check]:
    return [check_spawn()] if ctx.spawn else []


def _kernels_section(ctx: DoctorContext) -> List[Check]:
    """With ``options["kernels_for"]`` (an arch) or a GPU here: every kernel
    compiled for it without launching (``sglang_kv5d.kernel_report``)."""
    arch = ctx.options.get("kernels_for")
    if arch is None:
        info = ctx.facts.get("platform")
        if info is None or not info.device:
            return [Check("kernels", OK, "no GPU here: not compiled",
                          f"sglang-kv5d doctor --kernels-for {'|'.join(_platform.KNOWN_ARCHS)} compiles them for an "
                          "arch on any machine")]
        arch = "device"
    from .kernel_report import summarize

    ctx.progress(f"kernels: compiling every kernel for {arch} (minutes on a small CPU; Triton caches them)")
    try:
        rows = kernel_rows_with_progress(arch, ctx.progress)
    except (RuntimeError, OSError) as exc:
        return [Check("kernels", FAIL, str(exc), "run python -m sglang_kv5d.kernel_report --arch ARCH to see why")]
    triton = rows[0]["triton"] if rows else "?"
    return [Check("kernels", OK, f"{len(rows)} kernel variants compiled for {arch} with Triton {triton}")] + [
        Check(f"kernel {e['name']}", e["status"], e["detail"], e["fix"]) for e in summarize(rows)]


_PROGRESS_TAG = "KV5D-PROGRESS "
# The child of kernel_rows_with_progress: kernel_report.report(arch) one case at a
# time, a progress line on stderr before each, the rows as JSON on stdout.
_KERNEL_CHILD = f"""
import json, sys
from sglang_kv5d import kernel_report as kr
arch, kinds = sys.argv[1], (sys.argv[2].split(",") if len(sys.argv) > 2 else None)
try:
    target = kr._target_named(arch)
except ValueError as exc:
    print(f"error: {{exc}}", file=sys.stderr)
    sys.exit(2)
selected = kr.cases(kinds)
rows = []
for i, case in enumerate(selected, 1):
    print(f"{_PROGRESS_TAG}{{i}}/{{len(selected)}} {{case.kernel}}: {{case.label}}", file=sys.stderr, flush=True)
    rows += kr.run_cases(target, [case], buffer_ops=None)
sys.stdout.write(json.dumps(rows))
"""


def kernel_rows_with_progress(arch: str, progress: Callable[[str], None], *, kinds: Optional[List[str]] = None,
                              timeout: float = 1200.0) -> List[Dict[str, Any]]:
    """``kernel_report.report(arch)`` rows (default buffer ops) compiled in a
    fresh interpreter without TRITON_INTERPRET (as ``report_in_subprocess``),
    calling ``progress("kernels k/n: family: case")`` as each case starts, so a
    long compile (minutes for gfx942 on a 2-core CPU) shows how far it is.
    RuntimeError naming the cause when the child gives no rows."""
    import json
    import subprocess
    import tempfile
    import threading

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-c", _KERNEL_CHILD, arch] + ([",".join(kinds)] if kinds else [])
    tail: List[str] = []
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.PIPE, text=True, errors="replace")

        def pump() -> None:
            for line in proc.stderr:
                line = line.rstrip("\n")
                if line.startswith(_PROGRESS_TAG):
                    progress("kernels " + line[len(_PROGRESS_TAG):])
                elif line.strip():
                    tail[:] = [line]

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"compiling the kernels for {arch} took over {timeout:.0f} s") from None
        finally:
            reader.join(timeout=5)
        out.seek(0)
        text = out.read()
    try:
        rows = json.loads(text)
    except ValueError:
        raise RuntimeError(f"the kernel report for {arch} failed (exit {proc.returncode}): "
                           f"{(tail or ['(no output)'])[-1][:300]}") from None
    if not isinstance(rows, list):
        raise RuntimeError(f"the kernel report for {arch} is not a list of rows")
    return rows


PD_CHECK = "pd handshake"
PD_HANDSHAKE_SINCE = "0.5.23"  # SGLang's get_pd_kv_layout / PrefillServerInfo.kv_layout


def check_pd_handshake(environ=None, platform_info=None, geometry=None) -> Check:
    """What this node would report as ``kv_layout`` in the PD bootstrap handshake
    (pd-layout-handshake; sglang_kv5d.disagg.layout). The model's geometry is not
    known here, so the descriptor is computed from the KV pool at startup; with
    ``geometry`` (a list of sub-pool field dicts, as ``layout.format_descriptor``
    takes them) the exact string is shown."""
    from .disagg import layout as _pd

    environ = os.environ if environ is None else environ
    version = _versions.installed_sglang_version()
    key = _versions.parse_version_or_none(version) if version else None
    if key is not None and key < _versions.parse_version_or_none(PD_HANDSHAKE_SINCE):
        return Check(PD_CHECK, OK, f"SGLang {version} has no PD layout handshake (kv_layout exists from {PD_HANDSHAKE_SINCE}): "
                                   "this node reports nothing; pair 5D PD roles by configuration only")
    if geometry:
        try:
            return Check(PD_CHECK, OK, f"reports {_pd.format_descriptor(geometry)}")
        except (TypeError, ValueError) as exc:
            return Check(PD_CHECK, WARN, f"the geometry given cannot be described: {exc}")
    layout = "vectorized_5d" if config.wants_5d(environ) else "nhd"
    fp8 = getattr(platform_info, "fp8", None) or _platform.FP8_E4M3FN
    x = "x16 for fp8, x8 for bf16" if layout == "vectorized_5d" else "x0"
    return Check(PD_CHECK, OK, (
        f"computed from the KV pool at startup: {_pd.TAG}|full={layout}:<X>:<torch KV dtype>:p<page>:d<head_dim>:"
        f"dv<v_head_dim>:h<KV heads per rank>[|swa=...] ({x}; an fp8 KV cache here is {fp8})"))


SECTIONS: List[Section] = [
    Section("versions", _versions_section),
    Section("platform", _platform_section),
    Section("install", _install_section),
    Section("environment", lambda ctx: check_environment(ctx.environ)),
    Section("patch probes (imports SGLang)", _patches_section),
    Section(PD_CHECK, lambda ctx: [check_pd_handshake(ctx.environ, ctx.facts.get("platform"),
                                                      ctx.options.get("pd_geometry"))]),
    Section("spawn probe", _spawn_section),
    Section("kernels", _kernels_section),
]


def run_doctor(*, progress: Optional[Callable[[str], None]] = None, spawn: bool = True,
               environ: Optional[Mapping[str, str]] = None, options: Optional[Dict[str, Any]] = None,
               sections: Optional[List[Section]] = None) -> List[Check]:
    ctx = DoctorContext(environ=os.environ if environ is None else environ, spawn=spawn,
                        progress=progress or (lambda _msg: None), options=dict(options or {}))
    checks: List[Check] = []
    for section in SECTIONS if sections is None else sections:
        ctx.progress(section.name)
        checks += section.run(ctx)
    return checks


def render(checks: List[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status.upper():4}  {c.name.ljust(width)}  {c.detail}")
        if c.fix and c.status != OK:
            lines.append(f"{'':4}  {'':{width}}  fix: {c.fix}")
    failed = sum(c.status == FAIL for c in checks)
    warned = sum(c.status == WARN for c in checks)
    lines.append("")
    verdict = "" if failed else ": the overlay can activate here"
    if not failed and any(c.name == SELECTION_CHECK and c.status != OK for c in checks):
        verdict += f", but not serve vectorized_5d ({SELECTION_CHECK} above)"
    lines.append(f"{failed} failure(s), {warned} warning(s)" + verdict)
    return "\n".join(lines)
