"""``default``'s time rule (the decision function, the child killed at its deadline, the
candidates a spent budget leaves) and the KaMinPar base (real kaminpar, metrics by brute
force)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn.data.generators import rmat, sbm
from spmmgnn.partitioners import load_cap, partition
from spmmgnn.partitioners.api import score
from spmmgnn.partitioners.budget import (
    BASES_MAX_N,
    DEFAULT_MARGIN,
    MT_MAX_PINS,
    MT_SECONDS_PER_PIN,
    REFINE_MIN_SHARE,
    REFINE_SHARE,
    default_budget,
    mt_seconds,
    plan_step,
    run_until,
)
from spmmgnn.partitioners.model import row_loads, symmetric_graph

from ..brute import brute_metrics

EPS = 0.03


def test_budget_is_three_metis_runs_or_two_seconds():
    assert default_budget(0.01) == 2.0
    assert default_budget(0.5) == 2.0
    assert default_budget(4.0) == pytest.approx(12.0)


def test_plan_step_picks_and_skips_as_the_rule_says():
    """At budget B the steps plan to end by 0.9 B; the refinement keeps 0.35 B: KaMinPar
    starts if half METIS's time is left before that reserve, Mt-KaHyPar if its least time
    (per pin, growing with log k) is, a refinement if 0.1 B is left at all; from 10^5
    vertices on only the refinement."""
    B, t_metis = 10.0, 1.0
    end, before = DEFAULT_MARGIN * B, (DEFAULT_MARGIN - REFINE_SHARE) * B  # 9.0 s, 5.5 s
    # KaMinPar: needs t_metis / 2 before the reserve
    assert plan_step("kaminpar", 1.0, B, t_metis, 10**5, 16) == pytest.approx(before)
    assert plan_step("kaminpar", before - t_metis / 2 + 0.01, B, t_metis, 10**5, 16) is None
    # no second base on a graph of BASES_MAX_N vertices, the refinement still
    assert plan_step("kaminpar", 1.0, B, t_metis, 10**5, 16, BASES_MAX_N) is None
    assert plan_step("mtkahypar", 1.0, B, t_metis, 10, 16, BASES_MAX_N) is None
    assert plan_step("refine", 1.0, B, t_metis, 10**5, 16, BASES_MAX_N) == pytest.approx(end)
    # Mt-KaHyPar: 1.9 us per pin at k <= 16, 1.5x that at k = 64 (log2 64 / 4)
    assert mt_seconds(10**6, 16) == pytest.approx(MT_SECONDS_PER_PIN * 10**6)
    assert mt_seconds(10**6, 64) == pytest.approx(1.5 * MT_SECONDS_PER_PIN * 10**6)
    pins_fit = int(4.4 / MT_SECONDS_PER_PIN)  # 4.4 s of 4.5 s left before the reserve
    assert plan_step("mtkahypar", 1.0, B, t_metis, pins_fit, 16) == pytest.approx(before)
    assert plan_step("mtkahypar", 1.0, B, t_metis, pins_fit, 64) is None
    assert plan_step("mtkahypar", 1.0, B, t_metis, 2 * pins_fit, 16) is None
    assert plan_step("mtkahypar", 0.0, 1e6, t_metis, MT_MAX_PINS + 1, 2) is None  # too big
    # the refinement: up to the budget's end, while a tenth of the budget is left
    assert plan_step("refine", before, B, t_metis, 10**9, 1024) == pytest.approx(end)
    assert plan_step("refine", end - REFINE_MIN_SHARE * B + 0.01, B, t_metis, 0, 2) is None
    # no rule: every step runs to its end
    for step in ("kaminpar", "mtkahypar", "refine"):
        assert plan_step(step, 1e9, math.inf, 1.0, 10**9, 1024) == math.inf
    with pytest.raises(ValueError, match="unknown step"):
        plan_step("metis", 0.0, B, t_metis, 0, 2)


def test_run_until_returns_kills_and_survives_failures():
    got = run_until(lambda: np.arange(300_000, dtype=np.int64), time.perf_counter() + 60)
    np.testing.assert_array_equal(got, np.arange(300_000))
    t = time.perf_counter()
    assert run_until(lambda: (time.sleep(30), np.zeros(3))[1], t + 0.5) is None
    assert time.perf_counter() - t < 5  # killed at its deadline, not after 30 s

    def fail():
        raise RuntimeError("a failing base partitioner")

    assert run_until(fail, time.perf_counter() + 60) is None
    assert run_until(lambda: np.ones(4, np.int64), math.inf) is not None


def _check(A, P, k):
    total, send, recv, nnz = brute_metrics(A, P.parts, k)
    assert P.metrics.total_volume == total
    np.testing.assert_array_equal(P.metrics.send_volume, send)
    np.testing.assert_array_equal(P.metrics.recv_volume, recv)
    assert nnz.max() <= load_cap(row_loads(A), k, EPS)


def test_a_spent_budget_leaves_metis_vol_alone():
    """``time_budget=0``: METIS-vol runs (its time sets the rule), every later step is
    listed as skipped, and the result is METIS-vol's balanced partition."""
    A = rmat(9, 8, seed=3)
    P = partition(A, 4, method="default", time_budget=0.0, threads=1)
    assert P.method == "metis-vol"
    ran = [c["method"] for c in P.candidates if "skipped" not in c]
    skipped = [c["method"] for c in P.candidates if "skipped" in c]
    assert ran == ["metis-vol"]
    assert set(skipped) >= {"kaminpar", "mtkahypar-fast", "metis-vol+multilevel"}
    _check(A, P, 4)


