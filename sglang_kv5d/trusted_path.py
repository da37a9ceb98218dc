"""Is a directory safe to import code from? (``SGLANG_KV5D_PEER_PATH``)

A directory put on ``sys.path`` runs its modules' code with our privileges,
so it has to be as trusted as the package itself: absolute, and neither it,
the folders above it, nor the package and files we import from it may be
changed by another user. :func:`import_dir_problem` says why not, or None.

Rules, after resolving symlinks (the real directories are what Python
imports from; a symlink on the way owned by another user is refused too):

* the directory and everything we import below it (``package`` and its
  ``*.py`` files): owned by this user or root, not writable by group or
  others;
* every folder above it, up to and including the first root-owned folder
  that is not writable by group or others: owned by this user or root, and
  not writable by group or others unless the sticky bit is set (``/tmp``:
  others can create entries there but cannot rename or replace ours).

Standard library only.
"""

from __future__ import annotations

import os
import stat
from typing import Iterable, Optional

from .safe_text import one_line


def _owner_problem(path: str, st: os.stat_result, uid: int) -> Optional[str]:
    if st.st_uid not in (uid, 0):
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {uid}) or root"
    return None


def _writable_by_others(st: os.stat_result) -> Optional[str]:
    if st.st_mode & stat.S_IWOTH:
        return "world"
    if st.st_mode & stat.S_IWGRP:
        return "group"
    return None


def _entry_problem(path: str, uid: int) -> Optional[str]:
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot stat {path}: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link; import code only from real files"
    who = _writable_by_others(st)
    if who:
        return f"{path} is {who}-writable (mode {stat.S_IMODE(st.st_mode):04o}): another user could change the code"
    return _owner_problem(path, st, uid)


def import_dir_problem(path: str, package: Optional[str] = None) -> Optional[str]:
    """Why code under ``path`` must not be imported, or None (see the module doc).

    ``package``: the package imported from ``path`` (its folder and ``*.py``
    files are checked too when it exists). The reason names the offending path
    (control characters escaped) and what is wrong with it.
    """
    from .state import planted_symlink

    if not isinstance(path, str) or not os.path.isabs(path):
        return f"{one_line(path)!s} is not an absolute path"
    planted = planted_symlink(path)
    if planted:
        return one_line(planted)
    real = os.path.realpath(path)
    uid = os.geteuid()
    if not os.path.isdir(real):
        return f"{one_line(path)} is not an existing directory"
    checks: Iterable[str] = [real]
    if package:
        pkg = os.path.join(real, package)
        if os.path.isdir(pkg):
            checks = [real, pkg] + sorted(os.path.join(pkg, f) for f in os.listdir(pkg) if f.endswith(".py"))
    for p in checks:
        problem = _entry_problem(p, uid)
        if problem:
            return one_line(problem)
    current = real
    while True:
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent
        try:
            st = os.stat(current)
        except OSError as exc:
            return one_line(f"cannot stat {current}: {exc.strerror or exc}")
        problem = _owner_problem(current, st, uid)
        if problem:
            return one_line(problem)
        who = _writable_by_others(st)
        if who and not st.st_mode & stat.S_ISVTX:
            return one_line(f"{current} is {who}-writable without the sticky bit (mode {stat.S_IMODE(st.st_mode):04o}): "
                            "another user could replace the folders below it")
        if st.st_uid == 0 and not who:
            return None  # a root-owned folder only root can change: trusted from here up
