"""Real graphs for the partitioner benchmark, built from data that Debian packages ship.

Every graph is returned as an undirected, unweighted ``scipy.sparse.csr_array`` without self
loops or isolated vertices (the SpMM matrix pattern a GCN would use). The packages are
unpacked with ``apt-get download`` + ``dpkg -x`` into ``--deb-root`` (no installation, no
dependencies pulled), unless they are already installed; the converted graphs are cached
there as ``.npz`` (``allow_pickle=False``).

| name | kind | package | vertices / edges |
| --- | --- | --- | --- |
| wordnet | lexical (synset pointers) | wordnet-base | synsets / all pointers |
| thesaurus | lexical (synonyms) | mythes-en-us | words and phrases / entry-synonym |
| gcide | lexical (definitions) | dict-gcide | headwords / headword - defining word |
| debian-deps | software (citation-like) | `apt-cache dumpavail` | packages / dependencies |
| javadoc | web (hyperlinks) | openjdk-17-doc | HTML pages / links |
| elephant, bunny, armadillo | surface meshes | libcgal-demo | mesh vertices / triangle edges |
| hueeber | finite-element mesh (hexahedra) | calculix-ccx-test | nodes / shared element |
| berlin-roads | road (SUMO network, Berlin-Adlershof) | sumo-tools | junctions / road edges |
| debian-wot | social (OpenPGP web of trust) | debian-keyring | key ids / certifications |
"""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

DEB_ROOT = Path(os.environ.get("SPMMGNN_DEB_ROOT", "/tmp/spmmgnn-debs"))


def undirected(src, dst, n: int | None = None) -> sp.csr_array:
    """Symmetric 0/1 pattern of the edges, no self loops, isolated vertices removed."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    n = int(max(src.max(initial=-1), dst.max(initial=-1)) + 1) if n is None else n
    keep = src != dst
    src, dst = src[keep], dst[keep]
    A = sp.coo_array((np.ones(2 * src.size, dtype=np.float32),
                      (np.concatenate([src, dst]), np.concatenate([dst, src]))),
                     shape=(n, n)).tocsr()
    A.sum_duplicates()
    A.data[:] = 1.0
    used = np.flatnonzero(np.diff(A.indptr) > 0)
    return sp.csr_array(A[used][:, used])


def package_dir(pkg: str, root: Path = DEB_ROOT) -> Path:
    """Where ``pkg``'s files are: ``/`` if installed, else unpacked under ``root``."""
    q = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True,
                       text=True, check=False)
    if q.returncode == 0 and "install ok installed" in q.stdout:
        return Path("/")
    target = root / pkg
    if not (target / ".unpacked").exists():
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", pkg], cwd=target, check=True,
                       capture_output=True)
        deb = next(target.glob(f"{pkg}_*.deb"))
        subprocess.run(["dpkg", "-x", str(deb), str(target)], check=True)
        deb.unlink()
        (target / ".unpacked").touch()
    return target


