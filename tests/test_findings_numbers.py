"""Every number with ± that the findings quote (results/findings.md and history.md, README.md's Results section) is read from a
committed table: results/tables, results/benchmarks, a run's tables or its NOTE. A value and its SE count as found when a
table holds them side by side (two adjacent cells, or "a ± b" in its text) at the quoted precision; the sign is not
compared, since a sentence says "REPLUG leads by 17.5" where the table has NPM − REPLUG = −17.5. Numbers the page
derives by arithmetic are listed in DERIVED, each recomputed here from the committed numbers it comes from. Text only:
no notebook, model or package import (issue 49, item 6; SCIENCE-3 §1 and findings 2, 6)."""
import json, re
from pathlib import Path
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
RES = ROOT/'results'
NUM = r'[+\-−]?\d[\d,]*(?:\.\d+)?'
PM = re.compile(rf'({NUM})\s*%?\s*±\s*\n?\s*({NUM})')   # "a ± b", the SE maybe on the next line
BARE = re.compile(rf'(?<![\d.])\s±\s*({NUM})')        # "±7" with no value before it: must be derived

def value(s: str) -> float: return abs(float(s.replace('−', '-').replace(',', '')))
def decimals(s: str) -> int: return len(s.split('.')[1]) if '.' in s else 0
def rounds_to(quoted: str, x: float) -> bool: return abs(value(quoted) - abs(x)) <= 0.5 * 10 ** -decimals(quoted) + 1e-9

def texts() -> dict:
    "The quoting texts: the findings, the settings chosen on dev (results/history.md), and README.md's Results section."
    readme = (ROOT/'README.md').read_text()
    return {'results/findings.md': (RES/'findings.md').read_text(), 'results/history.md': (RES/'history.md').read_text(),
            "README.md's Results": readme.split('\n## Results', 1)[1].split('\n## ', 1)[0]}

def sentence(text: str, i: int) -> str:
    "The sentence around position i, on one line."
    a = max(text.rfind('. ', 0, i), text.rfind('\n\n', 0, i)) + 1; b = text.find('. ', i)
    return ' '.join(text[a:b if b > 0 else len(text)].split())

def table_files() -> list:
    pats = ['tables/*.md', 'tables/*.csv', 'benchmarks/*.md', 'benchmarks/*.csv',
            'runs/*/*/tables/*.md', 'runs/*/*/tables/*.csv', 'runs/*/*/NOTE.md']
    return [f for p in pats for f in sorted(RES.glob(p)) if not f.name.endswith('.examples.csv')]

def cells(line: str, csv: bool) -> list:
    return [c.strip() for c in (re.split(r',(?=(?:[^"]*"[^"]*")*[^"]*$)', line) if csv else line.strip().strip('|').split('|'))]

_PAIRS = None
def table_pairs() -> list:
    "Every (value, SE) a committed table holds: adjacent numeric cells of a row, and each 'a ± b' of its text."
    global _PAIRS
    if _PAIRS is None:
        out = []
        for f in table_files():
            for line in f.read_text().splitlines():
                out += [(value(a), value(b), f) for a, b in PM.findall(line)]
                if line.startswith('|') or f.suffix == '.csv':
                    nums = [c if re.fullmatch(NUM, c) else None for c in cells(line, f.suffix == '.csv')]
                    out += [(value(a), value(b), f) for a, b in zip(nums, nums[1:]) if a and b]
        _PAIRS = out
    return _PAIRS

# ---- numbers derived by arithmetic, each recomputed from what it comes from ----

def _pairs_row(task: str, a: str, b: str) -> tuple:
    "(A − B, SE) of results/tables/14_systems_open_set_pairs.csv's row for task, A, B."
    import csv
    for r in csv.DictReader((RES/'tables'/'14_systems_open_set_pairs.csv').open()):
        if (r['task'], r['A'], r['B']) == (task, a, b): return float(r['A − B']), float(r['SE'])
    raise KeyError((task, a, b))

def cloze_npm_minus_replug() -> tuple:
    "NPM − REPLUG on the three cloze tasks (lama_geo, lama_wordnet, lama_commonsense) of 14_systems_open_set_pairs: the mean of the task differences, SEs combined as independent (as the table's own mean row)."
    d = [_pairs_row(t, 'NPM (BM25 top-3 blocks)', 'REPLUG (k=5)') for t in ('lama_geo', 'lama_wordnet', 'lama_commonsense')]
    return np.mean([x for x, _ in d]), np.sqrt(sum(s * s for _, s in d)) / len(d)

