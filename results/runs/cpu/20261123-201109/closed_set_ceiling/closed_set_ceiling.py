"""Is closed-set NPM at chance because of the kNN vote, or because the mask vector does not carry the sentiment?

Run from the repository root after `make reproduce` (the cpu profile's NPM and 04_closed_set's cached stores; ~1 min):

    python results/runs/cpu/20261123-201109/closed_set_ceiling/closed_set_ceiling.py

04_closed_set scores a label by the softmax mass (τ = 5) its verbalizer words get among the query's k = 1,024 nearest
stored tokens (App. A.4). On a 311k-token store that vote can hide a signal: a rare label word ("terrible" occurs 27
times, "great" 504) seldom makes the top k. This script removes the cut: for each query it scores each label over
*every* stored occurrence of its words (start + end similarity), aggregated three ways (mean: a prototype, free of
the label prior; max; logsumexp at τ = 5: the kNN score with k = all occurrences), and reports the AUC of
(positive − negative) against the gold label, beside 04's kNN AUC. Same model, store, examples (300 a task) and
verbalizers as 04 (its cells are executed with the cpu profile's parameters). Writes closed_set_ceiling.csv / .json.
"""
import json
from pathlib import Path
import numpy as np, pandas as pd

HERE = Path(__file__).parent
nb = json.loads(Path('nbs/experiments/04_closed_set.ipynb').read_text())
src = lambda i: ''.join(nb['cells'][i]['source'])
g = {}
exec(src(1), g)   # 04's parameters, then the cpu profile's (params/cpu.yaml), NPM row only
g.update(profile='cpu', rows='npm', tasks='mr,cr,amazon', max_tokens=300_000, n_examples=300, k=1024)
assert 'ROWS = {' in src(4) and 'def store_of' in src(10), '04_closed_set changed: update the cell numbers'
for i in (2, 4, 7, 10): exec(src(i), g)
from npm_nb.inference import word_table, similarity
from npm_nb.evaluation import eval_closed_set, roc_auc, _task_rows
from npm_nb.tasks import make_query, MASK

m = g['model_of']('npm'); ds = g['store_of']('npm', g['selection']['mr'])
wt = word_table(ds, fold_case=True)
out = []
for t in ['mr', 'cr', 'amazon']:
    verbs = g['verbs'][t]
    _, s = eval_closed_set(m, t, ds, verbs, k=1024, temperature=5.0, n=300)
    task, df = _task_rows(t, None, 300)
    y = df.label.values.astype(int) == 1
    qs, qe = m.encode_queries([make_query(task, r['text'], MASK, r.get('text_b')) for r in df.to_dict('records')])
    res = {'task': t, 'n': len(df), '04 kNN AUC (k=1024)': round(s['auc'], 3), '04 kNN accuracy': round(s['accuracy'], 1)}
    for name, words in (('label word', lambda l: [l]), ('fuzzy list', lambda l: verbs[l])):
        sc = {}
        for lab in verbs:
            rows = np.flatnonzero(np.isin(wt.whole, [wt.index[w] for w in words(lab) if w in wt.index]))
            S = similarity(qs, ds.vectors[rows]) + similarity(qe, ds.vectors[rows])
            mx = S.max(1, keepdims=True)
            sc[lab] = dict(n=len(rows), mean=S.mean(1), max=S.max(1), lse=np.log(np.exp((S - mx) / 5).sum(1)) + mx[:, 0] / 5)
        neg, pos = list(verbs)
        res[f'{name}: stored occurrences (neg/pos)'] = f"{sc[neg]['n']}/{sc[pos]['n']}"
        for agg in ('mean', 'max', 'lse'):
            res[f'{name}: AUC, {agg} over all'] = round(roc_auc(sc[pos][agg] - sc[neg][agg], y), 3)
    out.append(res); print(res, flush=True)
pd.DataFrame(out).to_csv(HERE/'closed_set_ceiling.csv', index=False)
(HERE/'closed_set_ceiling.json').write_text(json.dumps(out, indent=1) + '\n')