def _index(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Unique names and each name's index into them."""
    uniq, inv = np.unique(np.asarray(names, dtype=object).astype(str), return_inverse=True)
    return uniq, inv


def wordnet(root: Path) -> sp.csr_array:
    from spmmgnn.data.wordnet import parse_wordnet
    base = package_dir("wordnet-base", root)
    _, _, src, dst, _, _ = parse_wordnet(base / "usr/share/wordnet")
    return undirected(src, dst)


def thesaurus(root: Path) -> sp.csr_array:
    path = package_dir("mythes-en-us", root) / "usr/share/mythes/th_en_US_v2.dat"
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[1:]
    src, dst, entry = [], [], ""
    for line in lines:
        if line.startswith("("):
            syns = [re.sub(r" \((generic|similar|related|antonym)[^)]*\)$", "", s).lower()
                    for s in line.split("|")[1:]]
            src += [entry] * len(syns)
            dst += syns
        else:
            entry = line.partition("|")[0].lower()
    _, inv = _index(src + dst)
    return undirected(inv[:len(src)], inv[len(src):])


_B64 = {c: i for i, c in enumerate(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def _b64(s: str) -> int:
    v = 0
    for c in s:
        v = v * 64 + _B64[c]
    return v


GCIDE_MAX_DF = 300


def gcide(root: Path) -> sp.csr_array:
    """Headword -> every headword that occurs in its definition text (lower case)."""
    d = package_dir("dict-gcide", root) / "usr/share/dictd"
    data = gzip.decompress((d / "gcide.dict.dz").read_bytes())
    heads, spans = [], []
    for line in (d / "gcide.index").read_text(encoding="utf-8").splitlines():
        word, off, length = line.split("\t")[:3]
        if not word.startswith("00-database"):
            heads.append(word.lower())
            spans.append((_b64(off), _b64(length)))
    words = {w: i for i, w in enumerate(dict.fromkeys(heads))}
    src, dst = [], []
    for h, (o, n) in zip(heads, spans, strict=True):
        body = data[o:o + n].decode("utf-8", "replace").lower()
        ids = {words[w] for w in re.findall(r"[a-z][a-z'-]+", body) if w in words}
        src += [words[h]] * len(ids)
        dst += list(ids)
    # words in more than MAX_DF definitions (the, of, a, ...) are markup and grammar, not
    # meaning: without this cut the graph has 17 M non-zeros and one vertex of degree 156 k
    dst = np.asarray(dst, dtype=np.int64)
    keep = np.bincount(dst, minlength=len(words))[dst] <= GCIDE_MAX_DF
    return undirected(np.asarray(src, dtype=np.int64)[keep], dst[keep], len(words))


def debian_deps(root: Path) -> sp.csr_array:
    """Binary packages of apt's lists (``apt-cache dumpavail``) and their dependencies."""
    del root
    out = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True,
                         check=True).stdout
    names, deps = [], []
    for para in out.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", para, flags=re.M))
        if "Package" not in fields:
            continue
        names.append(fields["Package"])
        alts = ",".join(fields.get(f, "") for f in ("Depends", "Pre-Depends", "Recommends"))
        deps.append({re.split(r"[\s(:]", a.strip())[0]
                     for a in re.split(r"[,|]", alts) if a.strip()})
    ids = {p: i for i, p in enumerate(dict.fromkeys(names))}
    src, dst = [], []
    for p, ds in zip(names, deps, strict=True):
        t = [ids[x] for x in ds if x in ids]
        src += [ids[p]] * len(t)
        dst += t
    return undirected(src, dst, len(ids))


def javadoc(root: Path) -> sp.csr_array:
    base = package_dir("openjdk-17-doc", root) / "usr/share/doc"
    pages = sorted(str(p.relative_to(base)) for p in base.rglob("*.html"))
    ids = {p: i for i, p in enumerate(pages)}
    href = re.compile(r'href="([^"#?:]+\.html)')
    src, dst = [], []
    for p in pages:
        folder = os.path.dirname(p)
        text = (base / p).read_text(encoding="utf-8", errors="replace")
        t = {ids.get(os.path.normpath(os.path.join(folder, h)), -1) for h in href.findall(text)}
        t.discard(-1)
        src += [ids[p]] * len(t)
        dst += list(t)
    return undirected(src, dst, len(pages))


def _cgal_off(name: str) -> Callable[[Path], sp.csr_array]:
    def load(root: Path) -> sp.csr_array:
        base = package_dir("libcgal-demo", root) / "usr/share/doc/libcgal-dev"
        with tarfile.open(base / "data.tar.gz") as tar:
            raw = tar.extractfile(f"data/meshes/{name}.off").read().decode()
        tok = raw.split()
        nv, nf = int(tok[1]), int(tok[2])
        faces = np.asarray(tok[4 + 3 * nv:], dtype=np.int64)
        assert faces.size == 4 * nf and np.all(faces[::4] == 3), "triangle meshes only"
        f = faces.reshape(nf, 4)[:, 1:]
        return undirected(f.ravel(), np.roll(f, 1, axis=1).ravel(), nv)
    return load


def hueeber(root: Path) -> sp.csr_array:
    """CalculiX test ``hueeber1``: two stacked cubes of 8-node hexahedra; vertices adjacent
    when they share an element (the stiffness matrix pattern)."""
    path = (package_dir("calculix-ccx-test", root)
            / "usr/share/doc/calculix-ccx-test/examples/test/hueeber1.inp.gz")
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    start = next(i for i, s in enumerate(lines) if s.upper().startswith("*ELEMENT"))
    stop = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("*"))
    el = np.array([s.split(",") for s in lines[start + 1:stop]], dtype=np.int64)[:, 1:] - 1
    a = np.repeat(el, 8, axis=1).ravel()
    b = np.tile(el, (1, 8)).ravel()
    return undirected(a, b)


# The largest real-city SUMO network Debian ships (sumo-doc has only the doxygen pages; the
# examples are in sumo-tools). Junctions of sumo-tools' networks (non-internal): game/DRT
# (Berlin-Adlershof) 1,033; game/A10KW (A10 near Königs Wusterhausen) 232; game/bs3d
# (Braunschweig) 205; RealWorld/joined 162, acosta 112, pasubio 65; the rest <= 107 and mostly
# synthetic. Debian's OpenStreetMap extracts are smaller still (python-osmnx-doc's
# West-Oakland.osm.bz2: 213 highway nodes), so the road graph stays below 10^4 vertices.
SUMO_NET = "usr/share/sumo/tools/game/DRT/osm.net.xml"


def sumo_net(path: Path) -> sp.csr_array:
    """Junction graph of a SUMO ``.net.xml[.gz]``: an undirected edge per road edge.

    Intra-junction connectors, pedestrian crossings and walking areas (``function=...``) and
    railway-only edges are skipped; streamed, so a city-size file is never held whole.
    """
    ends: list[str] = []
    depth, root = 0, None
    with gzip.open(path) if path.suffix == ".gz" else path.open("rb") as f:
        for event, el in ET.iterparse(f, events=("start", "end")):
            if event == "start":
                root = el if root is None else root
                depth += 1
                continue
            depth -= 1
            if (el.tag == "edge" and el.get("function", "normal") == "normal"
                    and el.get("from") is not None
                    and not el.get("type", "").startswith("railway.")):
                ends += [el.get("from"), el.get("to")]
            if depth == 1:
                root.clear()
    _, inv = _index(ends)
    return undirected(inv[0::2], inv[1::2])


def berlin_roads(root: Path) -> sp.csr_array:
    return sumo_net(package_dir("sumo-tools", root) / SUMO_NET)


_GPG_RECORD = re.compile(r"^(pub|sub|uid|uat|sig|rev):(?:[^:\n]*:){3}([0-9A-F]*):", re.M)


def keyring_sigs(keyrings: list[Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Primary key ids, and (signed key, signer key) of every certification by another key.

    Uses ``gpg --list-sigs --with-colons`` in a throw-away home directory (the user's
    ``~/.gnupg`` is never read or written). Certifications are the ``sig`` records under a
    ``uid``/``uat``; subkey bindings (under ``sub``), revocations and self-signatures are not.
    """
    with tempfile.TemporaryDirectory() as home:
        out = "".join(subprocess.run(
            ["gpg", "--no-default-keyring", "--homedir", home, "--keyring", str(k),
             "--list-sigs", "--with-colons", "--fixed-list-mode"],
            capture_output=True, check=True).stdout.decode("utf-8", "replace")
            for k in keyrings)
    rec = np.array(_GPG_RECORD.findall(out), dtype=str).reshape(-1, 2)
    kind, keyid = rec[:, 0], rec[:, 1]
    pos = np.arange(kind.size)
    owner = np.maximum.accumulate(np.where(kind == "pub", pos, -1))
    header = np.maximum.accumulate(np.where(np.isin(kind, ["pub", "sub", "uid", "uat"]), pos, -1))
    cert = (kind == "sig") & np.isin(kind[header], ["uid", "uat"]) & (owner >= 0)
    signed, signer = keyid[owner[cert]], keyid[cert]
    other = signed != signer
    return np.unique(keyid[kind == "pub"]), signed[other], signer[other]


def debian_wot(root: Path) -> sp.csr_array:
    """Web of trust of the Debian keyrings: keys (members and outside signers) adjacent when
    one certified a user id of the other. debian-keyring 2022.12.24 gives 1,347 keys: 1,145
    of the keyrings' 1,178 primary keys (33 have no certification by another key) and 202
    outside signers; the keyrings carry few third-party signatures, hence so few."""
    rings = sorted((package_dir("debian-keyring", root) / "usr/share/keyrings").glob("*.gpg"))
    _, signed, signer = keyring_sigs(rings)
    _, inv = np.unique(np.concatenate([signed, signer]), return_inverse=True)
    return undirected(inv[:signed.size], inv[signed.size:])


GRAPHS: dict[str, tuple[str, Callable[[Path], sp.csr_array]]] = {
    "wordnet": ("lexical", wordnet), "thesaurus": ("lexical", thesaurus),
    "gcide": ("lexical", gcide), "debian-deps": ("software", debian_deps),
    "javadoc": ("web", javadoc), "elephant": ("mesh", _cgal_off("refined_elephant")),
    "bunny": ("mesh", _cgal_off("bunny00")), "armadillo": ("mesh", _cgal_off("armadillo")),
    "hueeber": ("FE mesh", hueeber), "berlin-roads": ("road", berlin_roads),
    "debian-wot": ("social", debian_wot)}


# the benchmark set of ``bench/partition.py --graphs real``: the graphs of 10^4 - 10^6 vertices
BENCH_SET = ("wordnet", "thesaurus", "gcide", "debian-deps", "javadoc", "elephant", "bunny",
             "armadillo", "hueeber")
# ``--graphs small``: the only road network and social network found in Debian, both of about
# 10^3 vertices (below the range; reported apart)
SMALL_SET = ("berlin-roads", "debian-wot")


def load(name: str, root: Path = DEB_ROOT) -> sp.csr_array:
    """The graph ``name`` of ``GRAPHS``, converted once and cached under ``root``."""
    cache = root / "graphs" / f"{name}.npz"
    if cache.exists():
        with np.load(cache, allow_pickle=False) as z:
            n = int(z["n"])
            return sp.csr_array((np.ones(z["indices"].size, np.float32), z["indices"],
                                 z["indptr"]), shape=(n, n))
    A = GRAPHS[name][1](root)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, indptr=A.indptr, indices=A.indices, n=np.int64(A.shape[0]))
    return A


if __name__ == "__main__":
    import time
    for g in GRAPHS:
        t0 = time.perf_counter()
        A = load(g)
        deg = np.diff(A.indptr)
        print(f"{g:12s} n={A.shape[0]:>8,} nnz={A.nnz:>10,} max deg {deg.max():>7,} "
              f"skew {np.sqrt(np.mean(deg.astype(float) ** 2)) / deg.mean():.2f} "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
