"""What the overlay did in this process: one :class:`Status` per process.

Standard library only. A Status renders as a table (``str(status)`` /
``status.table()``) and as JSON (``status.to_json()``); each process can also
write it to ``$SGLANG_KV5D_STATUS_DIR/<pid>.json``.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from .safe_text import one_line, printable
from .surface_names import MODULE_PREFIX, PROCESS_TITLE_PREFIX

APPLIED = "applied"
PENDING = "pending"  # target module not imported yet
SKIPPED = "skipped"  # not applicable here (SGLang version refused, patch says so)
FAILED = "failed"  # probe or install failed; nothing of the patch is installed
DISABLED = "disabled"  # not selected (SGLANG_KV5D_PATCHES), or overlay deactivated
UPSTREAM = "upstream"  # provided upstream: this SGLang has the fix, so nothing is installed; 5D counts it satisfied

STATES = (APPLIED, PENDING, SKIPPED, FAILED, DISABLED, UPSTREAM)
#: States that satisfy a 5D-required patch (the fail-closed guard, the probes, KV5D011).
SATISFIED = (APPLIED, PENDING, UPSTREAM)


@dataclass
class PatchStatus:
    name: str
    state: str
    reason: str
    required_for_5d: bool = False
    internal: bool = False
    targets: List[str] = field(default_factory=list)


@dataclass
class Status:
    pid: int
    role: str
    active: bool
    routes: List[str]
    sglang_version: Optional[str]
    verdict: str
    verdict_message: str
    strict: bool
    patches: List[PatchStatus]
    warnings: List[str] = field(default_factory=list)

    def by_state(self, state: str) -> List[str]:
        return [p.name for p in self.patches if p.state == state]

    def patch(self, name: str) -> PatchStatus:
        for p in self.patches:
            if p.name == name:
                return p
        raise KeyError(f"no patch named {name!r}; known: {', '.join(p.name for p in self.patches)}")

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    def summary_line(self) -> str:
        """The one INFO line each process logs after activation."""
        parts = [
            f"pid={self.pid}",
            f"role={self.role}",
            f"sglang={self.sglang_version or 'missing'} ({self.verdict})",
            f"route={'+'.join(self.routes) or '-'}",
        ]
        for state in STATES:
            names = self.by_state(state)
            if names:
                parts.append(f"{state}=[{', '.join(names)}]")
        return "sglang-kv5d: " + one_line(" ".join(parts))

    def table(self) -> str:
        head = [
            f"sglang-kv5d status  pid {self.pid}  role {self.role}  "
            f"{'active' if self.active else 'inactive'}  routes {', '.join(self.routes) or '-'}",
            f"SGLang {self.sglang_version or 'missing'}: {self.verdict_message}",
            f"strict mode: {'on' if self.strict else 'off'}",
        ]
        rows = [("patch", "state", "5D", "reason")]
        for p in self.patches:  # names and reasons may carry outside values (paths, env values)
            rows.append((one_line(p.name), p.state, "yes" if p.required_for_5d else "", one_line(p.reason)))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = []
        for i, r in enumerate(rows):
            lines.append("  ".join(r[j].ljust(widths[j]) for j in range(3)) + "  " + r[3])
            if i == 0:
                lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 6)
        out = head + [""] + lines
        if self.warnings:
            out += [""] + [f"warning: {one_line(w)}" for w in self.warnings]
        return "\n".join(printable(line) for line in out)

    __str__ = table

    def write(self, directory: str, *, readable: bool = False) -> str:
        """Write ``<directory>/<pid>.json`` atomically and safely; returns the path.

        See :func:`write_json_file`. Raises :class:`UnsafeStatusDir` (an
        OSError) for a directory others could plant files in.
        """
        path = os.path.join(directory, f"{self.pid}.json")
        write_json_file(path, self.to_json(), readable=readable)
        return path


class UnsafeStatusDir(OSError):
    """The status directory is writable by others: nothing is written there."""


def status_dir_problem(directory: str) -> Optional[str]:
    """Why ``directory`` (after following symlinks) is not safe for status files, or None.

    Refused: a directory that others may write without the sticky bit (so they
    could rename or replace our files), or one owned by a user other than us
    and root. Not a directory at all is reported too.
    """
    planted = planted_symlink(directory)
    if planted is not None:
        return planted
    try:
        st = os.stat(directory)
    except OSError as exc:
        return f"cannot stat {directory}: {exc.strerror or exc}"
    return _dir_stat_problem(directory, st)


def planted_symlink(path: str) -> Optional[str]:
    """Why a symlink on ``path`` (the path itself or any directory above it)
    is not to be followed, or None: one owned by a user other than us and root
    (checked with ``lstat``) could lead our files anywhere another user chose,
    e.g. ``/tmp/status -> /root/...``."""
    uid = os.geteuid()
    current = os.sep
    for part in os.path.abspath(path).split(os.sep):
        if not part:
            continue
        current = os.path.join(current, part)
        try:
            lst = os.lstat(current)
        except OSError:
            return None  # missing from here on: nothing below it can be a link yet
        if stat.S_ISLNK(lst.st_mode) and lst.st_uid not in (uid, 0):
            return (f"{current} is a symbolic link owned by uid {lst.st_uid}, not by this user (uid {uid}) "
                    "or root; refusing to follow it")
    return None


def _dir_stat_problem(directory: str, st: os.stat_result) -> Optional[str]:
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    if st.st_mode & (stat.S_IWOTH | stat.S_IWGRP) and not st.st_mode & stat.S_ISVTX:
        who = "world" if st.st_mode & stat.S_IWOTH else "group"
        return (f"{directory} is {who}-writable without the sticky bit (mode {stat.S_IMODE(st.st_mode):04o}): "
                "other users could replace the status files")
    uid = os.geteuid()
    if st.st_uid not in (uid, 0):
        return f"{directory} is owned by uid {st.st_uid}, not by this user (uid {uid}) or root"
    return None


def write_json_file(path: str, text: str, *, readable: bool = False) -> None:
    """Create ``path`` with ``text`` without following or trusting anything planted there.

    * a missing directory is created 0700 (parents too);
    * no symlink on the way may belong to another user (:func:`planted_symlink`,
      checked with ``lstat`` before the directory is created), and the
      directory must pass :func:`status_dir_problem`, else UnsafeStatusDir;
    * the file is created through a descriptor of the checked directory
      (re-checked with ``fstat``), so the path cannot be swapped in between;
    * the data goes to a new file with a random name created with
      ``O_CREAT|O_EXCL|O_NOFOLLOW`` (never an existing file or a symlink's
      target), mode 0600, or 0644 with ``readable`` when the directory is ours;
    * it is fsynced and renamed onto ``path`` with ``os.replace``, which
      replaces a symlink at ``path`` itself rather than its target.
    """
    directory = os.path.dirname(path) or "."
    planted = planted_symlink(directory)
    if planted is not None:  # before mkdir: never create directories through it
        raise UnsafeStatusDir(planted)
    _makedirs_private(directory)
    problem = status_dir_problem(directory)
    if problem is not None:
        raise UnsafeStatusDir(problem)
    # Work through a descriptor of the directory just checked, so a swap of the
    # path (a symlink planted after the check) cannot redirect the write.
    dflags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    dfd = os.open(directory, dflags)
    try:
        dst = os.fstat(dfd)
        problem = _dir_stat_problem(directory, dst)
        if problem is not None:
            raise UnsafeStatusDir(problem)
        mode = 0o644 if readable and dst.st_uid == os.geteuid() else 0o600
        _write_in(dfd, directory, os.path.basename(path), text, mode)
    finally:
        os.close(dfd)


def _write_in(dfd: int, directory: str, base: str, text: str, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(16):
        tmp = f".{base}.{os.urandom(6).hex()}.tmp"
        try:
            fd = os.open(tmp, flags, mode, dir_fd=dfd)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 16 collisions of 48 random bits
        raise FileExistsError(f"cannot create a temporary file in {directory}")
    try:
        os.fchmod(fd, mode)  # the umask must not widen or narrow it
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:  # any exit, KeyboardInterrupt included: remove the temporary file, then re-raise
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise


def _makedirs_private(directory: str) -> None:
    """mkdir -p with mode 0700 for every directory created (os.makedirs gives
    intermediate directories the umask's default, 0777 under umask 000)."""
    if os.path.isdir(directory):
        return
    parent = os.path.dirname(os.path.abspath(directory))
    if parent and parent != directory:
        _makedirs_private(parent)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass


_WARNED_DIRS: set = set()


def write_status_file(status: "Status", directory: str, log) -> Optional[str]:
    """Write the status file; problems are logged through ``log`` (a logger), an
    unsafe directory once per process and directory. Returns the path or None."""
    try:
        return status.write(directory, readable=_readable())
    except UnsafeStatusDir as exc:
        key = (os.getpid(), directory)
        if key not in _WARNED_DIRS:
            _WARNED_DIRS.add(key)
            log.warning("sglang-kv5d: not writing status files to %s: %s (use a directory only you can write, "
                        "e.g. mkdir -m 700)", one_line(directory), one_line(exc))
    except OSError as exc:  # a newline in the path must not forge a log line
        log.warning("sglang-kv5d: cannot write status to %s: %s", one_line(directory), one_line(exc))
    return None


def _readable() -> bool:
    from .config import status_readable

    return status_readable()


def process_role() -> str:
    """Best-effort name of this process's role, without importing anything."""
    title = None
    spt = sys.modules.get("setproctitle")
    if spt is not None:
        try:
            title = spt.getproctitle()
        except Exception:  # a third-party C extension, asked for a best-effort label: anything means no title
            title = None
    if title and title.startswith(PROCESS_TITLE_PREFIX):
        return title.split("::", 1)[1]
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", "").startswith(MODULE_PREFIX):
        return spec.name.rsplit(".", 1)[-1]
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        try:
            name = mp.current_process().name
            if name and name != "MainProcess":
                return name
        except Exception:  # best effort, never raising: the role only labels a status file
            pass
    return "main"
