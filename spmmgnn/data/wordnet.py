"""WordNet 3.0 (Debian's ``wordnet-base``) as a node-classification graph.

Vertices: the synsets of ``data.noun``, ``data.verb``, ``data.adj``, ``data.adv``
(117,659). Edges: every pointer between synsets (hypernymy, meronymy, antonymy, derivation,
similarity, ...), made undirected, without self loops or duplicates. Label: the synset's
lexicographer file (``noun.animal``, ``verb.motion``, ...; 45 classes). Features: the TF-IDF
of the definition (gloss, with its examples; the synset's own words are not used), reduced
to ``dim`` dimensions by a seeded randomized SVD and standardized. Split: seeded random
60/20/20.

Data file line format (``man 5 wndb``)::

    offset lex_filenum ss_type w_cnt(hex) {word lex_id}... p_cnt {sym offset pos src/tgt}...
    [frames] | gloss
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..runtime.errors import SpmmgnnError
from .graph import Graph
from .splits import random_split

DEFAULT_DIRS = ("/usr/share/wordnet", "/usr/share/wordnet/dict", "/usr/local/WordNet-3.0/dict")
FILES = ("noun", "verb", "adj", "adv")
POS_FILE = {"n": 0, "v": 1, "a": 2, "s": 2, "r": 3}
LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute "
    "noun.body noun.cognition noun.communication noun.event noun.feeling noun.food noun.group "
    "noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant "
    "noun.possession noun.process noun.quantity noun.relation noun.shape noun.state "
    "noun.substance noun.time verb.body verb.change verb.cognition verb.communication "
    "verb.competition verb.consumption verb.contact verb.creation verb.emotion verb.motion "
    "verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl").split()
_WORD = re.compile(r"[a-z]+")


def find_wordnet(directory=None) -> Path:
    """The folder holding ``data.noun`` etc.; a clear SpmmgnnError if WordNet is missing."""
    candidates = [Path(directory)] if directory else [Path(d) for d in DEFAULT_DIRS]
    for d in candidates:
        if all((d / f"data.{f}").is_file() for f in FILES):
            return d
    where = ", ".join(str(d) for d in candidates)
    raise SpmmgnnError(f"WordNet data files (data.noun, data.verb, data.adj, data.adv) not "
                       f"found in {where}: install Debian's package with `apt-get install "
                       f"wordnet-base`, or pass --wordnet-dir DIR")


def parse_wordnet(directory=None):
    """Parse the four data files.

    Returns ``(keys, labels, src, dst, glosses, words)``: ``keys[i] = file * 10**9 + offset``
    (sorted), the lexicographer file number, pointer end points as synset indices, and the
    gloss and words of each synset.
    """
    d = find_wordnet(directory)
    keys, labels, glosses, words = [], [], [], []
    ptr_from, ptr_to = [], []
    for file_id, name in enumerate(FILES):
        path = d / f"data.{name}"
        with open(path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):  # one line per synset
                if line.startswith("  ") or not line.strip():
                    continue  # licence header
                head, _, gloss = line.partition(" | ")
                tok = head.split()
                try:
                    offset, lexfile = int(tok[0]), int(tok[1])
                    w_cnt = int(tok[3], 16)
                    p_at = 4 + 2 * w_cnt
                    p_cnt = int(tok[p_at])
                    ptrs = tok[p_at + 1:p_at + 1 + 4 * p_cnt]
                    targets = [POS_FILE[pos] * 10**9 + int(off)
                               for off, pos in zip(ptrs[1::4], ptrs[2::4], strict=True)]
                except (ValueError, IndexError, KeyError):
                    raise SpmmgnnError(f"{path}:{lineno}: malformed WordNet data line") from None
                key = file_id * 10**9 + offset
                keys.append(key)
                labels.append(lexfile)
                glosses.append(gloss.strip())
                words.append(" ".join(tok[4:p_at:2]))
                ptr_from.extend([key] * len(targets))
                ptr_to.extend(targets)
    keys = np.asarray(keys, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    labels = np.asarray(labels, dtype=np.int64)[order]
    glosses = [glosses[i] for i in order]
    words = [words[i] for i in order]
    a = np.searchsorted(keys, np.asarray(ptr_from, dtype=np.int64))
    b = np.searchsorted(keys, np.asarray(ptr_to, dtype=np.int64))
    b_ok = (b < keys.size) & (keys[np.minimum(b, keys.size - 1)] == np.asarray(ptr_to, np.int64))
    return keys, labels, a[b_ok], b[b_ok], glosses, words


def tfidf(texts: list[str], min_df: int = 2) -> sp.csr_array:
    """Sublinear TF-IDF, rows L2-normalized; terms in fewer than ``min_df`` texts dropped."""
    tokens = [_WORD.findall(t.lower()) for t in texts]
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    vocab: dict[str, int] = {}
    term = np.fromiter((vocab.setdefault(w, len(vocab)) for t in tokens for w in t),
                       dtype=np.int64, count=int(lengths.sum()))
    doc = np.repeat(np.arange(len(texts)), lengths)
    M = sp.csr_array((np.ones(term.size), (doc, term)), shape=(len(texts), len(vocab)))
    M.sum_duplicates()
    df = np.bincount(M.indices, minlength=len(vocab))
    keep = np.flatnonzero(df >= min_df)
    M = sp.csr_array(M[:, keep])
    df = df[keep]
    idf = np.log((1 + len(texts)) / (1 + df)) + 1
    M.data = (1 + np.log(M.data)) * idf[M.indices]
    norms = np.sqrt(np.asarray(M.multiply(M).sum(axis=1)).ravel())
    M.data /= np.repeat(np.where(norms > 0, norms, 1), np.diff(M.indptr))
    return M


def randomized_svd(M, k: int, seed: int = 0, oversample: int = 16, power_iters: int = 2):
    """Top-k ``U * s`` of a sparse matrix by randomized subspace iteration (Halko et al.).

    Sparse products in scipy, the tall-skinny QR and small SVD in torch (float64).
    """
    import torch

    def qr(Y: np.ndarray) -> np.ndarray:
        return torch.linalg.qr(torch.from_numpy(np.ascontiguousarray(Y)))[0].numpy()

    rng = np.random.default_rng(seed)
    k = min(k, min(M.shape))
    Y = M @ rng.standard_normal((M.shape[1], k + oversample))
    for _ in range(power_iters):
        Y = M @ qr(M.T @ qr(Y))
    Q = qr(Y)
    B = np.ascontiguousarray((M.T @ Q).T)
    Ub, s, _ = torch.linalg.svd(torch.from_numpy(B), full_matrices=False)
    return (Q @ Ub[:, :k].numpy()) * s[:k].numpy()


def wordnet_graph(directory=None, dim: int = 128, seed: int = 0,
                  split=(0.6, 0.2, 0.2)) -> Graph:
    """The WordNet synset graph with TF-IDF-SVD features, lexicographer-file labels, split."""
    keys, labels, a, b, glosses, _ = parse_wordnet(directory)
    n = keys.size
    keep = a != b
    rows = np.concatenate([a[keep], b[keep]])
    cols = np.concatenate([b[keep], a[keep]])
    A = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    A.data[:] = 1.0
    X = randomized_svd(tfidf(glosses), dim, seed=seed)
    X = (X - X.mean(axis=0)) / np.maximum(X.std(axis=0), 1e-12)
    return Graph(adj=A, features=X.astype(np.float32), labels=labels,
                 masks=random_split(n, seed, split), num_classes=len(LEXNAMES),
                 directed=False, name="wordnet")
