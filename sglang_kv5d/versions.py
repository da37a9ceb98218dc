"""SGLang version verdict: supported, best effort, refused or untested.

Standard library only (the bootstrap uses it before anything else is
imported). The installed version is the ``sglang`` package's own (``_version.py`` /
``version.py``, read as text, or ``sglang.__version__`` once imported), falling
back to the distribution metadata; a disagreement between the two is reported
by :func:`stand_in_problem` (``doctor`` warns). SGLang is never imported here.

Policy (see ../DESIGN and the README):

    supported     SUPPORTED_RANGE (post releases and local builds of those included)
    best-effort   BEST_EFFORT_RANGE (hybrid models need --disable-radix-cache)
    refused       anything older than OLDEST (no vectorized_5d code upstream)
    untested      anything newer than NEWEST: refused unless SGLANG_KV5D_ALLOW_UNTESTED=1
    missing       SGLang is not installed

The ranges below are the one place the tested releases are written: prose
elsewhere renders them from here or says "the newest tested SGLang" /
"the tested range" (tests/test_versions_once.py). Inside the range, moved
symbols are found by probing (sglang_kv5d.surface), never by comparing
version strings.

``python -m sglang_kv5d.versions newest|oldest|contract-wheels`` prints them
for the setup scripts (standard library only, nothing else imported).
"""

from __future__ import annotations

import os
import re
import sys
from typing import NamedTuple, Optional, Tuple

from .surface_names import PACKAGE, VERSION_MODULE, VERSION_MODULE_OLD

SUPPORTED_RANGE = ("0.5.16", "0.5.23")
BEST_EFFORT_RANGE = ("0.5.13.post1", "0.5.15.post1")
OLDEST = BEST_EFFORT_RANGE[0]
NEWEST = SUPPORTED_RANGE[1]
# "OLDEST .. NEWEST": the tested range as prose renders it.
TESTED = f"{OLDEST} .. {NEWEST}"
# The SGLang wheels the surface contract tests read as source (never installed):
# the oldest, the first supported, the release that moved the arg groups, and
# the newest. scripts/setup-dev.sh downloads them into .cache/wheels
# (``python -m sglang_kv5d.versions contract-wheels``); NEWEST must be one.
CONTRACT_WHEELS = ("0.5.13.post1", "0.5.16", "0.5.20", "0.5.23")

SUPPORTED = "supported"
BEST_EFFORT = "best-effort"
REFUSED = "refused"
UNTESTED = "untested"
MISSING = "missing"

_VERSION_RE = re.compile(
    r"^\s*v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|b|rc|alpha|beta|c)[-_.]?(?P<pre_n>\d*))?"
    r"(?:[-_.]?post[-_.]?(?P<post>\d*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>\d*))?"
    r"(?:\+(?P<local>[a-z0-9.]+))?\s*$",
    re.IGNORECASE,
)


class Version(NamedTuple):
    """A comparable PEP 440 subset: release, pre-release, post and dev numbers."""

    release: Tuple[int, ...]
    # (-1, n) for a pre-release or dev build (sorts before the final release),
    # (0, 0) for the final release, (1, n) for .postN.
    phase: Tuple[int, int]
    text: str

    def key(self):
        release = self.release + (0,) * (4 - len(self.release))
        return (release, self.phase)

    def __lt__(self, other):  # type: ignore[override]
        return self.key() < other.key()

    def __le__(self, other):  # type: ignore[override]
        return self.key() <= other.key()

    def __gt__(self, other):  # type: ignore[override]
        return self.key() > other.key()

    def __ge__(self, other):  # type: ignore[override]
        return self.key() >= other.key()


def parse_version(text: str) -> Version:
    """Parse ``0.5.23``, ``0.5.13.post1``, ``0.5.24rc1``, ``0.5.23.dev4+g1a2b`` ...

    Raises ValueError for anything that is not a version number.
    """
    m = _VERSION_RE.match(text)
    if not m:
        raise ValueError(f"not a version number: {text!r}")
    release = tuple(int(p) for p in m.group("release").split("."))
    if m.group("pre") or m.group("dev") is not None:
        phase = (-1, int(m.group("pre_n") or m.group("dev") or 0))
    elif m.group("post") is not None:
        phase = (1, int(m.group("post") or 0))
    else:
        phase = (0, 0)
    return Version(release, phase, text.strip())


_OWN_VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.MULTILINE)


def sglang_package_dir() -> Optional[str]:
    """The directory of the ``sglang`` package this interpreter imports (or has imported).

    Found with the standard path finder, so nothing is imported and no import
    hook (the overlay's own included) runs.
    """
    mod = sys.modules.get(PACKAGE)
    paths = list(getattr(mod, "__path__", None) or ()) if mod is not None else []
    if not paths:
        from importlib.machinery import PathFinder

        try:
            spec = PathFinder.find_spec(PACKAGE)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            return None
        paths = list(spec.submodule_search_locations)
    return os.path.realpath(paths[0]) if paths else None


def sglang_module_version() -> Optional[str]:
    """The version the ``sglang`` module itself carries, or None when it has none of its own.

    An imported module's ``__version__`` when it was imported before this
    call; otherwise the ``__version__ = '...'`` line of the package's
    ``_version.py`` or ``version.py``, read as text (SGLang is not imported).
    """
    mod = sys.modules.get(PACKAGE)
    v = getattr(mod, "__version__", None) if mod is not None else None
    if isinstance(v, str) and v:
        return v
    root = sglang_package_dir()
    if root is None:
        return None
    for module in (VERSION_MODULE, VERSION_MODULE_OLD):
        name = module.rsplit(".", 1)[1] + ".py"
        try:
            with open(os.path.join(root, name), encoding="utf-8") as fh:
                m = _OWN_VERSION_RE.search(fh.read(65536))
        except (OSError, UnicodeDecodeError):
            continue
        if m:
            return m.group(1)
    return None


