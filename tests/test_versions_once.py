"""The tested SGLang range is written once: sglang_kv5d/versions.py.

Supporting a new SGLang release means bumping versions.py (SUPPORTED_RANGE,
CONTRACT_WHEELS), running scripts/regen.sh and reading what the surface
contract tests say; it must not mean editing prose all over the package. So
the newest tested version (versions.NEWEST) may appear in the package's
comments and strings only

  * as a fact about that release, said as such: "from 0.5.23", "since ...",
    "before ...", "after ...", "until ...", "by ...", "... or later", "0.5.23+";
  * as a bare version literal in code ("0.5.23" alone: a version gate,
    a ``since=`` field), which is data, not prose;
  * at one of the ALLOWED phrases below, each a fact about that release with
    its reason.

Everything else says "the newest tested SGLang" / "every tested release" or
renders the text from versions.py (``NEWEST``, ``TESTED``, ``tested_from``).
The setup scripts and requirements read the version from versions.py too.
"""

from __future__ import annotations

import io
import os
import re
import tokenize

import pytest

from sglang_kv5d import versions
from tests.helpers.subproc import ROOT

pytestmark = pytest.mark.sglang_independent

PACKAGE = os.path.join(ROOT, "sglang_kv5d")
OWN = os.path.join(PACKAGE, "versions.py")

# Phrases naming the newest tested release as a fact about that release (what its
# source says or does), found anywhere in the package (a module may move). The
# text is matched with whitespace collapsed. Each needs a reason.
ALLOWED = {
    "SGLang 0.5.23's Triton *extend* kernel":
        "what the portable extend kernel was written against: that release's kernel, read there",
    "ROCm SGLang 0.5.23 resolves it to `cpu_tensor`":
        "the retraction-backup default as read in that release's kv_cache_builder.py",
    "0.5.23 says so in `memory_pool.py`":
        "a quotation of that release's memory_pool.py",
    "(0.5.23 alias `--enable-hicache`)":
        "the release that added the alias",
    "(0.5.23 ``arg_groups/pd_disaggregation_hook.py``":
        "the file of that release where SGLang rewrites mooncake_tcp",
    "absent in 0.5.23":
        "launch/renames.py: the 0.5.16 alias was checked absent in that release's parser",
}

_FACT_BEFORE = re.compile(r"(?:\b(?:from|since|before|after|until|by)\s+(?:SGLang\s+)?)$", re.IGNORECASE)
_FACT_AFTER = re.compile(r"^(?:\+|\s+or\s+later\b|\s+and\s+later\b)")
_VERSION_LITERAL = re.compile(r"""^[rRbBuU]?(['"])\d+(?:\.\d+)+(?:\.?post\d+)?\1$""")


def _newest_re(newest=versions.NEWEST):
    return re.compile(r"(?<![\w.])" + re.escape(newest) + r"(?![\d])")


def _texts(path):
    """(line, whitespace-collapsed text) of every comment and string token."""
    with open(path, encoding="utf-8") as fh:
        src = fh.read()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT or tok.type == tokenize.STRING:
            if tok.type == tokenize.STRING and _VERSION_LITERAL.match(tok.string):
                continue  # a bare version literal: code (a gate, since=), not prose
            yield tok.start[0], " ".join(tok.string.split())


def _allowed_spans(text):
    spans = []
    for phrase in ALLOWED:
        start = text.find(phrase)
        while start != -1:
            spans.append((start, start + len(phrase)))
            start = text.find(phrase, start + 1)
    return spans


def prose_mentions(path, newest=versions.NEWEST):
    """Where ``newest`` is named in the file's prose other than as a fact."""
    pattern = _newest_re(newest)
    out = []
    for line, text in _texts(path):
        spans = _allowed_spans(text)
        for m in pattern.finditer(text):
            if _FACT_BEFORE.search(text[: m.start()]) or _FACT_AFTER.match(text[m.end():]):
                continue
            if any(a <= m.start() and m.end() <= b for a, b in spans):
                continue
            out.append(f"{os.path.relpath(path, ROOT)}:{line}: ...{text[max(0, m.start() - 60): m.end() + 30]}...")
    return out


def _package_files():
    for dirpath, dirnames, filenames in os.walk(PACKAGE):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in filenames:
            path = os.path.join(dirpath, f)
            if f.endswith(".py") and path != OWN:
                yield path


def test_the_newest_version_is_not_written_in_package_prose():
    found = [hit for path in sorted(_package_files()) for hit in prose_mentions(path)]
    assert not found, (
        f"SGLang {versions.NEWEST} (versions.NEWEST) named in package prose; say 'the newest tested SGLang' / "
        "'every tested release', render it from sglang_kv5d.versions (NEWEST, TESTED, tested_from), or, for a "
        "fact about that release, say so ('from X', 'before X', 'X or later') or add the phrase to ALLOWED "
        "with its reason:\n" + "\n".join(found))


def test_every_allowed_phrase_is_still_there():
    text = " ".join(" ".join(t for _, t in _texts(p)) for p in _package_files())
    stale = [phrase for phrase in ALLOWED if phrase not in text]
    assert not stale, f"ALLOWED phrases no longer in the package (remove them): {stale}"


def test_the_check_sees_what_it_should(tmp_path):
    """The scanner itself: prose flagged, facts and literals not."""
    newest = versions.NEWEST
    sample = tmp_path / "sample.py"
    sample.write_text(
        f'"""Works on SGLang 0.5.16 .. {newest}."""\n'
        f'GATE = "{newest}"  # the flag exists from {newest}\n'
        f'X = "needs SGLang {newest} or later"\n'
        f'Y = "as of {newest} it is broken"\n'
    )
    hits = prose_mentions(str(sample), newest)
    assert len(hits) == 2 and ":1:" in hits[0] and ":4:" in hits[1], hits


def test_scripts_and_requirements_read_the_version_from_versions_py():
    """The setup scripts pin SGLang and fetch the contract wheels through
    ``python -m sglang_kv5d.versions``; none of them spells the newest release."""
    pattern = _newest_re()
    found = []
    for folder in ("scripts", "requirements", ".ci"):
        for dirpath, _, filenames in os.walk(os.path.join(ROOT, folder)):
            for f in filenames:
                path = os.path.join(dirpath, f)
                if not f.endswith((".sh", ".txt")) and f != "run":
                    continue
                with open(path, encoding="utf-8") as fh:
                    for n, line in enumerate(fh, 1):
                        for m in pattern.finditer(line):
                            if not (_FACT_BEFORE.search(line[: m.start()]) or _FACT_AFTER.match(line[m.end():])):
                                found.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert not found, "the newest SGLang spelled out (read it from sglang_kv5d/versions.py):\n" + "\n".join(found)


def test_the_one_list_of_contract_wheels():
    assert versions.NEWEST in versions.CONTRACT_WHEELS and versions.OLDEST in versions.CONTRACT_WHEELS
    assert list(versions.CONTRACT_WHEELS) == sorted(versions.CONTRACT_WHEELS, key=versions.parse_version)
    assert versions.tested_from(versions.NEWEST) == versions.NEWEST
    assert versions.tested_from(versions.OLDEST) == versions.TESTED == f"{versions.OLDEST} .. {versions.NEWEST}"
    out = {a: versions._main([a]) for a in ("newest", "oldest", "contract-wheels")}
    assert out == {"newest": 0, "oldest": 0, "contract-wheels": 0}
    assert versions._main(["nonsense"]) == 2