def _sweep(recipe: str) -> tuple:
    "A recipe's per-example dev hits (%) and strata (task, bucket) from results/sweep/sweep/<recipe>.json."
    d = json.loads((RES/'sweep'/'sweep'/f'{recipe}.json').read_text())
    hits, strata = [], []
    for t, v in d['examples'].items():
        hits += [100.0 * int(c) for c in v['hit']]; strata += [(t, min(int(b), 4)) for b in v['bucket']]
    return np.array(hits), strata

def _criterion(x, strata, tasks=None) -> tuple:
    "The dev criterion (npm_nb.run.reference.criterion): tasks equal, buckets equal within a task, SE by strata."
    idx = {}
    for i, k in enumerate(strata):
        if tasks is None or k[0] in tasks: idx.setdefault(k, []).append(i)
    by_task = {}
    for t, b in idx: by_task.setdefault(t, set()).add(b)
    m = v = 0.0
    for (t, b), ii in idx.items():
        w = 1 / (len(by_task) * len(by_task[t])); g = x[ii]
        m += w * g.mean(); v += w * w * (g.var(ddof=1) / len(g) if len(g) > 1 else 0.0)
    return m, np.sqrt(v)

OPEN = {'lama_geo', 'questions_geo', 'lama_wordnet', 'lama_commonsense'}
def sweep_paired(a: str, b: str, tasks=None):
    "Paired dev difference of two recipes of the sweep, optionally on some tasks only."
    def f():
        (ha, sa), (hb, sb) = _sweep(a), _sweep(b)
        assert sa == sb, f'{a} and {b} were not scored on the same dev examples'
        return _criterion(ha - hb, sa, tasks)
    return f

def _config_tokens(run: str) -> int:
    "steps × batch × length of a run's 01_train (its config.yaml), NPM's training token slots."
    text = (RES/'runs'/run/'config.yaml').read_text().split('01_train:', 1)[1].split('\n  0', 1)[0]
    get = lambda k: int(re.search(rf'\n\s+{k}: (\d+)', text).group(1))
    return get('steps') * get('batch_size') * get('max_len')

def gpu_token_ratio() -> tuple:
    "The h100 run's NPM token slots over the cpu recipe's (C2k, the fresh-clone cpu run)."
    return _config_tokens('h100/20261127-205558') / _config_tokens('cpu/20261127-234205'), None

def lm_speedup(system: str):
    "fp32 seconds over bf16 seconds of a system in results/benchmarks/lm_precision.csv (the LMs' precision on dev)."
    import csv
    def f():
        r = next(r for r in csv.DictReader((RES/'benchmarks'/'lm_precision.csv').open()) if r['system'] == system)
        return float(r['s_fp32']) / float(r['s_bf16']), None
    return f

def twice(se: float):
    return lambda: (2 * se, None)

# quoted text -> how it is recomputed; the comment says from which committed numbers
DERIVED = {
    '−4.4 ± 1.6': cloze_npm_minus_replug,                     # 14_systems_open_set_pairs: lama_geo, wordnet, commonsense rows
    '+23.9 ± 5.1': sweep_paired('C2k', 'C1k', {'temporal unchanged'}),   # results/sweep/sweep/C2k.json, C1k.json
    '−0.1 ± 1.3': sweep_paired('C2k', 'C1k', OPEN),           # the same, open-set tasks only
    '−1.0 ± 1.1': sweep_paired('P16', 'C1k'),                 # results/sweep/sweep/P16.json, C1k.json
    '−3.7 ± 1.0': sweep_paired('X8', 'P16'),                  # results/sweep/sweep/X8.json, P16.json
    '±7': twice(3.29),                                        # 2 × the SE of 06_temporal's unchanged 30.7 → 35.8 (+5.19 ± 3.29)
    '1.70×': lm_speedup('REPLUG (k=5)'),                       # results/benchmarks/lm_precision.csv: s_fp32 / s_bf16
    '0.74×': lm_speedup('LM alone'),                           # the same
    '48×': gpu_token_ratio,                                   # h100: 3,000 × 128 × 256; cpu: 2,000 × 8 × 128 (config.yaml)
}

