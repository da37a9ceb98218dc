"""SGLang version verdict: supported, best effort, refused or untested.

Standard library only (the bootstrap uses it before anything else is
imported). The installed version is read from the distribution metadata, never
by importing SGLang.

Policy (see ../DESIGN and the README):

    supported     0.5.16 .. 0.5.23 (post releases and local builds of those included)
    best-effort   0.5.13.post1 .. 0.5.15.post1 (hybrid models need --disable-radix-cache)
    refused       anything older than 0.5.13.post1 (no vectorized_5d code upstream)
    untested      anything newer than 0.5.23: refused unless SGLANG_KV5D_ALLOW_UNTESTED=1
    missing       SGLang is not installed

Inside the range, moved symbols are found by probing (sglang_kv5d.surface),
never by comparing version strings.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Tuple

SUPPORTED_RANGE = ("0.5.16", "0.5.23")
BEST_EFFORT_RANGE = ("0.5.13.post1", "0.5.15.post1")
OLDEST = BEST_EFFORT_RANGE[0]
NEWEST = SUPPORTED_RANGE[1]

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


def installed_sglang_version() -> Optional[str]:
    """The installed SGLang's version from its distribution metadata, or None."""
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
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
