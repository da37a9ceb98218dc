"""The one registry of environment switches: sglang-kv5d's own ``SGLANG_KV5D*``
variables and the SGLang variables the launch rules read.

Every entry point reads them through :data:`SWITCHES` (the ``.pth`` gate's
finder, ``activate()``, ``doctor``, ``check`` / ``launch``, ``selftest``):

* :func:`read` returns ``(value, problem)``: the parsed value, or the value
  assumed for an invalid setting together with a :class:`Problem` naming the
  variable, what was assumed, the rule id and the fix;
* :func:`problems` lists every invalid setting in an environment (``check``
  and ``doctor`` report them as errors, activation as warnings);
* :func:`render_markdown_table` is the README's switch table (a test keeps the
  README in sync).

Adding a switch is one :class:`Switch` entry in :data:`SWITCHES` plus the code
that uses it. Standard library only; SGLang and torch are never imported.
Booleans of ours are parsed by :func:`parse_bool` and nothing else; SGLang's
own variables are parsed the way SGLang parses them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

GATE = "SGLANG_KV5D"
PATCHES = "SGLANG_KV5D_PATCHES"
STRICT = "SGLANG_KV5D_STRICT"
ALLOW_UNTESTED = "SGLANG_KV5D_ALLOW_UNTESTED"
STATUS_DIR = "SGLANG_KV5D_STATUS_DIR"
STATUS_READABLE = "SGLANG_KV5D_STATUS_READABLE"
ATTN_IMPL = "SGLANG_KV5D_ATTN_IMPL"
ATTN_PDL = "SGLANG_KV5D_ATTN_PDL"
DEBUG_BOUNDS = "SGLANG_KV5D_DEBUG_BOUNDS"
PEER_PATH = "SGLANG_KV5D_PEER_PATH"
# SGLang's own variables, named in the surface table
from .surface_names import ENV_KV_CACHE_LAYOUT as LAYOUT  # noqa: E402
from .surface_names import ENV_PLUGINS as PLUGINS  # noqa: E402
from .surface_names import ENV_USE_AITER as USE_AITER  # noqa: E402
from .surface_names import ENV_USE_HND_KVCACHE as HND  # noqa: E402

OURS = "sglang-kv5d"
SGLANG = "SGLang"

# The rule that reports an invalid value of one of our switches.
SWITCH_RULE = "KV5D013"

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
_BOOL_SPELLINGS = "1/true/yes/on or 0/false/no/off (any case)"
ATTN_IMPLS = ("auto", "aiter", "triton")
LAYOUTS = ("nhd", "vectorized_5d")
_PATCH_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def _env(environ: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    return os.environ if environ is None else environ


# --------------------------------------------------------------------------
# Parsers: one per kind of value. Each takes the raw string (never None) and
# returns the parsed value or raises ValueError with a message that starts
# with what is wrong.


def parse_bool(value: Optional[str], default: bool = False) -> bool:
    """The one boolean parser for sglang-kv5d's switches.

    '1/true/yes/on' -> True, '0/false/no/off' -> False (any case, surrounding
    spaces ignored), unset or empty -> ``default``. Anything else raises
    ValueError naming the accepted spellings.
    """
    if value is None or value.strip() == "":
        return default
    v = value.strip().lower()
    if v in TRUE_WORDS:
        return True
    if v in FALSE_WORDS:
        return False
    raise ValueError(f"{value!r} is not a boolean; use {_BOOL_SPELLINGS}")


def sglang_env_bool(value: Optional[str]) -> bool:
    """SGLang's ``EnvBool`` parse: true/1/yes/y (any case) is true; anything else false."""
    return value is not None and value.lower() in ("true", "1", "yes", "y")


