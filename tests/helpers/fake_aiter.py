"""Put the fake ``aiter`` (tests/fake_aiter) on sys.path for a test, then clean up.

    from tests.helpers.fake_aiter import fake_aiter   # pytest fixture, import it
    def test_x(fake_aiter):                            # into the test module
        fake_aiter._fake.CALLS ...

or, outside pytest fixtures, ``with fake_aiter_on_path() as aiter: ...``.

Both prepend the path, drop any already imported ``aiter`` modules (a real
aiter, or a fake from an earlier test) so the fake is imported fresh, and on
exit remove the path and the fake's modules and restore what was there before.
Modules that bound aiter names while the fake was active (SGLang's
aiter_backend, for instance) keep those bindings: tests that need a clean
import of such modules should import them in a subprocess.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path

import pytest

FAKE_ROOT = Path(__file__).resolve().parents[1] / "fake_aiter"


def _aiter_modules():
    return {k: v for k, v in sys.modules.items() if k == "aiter" or k.startswith("aiter.")}


@contextlib.contextmanager
def fake_aiter_on_path(strict: bool = False):
    saved = _aiter_modules()
    for k in saved:
        del sys.modules[k]
    path = str(FAKE_ROOT)
    sys.path.insert(0, path)
    importlib.invalidate_caches()
    try:
        aiter = importlib.import_module("aiter")
        assert getattr(aiter, "FAKE", False), f"imported a non-fake aiter from {aiter.__file__}"
        importlib.import_module("aiter.ops.triton.gluon.pa_decode_gluon")
        aiter._fake.reset()
        aiter._fake.set_strict(strict)
        yield aiter
    finally:
        try:
            sys.path.remove(path)
        except ValueError:
            pass
        for k in _aiter_modules():
            del sys.modules[k]
        sys.modules.update(saved)
        importlib.invalidate_caches()


@pytest.fixture
def fake_aiter():
    """The fake aiter package, importable as ``aiter`` for this test."""
    with fake_aiter_on_path() as aiter:
        yield aiter


@pytest.fixture
def no_aiter(monkeypatch):
    """Make ``import aiter`` fail for this test (None in sys.modules blocks it)."""
    saved = _aiter_modules()
    for k in saved:
        monkeypatch.delitem(sys.modules, k)
    monkeypatch.setitem(sys.modules, "aiter", None)
    yield
