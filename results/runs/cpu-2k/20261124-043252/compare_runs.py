"""C (this run, cpu-2k's parameters) against B (the cpu profile's run 20261123-201109), table by table.

Run from the repository root: python results/runs/cpu-2k/20261124-043252/compare_runs.py
Writes C_vs_B.md beside this script: the headline numbers of both runs side by side, then every table of the two
runs marked identical or changed (a changed table lists its rows that differ)."""
from pathlib import Path
import pandas as pd

HERE = Path(__file__).resolve().parent
C, B = HERE/'tables', HERE.parent.parent/'cpu'/'20261123-201109'/'tables'

def t(run, name):
    d = pd.read_csv(run/f'{name}.csv')
    return d.drop(columns=[c for c in d.columns if c.startswith('Unnamed')])
def cell(run, name, row, col, key=None):
    d = t(run, name); key = key or d.columns[0]
    return d.loc[d[key].astype(str) == row, col].iloc[0]

rows = []
def add(what, name, row, col, key=None):
    rows.append((what, cell(C, name, row, col, key), cell(B, name, row, col, key), name))

for end in ('start', 'end'):
    rows.append((f'held-out {end} top-1, % (30 batches)', *(round(100 * cell(r, 'train_retrieval', 'npm (trained)', f'{end}_top1'), 1) for r in (C, B)), 'train_retrieval'))
add('MLM baseline masked-token accuracy, %', 'train_mlm', 'MLM baseline (1000 steps)', 'acc')
for task in ('lama_geo', 'questions_geo', 'lama_wordnet', 'lama_commonsense', 'mean'):
    add(f'05 open-set NPM {task} (macro EM)', '05_open_set', 'NPM (BM25 top-3 blocks)', task)
add('04 closed-set NPM average', '14_systems_closed_set', 'NPM', 'Avg', 'system')
add('04 closed-set majority average', '14_systems_closed_set', 'Majority class', 'Avg', 'system')
m = {r: t(r, '04_closed_set_metrics') for r in (C, B)}
auc = {r: m[r][m[r]['model'] == 'NPM (ours, trained)']['AUC'].mean().round(3) for r in m}
rows.append(('04 closed-set NPM mean AUC', auc[C], auc[B], '04_closed_set_metrics'))
add('06 temporal NPM changed (2015 → 2025)', '06_temporal', 'NPM (BM25-restricted)', 'changed', 'model')
add('06 temporal NPM unchanged (2015 → 2025)', '06_temporal', 'NPM (BM25-restricted)', 'unchanged', 'model')
tr = {r: t(r, '07_translation') for r in (C, B)}
mac = {r: tr[r].loc[tr[r]['language'] == 'macro', 'NPM (BM25-restricted)'].iloc[0] if (tr[r]['language'] == 'macro').any()
       else tr[r]['NPM (BM25-restricted)'].mean().round(1) for r in tr}
rows.append(('07 translation NPM macro EM', mac[C], mac[B], '07_translation'))
cs = {r: t(r, '08_corpus_size') for r in (C, B)}
rows.append(('08 mean macro EM at the smallest → largest store',
             f"{cs[C]['mean'].iloc[0]} → {cs[C]['mean'].iloc[-1]}", f"{cs[B]['mean'].iloc[0]} → {cs[B]['mean'].iloc[-1]}", '08_corpus_size'))
add('11 word-sense gap of NPM (same − different sense)', '11_word_sense', 'NPM (trained)', 'gap (same − different)')
add('12b NPM on REPLUG\'s open-set examples (mean)', '12b_replug_open_set', 'NPM (BM25 top-3)', 'mean')
add('12b REPLUG on the same examples (mean)', '12b_replug_open_set', 'REPLUG (k=5)', 'mean')
out = ['# C (cpu-2k) against B (cpu), every step of the `cpu` evaluation', '',
       'C: this run (NPM from MiniLM, 2,000 steps). B: `../../cpu/20261123-201109/` (NPM 1,000 steps from the 1,000-step MLM).',
       'The MLM baseline and REPLUG are the same training in both runs. REALM is left out: it does not depend on NPM, and',
       "B's 13_realm has since been re-run with the scheduled refresh (NOTE.md).", '',
       '| measure | C | B | table |', '|---|---|---|---|']
out += [f'| {w} | {c} | {b} | `{n}` |' for w, c, b, n in rows]
same, changed = [], []
for f in sorted(C.glob('*.csv')):
    g = B/f.name
    if not g.exists(): changed.append(f'{f.stem} (only in C)'); continue
    a, b = t(C, f.stem), t(B, f.stem)
    (same if a.equals(b) else changed).append(f.stem)
out += ['', f'Tables identical in both runs ({len(same)}): ' + ', '.join(f'`{s}`' for s in same) + '.', '',
        f'Tables that differ ({len(changed)}): ' + ', '.join(f'`{s}`' for s in changed) + '.', '']
(HERE/'C_vs_B.md').write_text('\n'.join(out))
print('\n'.join(out))
