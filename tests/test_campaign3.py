"""Issue 46, the third campaign and the newcomer: each probe the outside checks hit, run
through the library or the command line in this process (``cli.main``, one rank); what
needs several ranks is in ``test_campaign3_mpi.py``."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import scipy.io
import scipy.sparse as sp

OLD = b"old contents\n"


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    from spmmgnn.cli import main

    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_error(code: int, err: str, *words: str) -> None:
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err[-3000:]
    for w in words:
        assert w in err, (w, err[-3000:])


@pytest.fixture
def mtx(tmp_path) -> Path:
    A = sp.random(50, 50, density=0.1, random_state=0, format="csr")
    path = tmp_path / "g.mtx"
    scipy.io.mmwrite(path, A + A.T)
    return path


# ------------------------------------------------------------------ crash and data lost
def test_datasets_parts_beyond_the_vertices_is_one_error(capsys, tmp_path, mtx):
    out = tmp_path / "x.h5"
    code, _, err = _main(capsys, "datasets", "convert", mtx, "--parts", "1000000000",
                         "--out", out)
    _one_error(code, err, "1000000000 block rows for 50 vertices", "at most 50 (--parts)")
    assert not out.exists()


def test_convert_refuses_to_replace_its_input(capsys, tmp_path, mtx):
    before = mtx.read_bytes()
    link = tmp_path / "link.mtx"
    link.symlink_to(mtx)
    for out in (mtx, link):
        code, _, err = _main(capsys, "datasets", "convert", mtx, "--out", out)
        _one_error(code, err, f"--out {out} is the input file", "give another name")
    assert mtx.read_bytes() == before and link.is_symlink()


def test_bench_refuses_a_file_that_is_not_a_results_file(capsys, mtx):
    from spmmgnn.benchmark.records import read_records

    before = mtx.read_bytes()
    code, _, err = _main(capsys, "bench", "--graph", "random:n=100,avg_degree=4",
                         "--algorithm", "sparse1d", "--repeat", "1", "--quiet", "-o", mtx)
    _one_error(code, err, f"{mtx}:1: not a record of spmmgnn bench", "not a results file?")
    assert mtx.read_bytes() == before
    torn = mtx.parent / "torn.jsonl"  # a torn append (starts as a record does) is skipped
    torn.write_text('{"kind": "network", "P": 2, "alpha": 1e-6, "beta": 1e-9, '
                    '"all_to_all": {"alpha": 1e-6, "beta": 1e-9}}\n{"mode": "sp\n')
    with pytest.warns(UserWarning, match="skipped 1 line"):
        assert len(read_records(torn)) == 1


def test_report_onto_a_file_is_one_error(capsys, tmp_path):
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps(dict(kind="network", P=2, alpha=1e-6, beta=1e-9,
                                       all_to_all=dict(alpha=1e-6, beta=1e-9))) + "\n")
    target = tmp_path / "notes.txt"
    target.write_bytes(OLD)
    code, _, err = _main(capsys, "report", results, "-o", target)
    _one_error(code, err, f"report -o {target}: it is a file, not a folder")
    assert target.read_bytes() == OLD


def test_the_json_fallback_file_has_the_mode_open_gives(tmp_path):
    from spmmgnn.atomic import default_mode
    from spmmgnn.training.run import save_results

    link = tmp_path / "run.json"
    link.symlink_to("/dev/full")
    line = save_results(str(link), '{"a": 1}')
    saved = Path(line.split("the results were saved to ")[1].split()[0])
    try:
        assert stat.S_IMODE(saved.stat().st_mode) == default_mode() != 0o600
        assert json.loads(saved.read_text()) == {"a": 1}
    finally:
        saved.unlink()


FULL_APPEND = """
import resource, sys
from spmmgnn import SpmmgnnError
from spmmgnn.benchmark.records import append_record
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
try:
    append_record(sys.argv[1], {"kind": "network", "P": 2, "alpha": 1e-6, "beta": 1e-9,
                                "pad": "x" * 1000})
except SpmmgnnError as exc:
    print(exc)
"""


@pytest.mark.parametrize("old", [None, b'{"kind": "network"}\n'])
def test_bench_results_on_a_full_disk_keep_the_old_file(tmp_path, old):
    """``ulimit -f`` as the full disk: the append fails after part of the record; the file
    is cut back to what it held (a new one removed), not left with a partial or 0-byte
    record."""
    path = tmp_path / "results.jsonl"
    if old is not None:
        path.write_bytes(old)
    limit = 500 + (0 if old is None else len(old))
    proc = subprocess.run([sys.executable, "-c", FULL_APPEND, str(path), str(limit)],
                          capture_output=True, text=True, timeout=120)
    assert "cannot append to results file" in proc.stdout, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    if old is None:
        assert not path.exists()
    else:
        assert path.read_bytes() == old