def sglang_metadata() -> Tuple[Optional[str], Optional[str]]:
    """(version, the package directory the distribution's metadata describes) from the
    installed ``sglang`` distribution, or (None, None)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        return None, None
    try:
        where = os.path.realpath(str(dist.locate_file(PACKAGE)))
    except Exception:  # a third-party distribution finder may raise anything; the location is only shown
        where = None
    return dist.version, where


def installed_sglang_version() -> Optional[str]:
    """The installed SGLang's version: the module's own where it has one, else the
    distribution metadata's; None when SGLang is missing."""
    return sglang_module_version() or sglang_metadata()[0]


def stand_in_problem() -> Optional[str]:
    """Why the ``sglang`` that would be imported may not be the installed SGLang, or None.

    A stand-in (a package of that name earlier on the path, a copied or
    half-upgraded tree) shows as a module version that differs from the
    distribution metadata's, a module with no version of its own, or a
    package directory the metadata does not describe.
    """
    root = sglang_package_dir()
    meta_version, meta_dir = sglang_metadata()
    if root is None:
        return None
    mod_version = sglang_module_version()
    if meta_version is None:
        return f"the sglang package at {root} has no installed distribution metadata (not installed by pip?)"
    if mod_version is None:
        return (f"the sglang package at {root} carries no version of its own; the distribution metadata "
                f"says {meta_version}")
    if parse_version_or_none(mod_version) != parse_version_or_none(meta_version) and mod_version != meta_version:
        return (f"the sglang package at {root} says {mod_version} but the installed distribution's metadata "
                f"says {meta_version}")
    if meta_dir and os.path.isdir(meta_dir) and meta_dir != root:
        return f"the sglang package imported from {root} is not the one the distribution metadata describes ({meta_dir})"
    return None


def parse_version_or_none(text: str) -> Optional[tuple]:
    try:
        return parse_version(text).key()
    except ValueError:
        return None


class Verdict(NamedTuple):
    kind: str  # SUPPORTED | BEST_EFFORT | REFUSED | UNTESTED | MISSING
    version: Optional[str]
    allowed: bool  # may the overlay patch this SGLang?
    message: str


def verdict(version: Optional[str] = None, *, allow_untested: bool = False, _probe: bool = True) -> Verdict:
    """Classify an SGLang version. ``version=None`` reads the installed one."""
    if version is None and _probe:
        version = installed_sglang_version()
    if version is None:
        return Verdict(MISSING, None, False, "SGLang is not installed in this environment")
    try:
        v = parse_version(version)
    except ValueError:
        return Verdict(
            UNTESTED if allow_untested else REFUSED,
            version,
            allow_untested,
            f"SGLang version {version!r} is not a version number sglang-kv5d understands"
            + ("; patching anyway (SGLANG_KV5D_ALLOW_UNTESTED=1)" if allow_untested else ""),
        )
    lo_be, hi_be = (parse_version(x) for x in BEST_EFFORT_RANGE)
    lo, hi = (parse_version(x) for x in SUPPORTED_RANGE)
    # A post release or local build of the newest tested release counts as it.
    family = Version(v.release, (0, 0), v.text)
    if lo <= v and family <= hi:
        return Verdict(SUPPORTED, version, True, f"SGLang {version} is supported ({lo.text} .. {hi.text})")
    if lo_be <= v and v < lo:
        return Verdict(
            BEST_EFFORT,
            version,
            True,
            f"SGLang {version} is best effort ({lo_be.text} .. {hi_be.text}): hybrid models "
            f"(Qwen3.5) need --disable-radix-cache; upgrade to {lo.text} .. {hi.text} for full support",
        )
    if v < lo_be:
        return Verdict(
            REFUSED,
            version,
            False,
            f"SGLang {version} is too old: sglang-kv5d supports {lo_be.text} .. {hi.text} "
            f"(versions before {lo_be.text} have no vectorized_5d code to fix); upgrade SGLang",
        )
    if allow_untested:
        return Verdict(
            UNTESTED,
            version,
            True,
            f"SGLang {version} is newer than the newest tested release ({hi.text}); "
            "patching anyway because SGLANG_KV5D_ALLOW_UNTESTED=1",
        )
    return Verdict(
        UNTESTED,
        version,
        False,
        f"SGLang {version} is newer than the newest tested release ({hi.text}); "
        "set SGLANG_KV5D_ALLOW_UNTESTED=1 to patch it anyway, or install sglang-kv5d's "
        f"tested range ({lo.text} .. {hi.text})",
    )


def tested_from(since: str) -> str:
    """``"<since> .. NEWEST"``, or just ``since`` when it is the newest: the
    releases a patch applies to when it needs a surface that appeared in ``since``."""
    return since if since == NEWEST else f"{since} .. {NEWEST}"


def _main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    values = {"newest": (NEWEST,), "oldest": (OLDEST,), "contract-wheels": CONTRACT_WHEELS}
    if len(args) != 1 or args[0] not in values:
        sys.stderr.write(f"usage: python -m sglang_kv5d.versions {{{'|'.join(values)}}}\n")
        return 2
    sys.stdout.write("".join(v + "\n" for v in values[args[0]]))
    return 0


if __name__ == "__main__":  # pragma: no cover - the setup scripts run it
    sys.exit(_main())