def test_default_without_a_rule_keeps_the_best_candidate():
    """``time_budget=inf``: the three bases, the label-propagation refinement of each (best
    base first), the full refinement of the best; the result is the candidate of lowest
    score, the bases equal the methods run alone, and the run is reproducible."""
    A = sbm(1200, 10, avg_degree=8, mixing=0.3, seed=4)
    k = 6
    runs = [partition(A, k, method="default", seed=2, threads=1, time_budget=math.inf)
            for _ in range(2)]
    d = runs[0]
    np.testing.assert_array_equal(d.parts, runs[1].parts)
    names = [(c["method"], c.get("refinement")) for c in d.candidates]
    assert names[:3] == [("metis-vol", None), ("kaminpar", None), ("mtkahypar-fast", None)]
    assert sorted(names[3:6]) == [(f"{b}+multilevel", "lp")
                                  for b in ("kaminpar", "metis-vol", "mtkahypar-fast")]
    assert names[6][1] == "lp+full" and len(names) == 7
    for c in d.candidates[:2]:
        alone = partition(A, k, method=c["method"], seed=2, threads=1).metrics
        assert (c["total_volume"], c["max_send"]) == (alone.total_volume, alone.max_send)
    best = min(d.candidates, key=lambda c: c["max_send"] + c["total_volume"] / k)
    assert score(d.metrics) == best["max_send"] + best["total_volume"] / k
    assert all(c["seconds"] >= 0 for c in d.candidates)
    _check(A, d, k)


@pytest.mark.parametrize("method", ["kaminpar", "kaminpar+multilevel"])
@pytest.mark.parametrize("k", [2, 7, 32])
def test_kaminpar_metrics_by_brute_force(method, k):
    """Real KaMinPar on a directed graph with empty rows (symmetrized for KaMinPar, the
    metrics of the directed one): volumes as counted literally, the load cap kept."""
    rng = np.random.default_rng(k)
    A = sp.csr_array(sp.random_array((600, 600), density=0.01, rng=rng, format="csr"))
    A = sp.csr_array(sp.diags_array((rng.random(600) > 0.05).astype(float)) @ A)
    A.eliminate_zeros()
    P = partition(A, k, method=method, threads=2, seed=1)
    assert P.method == method and P.parts.max() < k
    _check(A, P, k)


def test_parhip_file_is_the_graph():
    """The file KaMinPar reads holds the symmetrized graph and the loads as weights."""
    import kaminpar

    from spmmgnn.partitioners.kaminpar import write_parhip

    A = rmat(8, 6, seed=5)
    G = symmetric_graph(sp.csr_array(A))
    w = np.maximum(row_loads(sp.csr_array(A)), 1)
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".parhip") as f:
        write_parhip(G, w, f.name)
        g = kaminpar.load_graph(f.name, kaminpar.GraphFileFormat.PARHIP)
    assert (g.n(), g.m()) == (G.shape[0], G.nnz)
    for v in (0, 7, G.shape[0] - 1):
        assert g.degree(v) == G.indptr[v + 1] - G.indptr[v]
        assert g.node_weight(v) == w[v]
        assert sorted(u for u, _ in g.neighbors(v)) == sorted(
            G.indices[G.indptr[v]:G.indptr[v + 1]].tolist())


def test_sliced_passes_under_a_far_deadline_make_the_same_moves():
    """Under a deadline, label-propagation rounds go in slices of vertices and FM passes in
    calls of bounded work, each followed by a clock check; a deadline that never comes
    changes no move (small slices so a 3,000-vertex graph is cut many times)."""
    from spmmgnn.partitioners.maxsend import driver, refine_max_send
    from spmmgnn.partitioners.metis import metis_parts
    from spmmgnn.partitioners.model import ColumnNet

    A = rmat(11, 8, seed=6)
    k, loads = 8, row_loads(sp.csr_array(A))
    cap = load_cap(loads, k, EPS)
    cn = ColumnNet.from_matrix(sp.csr_array(A))
    base = metis_parts(sp.csr_array(A), k, loads, EPS)
    whole = refine_max_send(cn, loads, base, k, cap)[0]
    saved = driver.LP_SLICE, driver.FM_WORK
    driver.LP_SLICE, driver.FM_WORK = 100, 500
    try:
        sliced = refine_max_send(cn, loads, base, k, cap, deadline=time.perf_counter() + 3600)[0]
    finally:
        driver.LP_SLICE, driver.FM_WORK = saved
    np.testing.assert_array_equal(sliced, whole)


