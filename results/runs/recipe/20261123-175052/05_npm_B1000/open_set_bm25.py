"""05's NPM (BM25 top-3) row on any NPM checkpoint at the cpu profile's 05 parameters: python open_set_bm25.py CKPT OUT.json"""
import sys, numpy as np, pandas as pd, torch, json, time
from npm_nb.inference import NPM
from npm_nb.reference import store_key, reference_datastore, reference_bm25, open_selection
from npm_nb.evaluation import eval_open_set
from npm_nb.search import set_threads
set_threads(0)
ck = sys.argv[1]  # an NPM checkpoint folder
names = 'factbook2025,wikipedia,wordnet'.split(','); tasks='lama_geo,questions_geo,lama_wordnet,lama_commonsense'.split(',')
ex, subj, keep = open_selection(names, tasks, 20, 0, 3)
m = NPM.from_pretrained(ck, device='cpu')
t0 = time.time()
ds = reference_datastore(m, store_key('npm'), names, 'recipe', 650000, remove_stopwords=True, seed=0, keep=keep, progress=False)
bm = reference_bm25(ds); print('store', time.time()-t0, flush=True)
out = {}
for t in tasks:
    tab, s = eval_open_set(m, t, ds, mode='bm25', bm25=bm, restrict_k=3, l_max=10, rows=ex[t], batch_size=32)
    r = tab.retrieved.to_numpy(bool)
    out[t] = dict(macro=s['macro_em'], em=s['em'], recall=100*r.mean(), em_given=100*tab.hit[r].mean(), n=len(tab))
    print(t, out[t], flush=True)
print('mean macro', np.mean([v['macro'] for v in out.values()]))
json.dump(out, open(sys.argv[2], 'w'), indent=1)