def _parse_choice(choices: Tuple[str, ...], default: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        v = raw.strip().lower()
        if v == "":
            return default
        if v not in choices:
            raise ValueError(f"{raw!r} is not one of {', '.join(choices)}")
        return v

    return parse


def _parse_patch_names(raw: str) -> Optional[Tuple[str, ...]]:
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    bad = [n for n in names if not _PATCH_NAME_RE.match(n)]
    if bad:
        raise ValueError(f"{', '.join(repr(b) for b in bad)} is not a patch name (lower-case letters, digits, '-')")
    return names or None


def _parse_abs_path(raw: str) -> Optional[str]:
    v = raw.strip()
    if not v:
        return None
    if not os.path.isabs(v):
        raise ValueError(f"{raw!r} is not an absolute path (each SGLang process has its own working directory)")
    return v


def _parse_layout(raw: str) -> str:
    # SGLang: ``envs.SGLANG_AITER_KV_CACHE_LAYOUT.get().lower()``, no trimming; anything
    # but the two layouts raises ValueError when the KV pool is built.
    v = raw.lower()
    if v not in LAYOUTS:
        raise ValueError(f"{raw!r} is not a layout SGLang knows ({' or '.join(LAYOUTS)}, any case, no spaces)")
    return v


# --------------------------------------------------------------------------
# The registry


_DEFAULT = object()  # Switch.invalid: assume the default for an invalid value


@dataclass(frozen=True)
class Switch:
    name: str
    owner: str  # OURS | SGLANG (who reads it)
    values: str  # accepted values, as the README shows them
    default: Any  # the parsed value when unset (or empty, for ours)
    default_text: str  # the default as the README shows it
    meaning: str  # one line
    parse: Callable[[str], Any]  # raw (set) value -> parsed value, ValueError when invalid
    rule: str  # the rule that reports an invalid value (check / doctor)
    assumed: str = ""  # what activation assumes for an invalid value
    fix: str = ""  # how to fix an invalid value
    invalid: Any = _DEFAULT  # the parsed value assumed for an invalid setting (default: ``default``)

    def read(self, environ: Optional[Mapping[str, str]] = None) -> Tuple[Any, Optional["Problem"]]:
        raw = _env(environ).get(self.name)
        if raw is None:
            return self.default, None
        try:
            return self.parse(raw), None
        except ValueError as exc:
            return (self.default if self.invalid is _DEFAULT else self.invalid), Problem(self, raw, str(exc))


@dataclass(frozen=True)
class Problem:
    switch: Switch
    value: str
    why: str

    @property
    def name(self) -> str:
        return self.switch.name

    @property
    def rule(self) -> str:
        return self.switch.rule

    @property
    def fix(self) -> str:
        return self.switch.fix

    def message(self) -> str:
        return f"{self.name}={self.value!r}: {self.why}"

    def activation_warning(self) -> str:
        if self.switch.owner == SGLANG:  # SGLang reads it, and refuses it later
            return f"{self.message()}; SGLang will refuse it ({self.rule}; fix: {self.fix})"
        return f"{self.message()}; assuming {self.switch.assumed} ({self.rule}; fix: {self.fix})"


def _bool_switch(name: str, default: bool, meaning: str, fix: str) -> Switch:
    return Switch(
        name, OURS, "`1`/`true`/`yes`/`on`, `0`/`false`/`no`/`off`", default, "on" if default else "off", meaning,
        lambda raw, _d=default: parse_bool(raw, _d), SWITCH_RULE, assumed="on" if default else "off", fix=fix,
    )


SWITCHES: Dict[str, Switch] = {
    s.name: s
    for s in (
        _bool_switch(
            GATE, False,
            "turns the overlay on in every Python process that inherits it; off, the package has no effect on "
            "any Python program (it imports neither SGLang nor torch)",
            f"export {GATE}=1 to turn the overlay on, or {GATE}=0 (or unset it) for plain SGLang",
        ),
        Switch(
            PATCHES, OURS, "comma-separated patch names", None, "all patches",
            "allow list of the patches to apply (`sglang-kv5d patches` lists them)",
            _parse_patch_names, SWITCH_RULE, assumed="no selectable patch (only the internal ones)",
            fix=f"list patch names from `sglang-kv5d patches`, comma-separated, or unset {PATCHES}",
            invalid=(),  # fail closed: an invalid allow list selects nothing, never every patch
        ),
        _bool_switch(
            STRICT, True,
            "when 5D is requested and a patch 5D needs did not apply, building the first KV pool or AITER "
            "backend raises `Kv5dNotReadyError`; off, it only warns",
            f"export {STRICT}=1 (fail closed) or {STRICT}=0 (warn only), or unset it",
        ),
        _bool_switch(
            ALLOW_UNTESTED, False, "patches an SGLang newer than the newest tested release",
            f"export {ALLOW_UNTESTED}=1 to patch an untested SGLang, or unset it",
        ),
        Switch(
            STATUS_DIR, OURS, "an absolute directory path", None, "no status files",
            "each process writes its status to `<dir>/<pid>.json` (mode 0600; a world-writable directory "
            "without the sticky bit, one owned by another user, or a symlink on its path owned by another user, "
            "is refused)",
            _parse_abs_path, SWITCH_RULE, assumed="no status files",
            fix=f"export {STATUS_DIR}=/an/absolute/directory you own, or unset it",
        ),
        _bool_switch(
            STATUS_READABLE, False, "status files are written 0644 instead of 0600 (only in a directory you own)",
            f"export {STATUS_READABLE}=1 for 0644 status files, or unset it",
        ),
        Switch(
            ATTN_IMPL, OURS, "`auto`, `aiter`, `triton`", "auto", "auto",
            "5D attention implementation: aiter when importable and it has a kernel, else the portable Triton "
            "kernels (`auto`); or always one of them",
            _parse_choice(ATTN_IMPLS, "auto"), SWITCH_RULE, assumed="auto",
            fix=f"export {ATTN_IMPL}=auto (or aiter / triton), or unset it",
        ),
        _bool_switch(
            ATTN_PDL, True,
            "programmatic dependent launch of the 5D decode reduce kernel (NVIDIA sm_90+ only; no effect elsewhere)",
            f"export {ATTN_PDL}=0 to launch the reduce kernel plainly, or unset it",
        ),
        _bool_switch(
            DEBUG_BOUNDS, False,
            "debugging only: the 5D attention kernels' metadata (block ids, lengths, `qo_indptr`) is read on the "
            "host before every launch and a value the kernels would clamp or mask raises `ValueError` (a device "
            "sync per call; skipped inside CUDA-graph capture)",
            f"unset {DEBUG_BOUNDS} (or {DEBUG_BOUNDS}=0) for serving",
        ),
        Switch(
            PEER_PATH, OURS, "an absolute directory path", None, "unset",
            "`sglang-kv5d bench` only: a directory holding a copy of SGLang's Triton decode kernel "
            "(`sglang_peer`) to time against when the installed SGLang has none; it is put on `sys.path` and its "
            "code runs, so it (and the folders above it) must be owned by you or root and not group/world-writable",
            _parse_abs_path, SWITCH_RULE, assumed="unset (no extra peer)",
            fix=f"export {PEER_PATH}=/an/absolute/directory only you can write, or unset it",
        ),
        Switch(
            LAYOUT, SGLANG, "`nhd`, `vectorized_5d` (any case, no spaces)", "nhd", "nhd",
            "`vectorized_5d` requests AITER's SHUFFLE 5D KV cache (SGLang raises at KV-pool build time for "
            "any other value)",
            _parse_layout, "KV5D001", assumed="nhd",
            fix=f"export {LAYOUT}=vectorized_5d for the SHUFFLE 5D layout, or nhd (or unset it) for the default",
        ),
        Switch(
            USE_AITER, SGLANG, "`1`/`true` (other values read as false by part of SGLang)", False, "off",
            "AITER kernels on ROCm; read once at import; 5D needs it (KV5D002)",
            sglang_env_bool, "KV5D002",
        ),
        Switch(
            HND, SGLANG, "`true`/`1`/`yes`/`y` is true", False, "off",
            "HND KV layout; silently wins over `vectorized_5d` (KV5D007)",
            sglang_env_bool, "KV5D007",
        ),
        Switch(
            PLUGINS, SGLANG, "comma-separated plugin names", None, "all plugins",
            "SGLang's plugin allow list; without `kv5d` the `.pth` route still activates the overlay "
            "(`doctor` says so)",
            lambda raw: tuple(x.strip() for x in raw.split(",") if x.strip()) or None, "",
        ),
    )
}

OWN_SWITCHES = tuple(n for n, s in SWITCHES.items() if s.owner == OURS)


def read(name: str, environ: Optional[Mapping[str, str]] = None) -> Tuple[Any, Optional[Problem]]:
    """(parsed value, None), or (the assumed default, the :class:`Problem`) for an invalid value."""
    return SWITCHES[name].read(environ)


def value(name: str, environ: Optional[Mapping[str, str]] = None) -> Any:
    """The parsed value, or the assumed default when the value is invalid. Never raises."""
    return read(name, environ)[0]


def problems(
    environ: Optional[Mapping[str, str]] = None,
    *,
    owners: Iterable[str] = (OURS, SGLANG),
    known_patches: Optional[Iterable[str]] = None,
) -> List[Problem]:
    """Every invalid switch value in ``environ`` (registry order).

    ``known_patches``: when given, names in SGLANG_KV5D_PATCHES outside it are a problem too.
    """
    wanted = set(owners)
    out: List[Problem] = []
    env = _env(environ)
    for sw in SWITCHES.values():
        if sw.owner not in wanted or not sw.rule:
            continue
        parsed, problem = sw.read(env)
        if problem is not None:
            out.append(problem)
        elif sw.name == PATCHES and parsed and known_patches is not None:
            why = unknown_patch_names(parsed, known_patches)
            if why:
                out.append(Problem(sw, env[PATCHES], why))
    return out


def unknown_patch_names(names: Iterable[str], known_patches: Iterable[str]) -> Optional[str]:
    """None when every name is a known patch, else what is wrong: each unknown
    name with the closest known one (a typo hint), then the known names."""
    import difflib

    known = sorted(set(known_patches))
    parts = []
    for n in names:
        if n not in known:
            close = difflib.get_close_matches(n, known, n=1, cutoff=0.6)
            parts.append(repr(n) + (f" (did you mean {close[0]}?)" if close else ""))
    if not parts:
        return None
    return f"unknown patch name(s) {', '.join(parts)}; known: {', '.join(known)}"


def unknown_own_names(environ: Optional[Mapping[str, str]] = None) -> List[Tuple[str, Optional[str]]]:
    """``SGLANG_KV5D_*`` names set in ``environ`` that are not switches, with the closest known name."""
    import difflib

    out = []
    for name in sorted(_env(environ)):
        if (name == GATE or name.startswith(GATE + "_")) and name not in SWITCHES:
            close = difflib.get_close_matches(name, OWN_SWITCHES, n=1, cutoff=0.8)
            out.append((name, close[0] if close else None))
    return out


# --------------------------------------------------------------------------
# Accessors used across the package (each one registry read)


def gate_value(environ: Optional[Mapping[str, str]] = None) -> Tuple[bool, Optional[Problem]]:
    return read(GATE, environ)


def gate_on(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Is the overlay switched on? Never raises: an invalid gate counts as off (and is reported)."""
    return bool(value(GATE, environ))


def selected_patches(environ: Optional[Mapping[str, str]] = None) -> Optional[Tuple[str, ...]]:
    """Names from SGLANG_KV5D_PATCHES, None when every patch is selected (unset or empty), and ``()``
    (nothing selectable) when the value is invalid: an invalid allow list never means every patch."""
    return value(PATCHES, environ)


def strict(environ: Optional[Mapping[str, str]] = None) -> bool:
    """SGLANG_KV5D_STRICT, default on. An invalid value keeps strict mode on."""
    return bool(value(STRICT, environ))


def allow_untested(environ: Optional[Mapping[str, str]] = None) -> bool:
    return bool(value(ALLOW_UNTESTED, environ))


def status_dir(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    return value(STATUS_DIR, environ)


def status_readable(environ: Optional[Mapping[str, str]] = None) -> bool:
    return bool(value(STATUS_READABLE, environ))


def requested_layout(environ: Optional[Mapping[str, str]] = None) -> str:
    """SGLANG_AITER_KV_CACHE_LAYOUT as SGLang reads it (lower-cased, default nhd)."""
    raw = _env(environ).get(LAYOUT)
    return "nhd" if raw is None else raw.lower()


def wants_5d(environ: Optional[Mapping[str, str]] = None) -> bool:
    return requested_layout(environ) == "vectorized_5d"


def activation_warnings(environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """One warning per invalid switch: ours name what is assumed; SGLang's (an
    unknown layout) say that SGLang will refuse the value."""
    return [p.activation_warning() for p in problems(environ)]


# --------------------------------------------------------------------------
# Documentation

README_BEGIN = ("<!-- switches table: generated from sglang_kv5d/config.py by "
                "`python -m sglang_kv5d.rules --update-readme README.md`; a test keeps it in sync -->")
README_END = "<!-- end of switches table -->"


def render_markdown_table() -> str:
    rows = ["| variable | read by | values | default | effect |", "|---|---|---|---|---|"]
    for sw in SWITCHES.values():
        rows.append(f"| `{sw.name}` | {sw.owner} | {sw.values} | {sw.default_text} | {sw.meaning} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover
    import sys

    if sys.argv[1:] not in ([], ["--markdown"]):
        sys.stderr.write("usage: python -m sglang_kv5d.config [--markdown]\n")
        sys.exit(2)
    sys.stdout.write(render_markdown_table())