def test_progress_lines_name_the_steps(monkeypatch):
    """Past ``PROGRESS_AFTER`` seconds (0 here) every step reports a line; before, none."""
    from spmmgnn.partitioners import api

    A = rmat(8, 6, seed=1)
    quiet: list[str] = []
    partition(A, 4, method="metis-vol+multilevel", progress=quiet.append)
    assert quiet == []
    monkeypatch.setattr(api, "PROGRESS_AFTER", 0.0)
    lines: list[str] = []
    partition(A, 4, method="default", progress=lines.append, threads=1)
    assert lines[0].startswith("partition default k=4: metis-vol ")
    assert any("budget" in x for x in lines) and "done in" in lines[-1]


def test_a_passed_deadline_stops_the_multilevel_refinement_before_any_work():
    """A deadline already passed: no level is coarsened and no pass runs (each level is
    reported skipped), so the input comes back unchanged; the deadline is checked inside
    the passes too (``test_sliced_passes_under_a_far_deadline_make_the_same_moves``)."""
    from spmmgnn.partitioners.model import ColumnNet
    from spmmgnn.partitioners.multilevel import refine_multilevel

    A = sbm(3000, 20, avg_degree=8, mixing=0.3, seed=5)
    k = 8
    loads = row_loads(A)
    base = partition(A, k, method="metis-vol").parts
    cn = ColumnNet.from_matrix(A)
    cap = load_cap(loads, k, EPS)
    p, report = refine_multilevel(cn, loads, base, k, cap, deadline=time.perf_counter() - 1)
    np.testing.assert_array_equal(p, base)
    assert [lv.get("skipped") for lv in report["levels"]] == ["deadline"]
    free, report = refine_multilevel(cn, loads, base, k, cap)
    assert len(report["levels"]) > 1  # without the deadline the same call coarsens


def test_a_tiny_budget_reports_every_candidate_it_skipped():
    """``default`` under a budget its first base already spends: METIS-vol's partition,
    and each later step listed with why it did not run."""
    A = sbm(3000, 20, avg_degree=8, mixing=0.3, seed=5)
    P = partition(A, 8, method="default", time_budget=1e-3)
    assert P.method == "metis-vol"
    why = {c["method"]: c["skipped"] for c in P.candidates if "skipped" in c}
    assert set(why) >= {"kaminpar", "mtkahypar-fast", "metis-vol+multilevel"}
    assert all("time rule" in w for w in why.values())
    _check(A, P, 8)


def test_default_takes_one_thread_per_idle_core():
    """With another process busy on a core, ``default`` gives its threaded bases fewer
    threads than the cores (at least one) and says so on its progress line."""
    import os
    import subprocess
    import sys

    from spmmgnn.partitioners.api import threads_for_load

    cores = os.cpu_count() or 1
    if cores < 2:
        pytest.skip("one core: nothing to cut")
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.3)
        threads, note = threads_for_load(cores)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert 1 <= threads < cores and "busy with other work" in note


def test_a_pass_stops_at_its_deadline():
    """A label-propagation round and an FM pass whose deadline has passed stop after their
    first slice (``LP_SLICE`` vertices; one call of ``FM_WORK`` nets), where the same pass
    without a deadline visits every vertex: the clock is checked inside a pass, not only
    between passes."""
    from spmmgnn.partitioners.maxsend import driver
    from spmmgnn.partitioners.maxsend.driver import Refinement
    from spmmgnn.partitioners.maxsend.state import make_targets
    from spmmgnn.partitioners.model import ColumnNet

    A = sp.csr_array(sbm(3000, 20, avg_degree=8, mixing=0.3, seed=7))
    k, loads = 8, row_loads(A)
    cap = load_cap(loads, k, EPS)
    cn = ColumnNet.from_matrix(A)
    start = np.random.default_rng(0).integers(0, k, A.shape[0])  # nearly every vertex moves

    def round_moves(expired) -> int:
        st = Refinement(cn, loads, start.copy(), k, make_targets())
        st.retarget(0.01, 0.02)
        return st.lp_round(10 * cap, 0.0, np.random.default_rng(1), expired)

    def fm_work(expired) -> tuple[int, int]:
        """(nets scanned, the seed the pass's last call stopped at)."""
        st = Refinement(cn, loads, start.copy(), k, make_targets())
        st.retarget(0.01, 0.02)
        st.fm_pass(10 * cap, 0.0, np.random.default_rng(1), expired=expired)
        return int(st.fm_stats[6]), int(st.fm_stats[7])

    saved = driver.LP_SLICE, driver.FM_WORK
    driver.LP_SLICE, driver.FM_WORK = 100, 500
    try:
        full, cut = round_moves(None), round_moves(lambda: True)
        assert cut <= 100 < full
        (cut_work, cut_seed), (full_work, _) = fm_work(lambda: True), fm_work(lambda: False)
        assert cut_seed < A.shape[0] and cut_work < full_work
    finally:
        driver.LP_SLICE, driver.FM_WORK = saved
