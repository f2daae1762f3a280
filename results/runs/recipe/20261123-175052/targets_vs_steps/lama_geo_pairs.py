"""lama_geo, paired (and C and Bconst against B on all four open-set tasks): the same 80 examples, 05's store and BM25 blocks, answered by each checkpoint (A2000, A3000, B1000, C2000, Bconst).
Prints and writes lama_geo_pairs.json beside this file: macro EM, the share of answers that repeat a query word, the most
frequent answers, and paired micro-EM differences (SE) against A2000. Run from the repository root after run.sh.
    python results/runs/recipe/20261123-175052/targets_vs_steps/lama_geo_pairs.py
"""
import json
from pathlib import Path
import numpy as np, pandas as pd, torch
from npm_nb.inference import NPM
from npm_nb.reference import store_key, reference_datastore, reference_bm25, open_selection
from npm_nb.evaluation import eval_open_set, paired_difference
from npm_nb.tasks import normalize_answer

HERE = Path(__file__).parent
CKPTS = {'A2000': 'data/cache/recipe/recipe/curve_minilm/checkpoint-2000', 'A3000': 'data/cache/recipe/recipe/curve_minilm/checkpoint-3000',
         'B1000': 'data/cache/recipe/recipe/curve_mlm/checkpoint-1000', 'C2000': 'data/cache/checkpoints/c2000/npm/final',
         'Bconst': 'data/cache/checkpoints/bconst/npm/final'}
names, tasks = ['factbook2025', 'wikipedia', 'wordnet'], ['lama_geo', 'questions_geo', 'lama_wordnet', 'lama_commonsense']
ex, _, keep = open_selection(names, tasks, 20, 0, 3)   # 05's examples and kept documents (cpu profile: 20 a bucket)
q = ex['lama_geo'].reset_index(drop=True)
qword = lambda p, s: bool(set(normalize_answer(p or '').split()) & set(normalize_answer(s).split()))
tabs, out = {}, {}
for name, path in CKPTS.items():
    if not (Path(path)/'config.json').exists(): continue
    m = NPM.from_pretrained(path, device='cpu')
    ds = reference_datastore(m, store_key('npm'), names, 'recipe', 650000, remove_stopwords=True, seed=0, keep=keep, progress=False)
    tab, s = eval_open_set(m, 'lama_geo', ds, mode='bm25', bm25=reference_bm25(ds), restrict_k=3, l_max=10, rows=q, batch_size=32)
    tabs[name] = tab; p = tab.pred.tolist()
    out[name] = {'macro EM': s['macro_em'], 'micro EM': 100 * tab.hit.mean(),
                 'answers repeating a query word (%)': 100 * np.mean([qword(x, y) for x, y in zip(p, q['query'])]),
                 'most frequent answers': pd.Series([normalize_answer(x or '') for x in p]).value_counts().head(5).to_dict()}
for name in [n for n in tabs if n != 'A2000']:
    g, se = paired_difference(tabs['A2000'].hit.to_numpy(), tabs[name].hit.to_numpy())
    out[name]['A2000 minus this (micro EM, paired)'] = {'difference': g, 'SE': se}
# C (a candidate `cpu` recipe) and Bconst (B with a constant rate) against B (the current one) on all four open-set tasks,
# paired over their 320 examples
hits = {}
def four_tasks(name):
    if name not in hits:
        m = NPM.from_pretrained(CKPTS[name], device='cpu')
        ds = reference_datastore(m, store_key('npm'), names, 'recipe', 650000, remove_stopwords=True, seed=0, keep=keep, progress=False)
        hits[name] = np.concatenate([eval_open_set(m, t, ds, mode='bm25', bm25=reference_bm25(ds), restrict_k=3, l_max=10,
                                                   rows=ex[t].reset_index(drop=True), batch_size=32)[0].hit.to_numpy() for t in tasks])
    return hits[name]
for name in ('C2000', 'Bconst'):
    if {'B1000', name} <= set(tabs):
        g, se = paired_difference(four_tasks(name), four_tasks('B1000'))
        out[f'{name} minus B1000, four open-set tasks (micro EM, paired)'] = {'difference': g, 'SE': se, 'n': len(hits['B1000'])}
print(json.dumps(out, indent=1))
(HERE/'lama_geo_pairs.json').write_text(json.dumps(out, indent=1) + '\n')
