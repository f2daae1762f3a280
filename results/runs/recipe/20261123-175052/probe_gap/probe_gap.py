"""Why 09_recipe's lama_geo probe and 05_open_set disagree on the same checkpoint (EM given retrieval 25.9 vs 10.3).

Run from the repository root after `make reproduce PROFILE=recipe` and the by-hand 05 of ../05_open_set_npm3000
(it needs the recipe run's checkpoints and 05's cached NPM store of the 3,000-step checkpoint):

    python results/runs/recipe/20261123-175052/probe_gap/probe_gap.py

Writes probe_gap.json beside this file. Measures, for run A's 3,000-step NPM (from MiniLM):
  1. 05's pipeline (its 650k-token store, its BM25) on 05's 80 lama_geo queries and on the probe's 216;
  2. the probe's pipeline (09_recipe's GeoProbe: Factbook 2025 + Wikipedia blocks, only the retrieved blocks encoded);
  3. 05's retrieved blocks re-encoded in a probe-style store (does the code path or the blocks make the difference?);
  4. on queries retrieved by both: is the relation's own Factbook field line ('Capital: name: X') in the blocks,
     and EM with and without it.
"""
import json, re, shutil, tempfile, glob
from pathlib import Path
import numpy as np, pandas as pd, torch, datasets
from npm_nb.tasks import load_task, normalize_answer
from npm_nb.inference import NPM, bm25_query
from npm_nb.reference import (load_row_model, store_key, reference_datastore, reference_bm25, open_selection, plain_blocks)
from npm_nb.datastore import Datastore
from npm_nb.evaluation import eval_open_set, exact_match
from npm_nb.search import set_threads

set_threads(0)
HERE = Path(__file__).parent
CKPT = 'data/cache/recipe/recipe/curve_minilm/checkpoint-3000'
out = {'checkpoint': CKPT}

# 1. 05's pipeline: the cpu profile's 05 parameters (650k tokens, 20 a bucket, BM25 top-3), the recipe profile's store
names, tasks = ['factbook2025', 'wikipedia', 'wordnet'], ['lama_geo', 'questions_geo', 'lama_wordnet', 'lama_commonsense']
ex, _, keep = open_selection(names, tasks, 20, 0, 3)
m = load_row_model('npm', 'recipe', base='minilm', device='cpu')   # data/cache/checkpoints/recipe/npm/final = CKPT (copied)
big = reference_datastore(m, store_key('npm'), names, 'recipe', 650000, remove_stopwords=True, seed=0, keep=keep, progress=False)
bm = reference_bm25(big)
task = load_task('lama_geo'); rng = np.random.default_rng(0); keys = np.array(task['bucket']); idx = []
for v in sorted(set(keys.tolist())):   # the probe's sample: 60 a bucket, as 09_recipe's GeoProbe draws it
    r = np.flatnonzero(keys == v); idx += rng.choice(r, min(len(r), 60), replace=False).tolist()
probe_df = task.select(sorted(idx)).to_pandas()
tabs = {}
for name, df in [('05_sample', ex['lama_geo']), ('probe_sample', probe_df)]:
    tab, _ = eval_open_set(m, 'lama_geo', big, mode='bm25', bm25=bm, restrict_k=3, l_max=10, rows=df.reset_index(drop=True))
    r = tab.retrieved.to_numpy(bool); tabs[name] = tab
    out[f'05_pipeline_{name}'] = {'n': len(tab), 'recall': 100 * r.mean(), 'n_retrieved': int(r.sum()),
                                  'em_given_retrieval': 100 * tab.hit[r].mean()}

# 2. the probe's pipeline (09_recipe's GeoProbe, executed from the notebook's own cell)
nb = json.load(open('nbs/experiments/09_recipe.ipynb'))
g = dict(profile='recipe', device='cpu', seed=0, threads=0, model='minilm', corpora='wikipedia,bbc,brown,factbook2025')
exec(''.join(nb['cells'][2]['source']), g)
src = ''.join(next(c['source'] for c in nb['cells'] if 'class GeoProbe' in ''.join(c['source'])))
exec(src[:src.index('t0 = time.perf_counter()')], g)
P = g['GeoProbe'](60, 0, 0)
out['probe_pipeline'] = {**P(CKPT, 'cpu'), 'recall': 100 * P.recall}
pl = P.last.set_index('query')

