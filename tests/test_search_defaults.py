"""Replays the search audit 3 (shared/audits/SEARCH-3.md, issue #51) on tiny inputs, so its fixes stay fixed.

Each test is named by what it checks; the comment above it gives the audit's finding. Every check compares against a
slow, obviously correct brute force: a float64 product and a stable sort (lower row first on ties).
"""
import json, math, warnings
from pathlib import Path
import numpy as np
import pytest
import torch, faiss, yaml
import npm_nb.npm.search as search
from npm_nb.npm.search import ExactSearch
from npm_nb.npm.index import (build_index, recall_at_k, recall_interval, faiss_blas_path, openblas_core,
                              HNSW_M, HNSW_EF_CONSTRUCTION)

torch.set_num_threads(2)
ROOT = Path(__file__).resolve().parent.parent

def brute(V, Q, k):
    "All scores in float64, a stable sort, the first k: `(scores, rows)`."
    s = np.asarray(Q, np.float64) @ np.asarray(V, np.float64).T
    o = np.argsort(-s, axis=1, kind='stable')[:, :k]
    return np.take_along_axis(s, o, 1), o

def blas_settings(): return faiss.cvar.distance_compute_blas_threshold, faiss.cvar.distance_compute_blas_database_bs

# finding 2: the shipped graph was the weak one (efConstruction 80); build_index now builds the tuned graph by default
def test_build_index_defaults_to_the_tuned_graph():
    X = np.random.default_rng(0).standard_normal((500, 16)).astype(np.float16)
    ix = build_index(X, 'hnsw', progress=False)
    assert (HNSW_M, HNSW_EF_CONSTRUCTION) == (32, 240)
    assert ix.params['hnsw_m'] == 32 and ix.params['ef_construction'] == 240
    assert ix.index.hnsw.efConstruction == 240                       # what FAISS really built with

# finding 2: 03's own default and every profile's 03 entry build that graph too (none pins efConstruction 80)
def test_index_benchmark_and_profiles_use_the_tuned_graph():
    nb = json.loads((ROOT/'nbs/experiments/03_index_benchmark.ipynb').read_text())
    params = next(''.join(c['source']) for c in nb['cells'] if 'parameters' in c.get('metadata', {}).get('tags', []))
    assert f'ef_construction: int = {HNSW_EF_CONSTRUCTION}' in params and f'hnsw_m: int = {HNSW_M}' in params
    for f in sorted((ROOT/'params').glob('*.yaml')):
        for name, spec in ((yaml.safe_load(f.read_text()) or {}).get('notebooks') or {}).items():
            p = (spec or {}).get('params') or {}
            assert p.get('ef_construction', HNSW_EF_CONSTRUCTION) >= HNSW_EF_CONSTRUCTION, (f.name, name, p)

# finding 3: 200 queries, tuned on the reported ones; the cpu profile now runs 1,000 test and 200 separate tuning
# queries
def test_cpu_profile_benchmarks_on_1000_test_queries_and_a_separate_tuning_set():
    p = yaml.safe_load((ROOT/'params/cpu.yaml').read_text())['notebooks']['03_index_benchmark']['params']
    assert p['n_queries'] >= 1000 and p['n_tune'] >= 200

# finding 1: FAISS's IndexFlatIP took its per-query scan (nq·d < 128,000); forced onto BLAS it returns the brute
# force's rows, and the settings are restored afterwards, also after an error
def test_faiss_blas_path_returns_brute_force_rows_and_restores_its_settings():
    rng = np.random.default_rng(1)
    V, Q = rng.integers(-3, 4, (5000, 24)).astype(np.float32), rng.integers(-3, 4, (30, 24)).astype(np.float32)
    want_s, _ = brute(V, Q, 20)
    f = faiss.IndexFlatIP(24)
    f.add(V)
    before = blas_settings()
    with faiss_blas_path(block=1024):
        assert blas_settings() == (0, 1024)
        D, I = f.search(Q, 20)
    assert blas_settings() == before
    np.testing.assert_array_equal(D, want_s)                         # small integers: every product exact
    np.testing.assert_array_equal(np.take_along_axis(Q.astype(np.float64) @ V.astype(np.float64).T, I, 1), want_s)
    with pytest.raises(RuntimeError, match='inside'):
        with faiss_blas_path(): raise RuntimeError('inside')
    assert blas_settings() == before
    assert openblas_core()                                            # names the kernels (or says why it cannot)

# finding 3: recall@10 over 200 queries has SE ~0.009; the interval is over queries, mean ± 1.96·sd/√n
def test_recall_interval_is_the_normal_interval_over_queries():
    rng = np.random.default_rng(2)
    exact = np.array([rng.permutation(1000)[:10] for _ in range(300)])
    found = np.where(rng.random(exact.shape) < 0.9, exact, -1)       # each row found with probability 0.9
    per_query = [sum(int(r in set(e)) for r in f) / 10 for f, e in zip(found, exact)]   # the slow way
    m, lo, hi = recall_interval(found, exact, 10)
    half = 1.96 * np.std(per_query, ddof=1) / math.sqrt(len(per_query))
    assert m == pytest.approx(np.mean(per_query)) == pytest.approx(recall_at_k(found, exact, 10))
    assert (lo, hi) == (pytest.approx(m - half), pytest.approx(min(1.0, m + half)))
    assert recall_interval(exact, exact, 10) == (1.0, 1.0, 1.0)      # every query perfect: no spread

# finding 4a: the experiments search at k = 1024; at that k on a small store the search must stay exact on every
# path: the default (fp32 when the shortlist k + 3k is over N/256), the streamed fp32 shortlist (forced below its
# N/16 cap), the streamed bf16 shortlist forced below its ratio, and fp32 asked for; with many ties (small integers:
# rows must equal the stable brute force's) and without
@pytest.mark.parametrize('ties', [True, False])
def test_exact_search_at_the_experiments_k_matches_brute_force(ties, monkeypatch):
    rng = np.random.default_rng(3)
    N, d, k = 20_000, 16, 1024
    if ties: V, Q = rng.integers(-2, 3, (N, d)).astype(np.float16), rng.integers(-2, 3, (6, d)).astype(np.float32)
    else: V, Q = rng.standard_normal((N, d)).astype(np.float16), rng.standard_normal((6, d)).astype(np.float32)
    want_s, want_r = brute(V, Q, k)
    def check(s, r):
        np.testing.assert_allclose(s, want_s, rtol=0, atol=1e-4)
        if ties: np.testing.assert_array_equal(r, want_r)
        else: assert np.abs(s - want_s)[r != want_r].max(initial=0) < 1e-5   # only fp32 near-ties may swap
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # bf16 on a CPU that emulates it: slow, still exact
        for precision in ('fp32', 'bf16'): check(*ExactSearch(V, precision=precision).search(Q, k))
        monkeypatch.setattr(search, 'FP32_MAX_SHORTLIST', 4)          # fp32_shortlist·4 <= N: the fp32 stream runs
        for precision in ('fp32', 'bf16'):                            # (bf16: its shortlist is too long, fp32 copy)
            es = ExactSearch(V, precision=precision)
            check(*es.search(Q, k))
            assert es.stats['certified'] + es.stats['fp32'] == len(Q) and torch.float32 in es._samples, es.stats
        monkeypatch.setattr(search, 'BF16_MAX_SHORTLIST', 4)          # 4k·4 <= N: the streamed bf16 shortlist runs
        es = ExactSearch(V, precision='bf16')
        check(*es.search(Q, k))
    assert es.stats['queries'] == len(Q) and es.stats['fp32'] < len(Q), es.stats   # the bf16 path answered, not fp32