def _norm(s: str) -> str: return ' '.join(s.replace('-', '−').split())

def quotes(txts=None) -> list:
    "(where, quoted text, value, SE or None, sentence) for every ± number of the quoting texts."
    out = []
    for where, text in (txts or texts()).items():
        out += [(where, f'{a} ± {b}', a, b, sentence(text, m.start())) for m in PM.finditer(text) for a, b in [m.groups()]]
        out += [(where, f'±{b}', b, None, sentence(text, m.start())) for m in BARE.finditer(text) for b in [m.group(1)]]
    return out

def test_the_texts_quote_numbers_with_se():
    q = quotes()
    assert len(q) >= 40, f'only {len(q)} ± numbers found: the pattern no longer reads the findings'
    assert any(w.startswith('README') for w, *_ in q)

def unfound(txts=None) -> list:
    "A sentence for each ± number of the texts that no committed table holds and DERIVED does not recompute."
    pairs, missing = table_pairs(), []
    derived = {_norm(k) for k in DERIVED}
    for where, quoted, a, b, sent in quotes(txts):
        if _norm(quoted) in derived: continue
        if b is None or not any(rounds_to(a, x) and rounds_to(b, s) for x, s, _ in pairs):
            missing.append(f'{where}: {quoted!r} is in no committed table (results/tables, benchmarks, run tables or NOTE), '
                           f'in: "{sent}". Quote the table\'s number, or add it to DERIVED with its recomputation.')
    return missing

def test_each_number_with_se_the_findings_quote_is_in_a_committed_table():
    "Issue 49 item 6: every ± number of the findings and the README's Results is read from a committed table."
    missing = unfound()
    assert not missing, '\n'.join(missing)

def test_a_number_in_no_table_fails_with_its_sentence():
    "SCIENCE-3 §1: lama_geo's macro difference +22.5 ± 3.3 is the audit's recomputation, in no table; and an SE off by one digit is no match."
    m = unfound({'x': 'BM25 before dense search helps: lama_geo +22.5 ± 3.3 in macro EM. NPM − REPLUG +3.4 ± 2.5.'})
    assert len(m) == 2 and "'+22.5 ± 3.3'" in m[0] and 'lama_geo +22.5 ± 3.3 in macro EM' in m[0] and '+3.4 ± 2.5' in m[1]
    assert not unfound({'x': 'NPM − REPLUG +3.4 ± 2.4 (14_systems), micro +18.6 ± 2.7 (05).'})

@pytest.mark.parametrize('quoted', list(DERIVED))
def test_derived_numbers_are_recomputed_from_the_committed_numbers(quoted):
    "Each DERIVED number: quoted somewhere, and its recomputation rounds to the quoted digits."
    assert any(_norm(quoted) in _norm(t) for t in texts().values()), f'{quoted!r} is no longer quoted: drop it from DERIVED'
    x, se = DERIVED[quoted]()
    if '×' in quoted: a, b = quoted.rstrip('×'), None
    elif quoted.startswith('±'): a, b = quoted[1:], None
    else: a, b = PM.fullmatch(quoted).groups()
    assert rounds_to(a, x) and (b is None or rounds_to(b, se)), f'{quoted!r}: recomputed {x:.3f}' + (f' ± {se:.3f}' if se else '')

def underived_multiples(txts=None) -> list:
    "Each 'N×' under 1,000 of the texts that DERIVED does not recompute, with its sentence."
    out = []
    for where, text in (txts or texts()).items():
        for m in re.finditer(r'(\d[\d,.]*)[×x](?![\w\d])', text):
            if value(m.group(1)) >= 1000: continue   # the paper's scale ("about 6,000× the tokens"): the paper's, not a table's
            if _norm(f'{m.group(1)}×') not in {_norm(k) for k in DERIVED}:
                out.append(f'{where}: "{m.group(0)}" is derived from no listed numbers, in: "{sentence(text, m.start())}"')
    return out

def test_multiples_of_our_runs_are_recomputed():
    "SCIENCE-3 §1: the GPU run's multiple of the cpu recipe's token slots is 48× (98.3M / 2.05M), not the 96× once quoted."
    assert not underived_multiples(), '\n'.join(underived_multiples())
    assert underived_multiples({'x': '81 ms a step; 96× the cpu recipe\'s training tokens'})
    assert not underived_multiples({'x': 'batches of 128 × 256 and 8 x 128'})