# 3. 05's retrieved blocks, re-encoded as a probe-style store of their own
texts05 = plain_blocks(big.docs, m.tok)
a = tabs['probe_sample']; a = a[a.retrieved].reset_index(drop=True)
need = sorted({b for bs in a.retrieved_blocks for b in bs}); where = {b: i for i, b in enumerate(need)}
tmp = Path(tempfile.mkdtemp())
mini = Datastore.build(datasets.Dataset.from_dict({'id': [f'b{b}' for b in need], 'title': [''] * len(need),
                                                   'text': [texts05[b] for b in need]}),
                       m.encoder, m.tok, tmp/'mini', remove_stopwords=True, progress=False)
of_doc = {}
for k, dix in enumerate(mini.blocks['doc_index']):
    for d in set(dix) - {-1}: of_doc.setdefault(d, []).append(k)
table = {bm25_query(q, False): np.array(sorted({k for b in bs for k in of_doc[where[b]]}), np.int64)
         for q, bs in zip(a['query'], a.retrieved_blocks)}
with torch.no_grad(): preds = m.predict_batch(list(a['query']), mini, topn=5, bm25=g['FixedBlocks'](table), restrict_k=3, question=False)
same = [(p[0].text if p else '') == q for p, q in zip(preds, a.pred)]
out['05_blocks_in_probe_style_store'] = {'em_given_retrieval': 100 * np.mean([exact_match(p[0].text if p else '', gl) for p, gl in zip(preds, a.answers)]),
                                         'same_top1_as_05': 100 * np.mean(same), 'n': len(a)}
shutil.rmtree(tmp, ignore_errors=True)

# 4. queries retrieved by both pipelines: the relation's field line in the blocks, and EM with / without it
FIELD = {'capital': 'capital: name: {}', 'official_language': 'languages: {}', 'continent': 'map references: {}'}
qi = {x['query']: i for i, x in enumerate(P.queries)}
def field(texts, rel, answers):
    n = ' '.join(normalize_answer(t) for t in texts)
    return any(normalize_answer(FIELD[rel].format(x)) in n for x in answers)
rows = []
for _, r in a.iterrows():
    i = qi.get(r['query'])
    if i is None or not P.hit[i]: continue
    pt = [P.block_text[b] for b in P.top[i]]
    rows.append({'relation': r.relation, 'hit_05': bool(r.hit), 'hit_probe': bool(pl.hit[r['query']]),
                 'field_05': field([texts05[b] for b in r.retrieved_blocks], r.relation, r.answers) if r.relation in FIELD else None,
                 'field_probe': field(pt, r.relation, r.answers) if r.relation in FIELD else None,
                 'pred_05': r.pred, 'pred_probe': pl.pred[r['query']]})
d = pd.DataFrame(rows)
out['both_retrieved'] = {'n': len(d), 'em_05': 100 * d.hit_05.mean(), 'em_probe': 100 * d.hit_probe.mean(),
                         'top1_agree': 100 * (d.pred_05 == d.pred_probe).mean()}
f = d[d.field_05.notna()]
for s in ('05', 'probe'):
    w = f[f[f'field_{s}'] == True]
    out['both_retrieved'][f'field_line_in_blocks_{s}'] = 100 * (f[f'field_{s}'] == True).mean()
    out['both_retrieved'][f'em_with_field_line_{s}'] = 100 * w[f'hit_{s}'].mean()
out['both_retrieved']['n_field_relations'] = len(f)
d.to_csv(HERE/'both_retrieved.csv', index=False)
(HERE/'probe_gap.json').write_text(json.dumps(out, indent=1, default=float))
print(json.dumps(out, indent=1, default=float))
