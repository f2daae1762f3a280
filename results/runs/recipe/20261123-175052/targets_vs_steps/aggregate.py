"""Issue #8's targets against NPM training steps: reads the tables `run.sh` wrote (one folder a checkpoint) and the `cpu`
profile's committed tables (step 0: the untrained MiniLM rows of the same notebooks; 'cpu': the profile's own NPM), and
writes targets_vs_steps.{csv,md} and targets_vs_steps.png beside this file.

    python results/runs/recipe/20261123-175052/targets_vs_steps/aggregate.py

SEs: the gaps (temporal, closed-set) are the notebooks' paired SEs, read from their readings; EM SEs are binomial,
sqrt(p(1 - p) / n), on the examples of the cell (macro EM over buckets of equal size: an approximation).
"""
import json, re
from pathlib import Path
import numpy as np, pandas as pd
import matplotlib; matplotlib.use('Agg')
import matplotlib.pyplot as plt
from npm_nb.batch import markdown_table

HERE = Path(__file__).parent
CPU = Path('results/tables')            # the committed `cpu` run (20261124-083712 since 2026-11-24; first 20261123-201109)
NPM05, NPM06, NPM04, NPM07 = 'NPM (BM25 top-3 blocks)', 'NPM (BM25-restricted)', 'NPM (ours, trained)', 'NPM (BM25-restricted)'
INIT05, INIT06, INIT04, INIT07 = ('MiniLM init + NPM scoring (BM25)', 'MiniLM init, NPM scoring (untrained)',
                                  'MiniLM init, NPM scoring (untrained)', 'MiniLM init, NPM scoring (untrained)')
POINTS = {'A300': ('A', 300, 300), 'A1000': ('A', 1000, 1000), 'A2000': ('A', 2000, 2000), 'A3000': ('A', 3000, 3000),
          'B1000': ('B', 1000, 2000), 'C2000': ('C', 2000, 2000),
          'Bconst': ('Bconst', 1000, 2000)}   # run, NPM steps, total steps (B: after 1,000 MLM steps)

def se(p, n): return 100 * np.sqrt(max(p / 100 * (1 - p / 100), 1e-12) / n)

def gap(reading: str, after: str) -> tuple:
    "The first '(+x ± y points' of `reading` after the words `after`: (x, y)."
    m = re.search(re.escape(after) + r'.*?\(([+-−]?\d+\.\d) ± (\d+\.\d) points', reading, flags=re.S)
    return (float(m.group(1).replace('−', '-')), float(m.group(2))) if m else (np.nan, np.nan)

def read(tables: Path, init: bool = False) -> dict:
    "The target measurements of one folder of tables; `init`: its untrained-MiniLM rows."
    out = {}
    t = tables/'05_open_set.csv'
    if t.exists():
        d = pd.read_csv(t).set_index('model'); r = d.loc[INIT05 if init else NPM05]
        out.update({'lama_geo EM': r['lama_geo'], 'lama_geo recall': r['lama_geo recall'], 'questions_geo EM': r['questions_geo'],
                    'open-set mean EM': r['mean']})
        rr = pd.read_csv(tables/'05_open_set_retrieval.csv')
        rr = rr[(rr.model == (INIT05 if init else NPM05)) & (rr.task == 'lama_geo')]
        if len(rr): out['lama_geo EM given retrieval'], out['n retrieved'] = rr['EM | retrieved'].iat[0], rr['n retrieved'].iat[0]
    t = tables/'06_temporal.csv'
    if t.exists():
        d = pd.read_csv(t).set_index('model'); r = d.loc[INIT06 if init else NPM06]
        (c15, c25), (u15, u25) = [map(float, r[s].split(' → ')) for s in ('changed', 'unchanged')]
        out.update({'temporal changed 2015': c15, 'temporal changed 2025': c25, 'temporal unchanged 2015': u15,
                    'temporal unchanged 2025': u25, 'temporal changed gain': c25 - c15})
        rel = tables/'06_temporal_relations.csv'
        if rel.exists():   # each corpus against its own year's answers: what the model reads at all, per kind of fact
            d = pd.read_csv(rel); lab = INIT06 if init else NPM06
            em = (d[f'{lab}: 2015 corpus, 2015 answer'] + d[f'{lab}: 2025 corpus, 2025 answer']) / 2
            for name, m in (('leaders', d.relation != 'capital'), ('capitals', d.relation == 'capital')):
                out[f'temporal: {name} read (own year)'] = float((em[m] * d.n[m]).sum() / d.n[m].sum())
        if not init:
            reading = json.loads((tables/'06_temporal.meta.json').read_text())['reading']
            m = re.search(r'\(([+-]?\d+\.\d) ± (\d+\.\d) points, [\d.]+ SE\) on changed facts', reading)
            out['temporal changed gain SE'] = float(m.group(2)) if m else 0.0   # no ± where no example differs
    t = tables/'04_closed_set.csv'
    if t.exists():
        d = pd.read_csv(t).set_index('model')
        out.update({'closed-set avg': d.loc[INIT04 if init else NPM04, 'Avg'], 'majority avg': d.loc['Majority class', 'Avg']})
        out['closed-set − majority'] = out['closed-set avg'] - out['majority avg']
        m = pd.read_csv(tables/'04_closed_set_metrics.csv'); m = m[m.model == (INIT04 if init else NPM04)]
        out['closed-set mean AUC'] = m.AUC.mean()
        if not init:
            reading = json.loads((tables/'04_closed_set.meta.json').read_text())['reading']
            out['closed-set − majority SE'] = gap(reading, 'the majority class')[1]
    t = tables/'07_translation.csv'
    if t.exists():
        d = pd.read_csv(t).set_index('language')
        col = INIT07 if init else NPM07
        out['translation macro EM'] = d.loc['macro', col] if 'macro' in d.index else d[col].iloc[:-1].mean()
        rd = pd.read_csv(tables/'07_translation_reading.csv').set_index('model')
        if col in rd.index:
            out['translation: asked name first'], out['translation: asked name first SE'] = rd.loc[col, 'asked name first (%)'], rd.loc[col, '± SE']
            out['translation: chance'] = rd.loc[col, 'chance (%)']
    return out

rows = {'MiniLM (0 steps)': {'run': 'A', 'NPM steps': 0, 'total steps': 0, **read(CPU, init=True)}}
for name, (run, s, tot) in POINTS.items():
    if (HERE/name/'tables').exists(): rows[name] = {'run': run, 'NPM steps': s, 'total steps': tot, **read(HERE/name/'tables')}
rows['cpu profile (B recipe, re-trained)'] = {'run': 'cpu', 'NPM steps': 1000, 'total steps': 2000, **read(CPU)}
df = pd.DataFrame(rows).T
df.index.name = 'checkpoint'
df.to_csv(HERE/'targets_vs_steps.csv')
show = ['run', 'NPM steps', 'total steps', 'lama_geo EM', 'lama_geo EM given retrieval', 'lama_geo recall', 'questions_geo EM',
        'open-set mean EM', 'temporal changed 2015', 'temporal changed 2025', 'temporal changed gain',
        'temporal unchanged 2025', 'temporal: leaders read (own year)', 'temporal: capitals read (own year)', 'closed-set avg', 'closed-set − majority', 'closed-set mean AUC',
        'translation macro EM', 'translation: asked name first']
md = df[[c for c in show if c in df]].copy()
for c in md.columns[1:]: md[c] = pd.to_numeric(md[c]).round(2 if 'AUC' in c else 1)
(HERE/'targets_vs_steps.md').write_text(markdown_table(md) + '\n')
print(df[[c for c in show if c in df]].to_string())

# the figure: one panel a target, run A as a line (0 → 3,000 NPM steps), B and the cpu profile as markers
TARGETS = [('lama_geo EM', 25, 'lama_geo macro EM (BM25 top-3)', lambda r: se(r['lama_geo EM'], 80)),
           ('temporal changed gain', 10, 'temporal: changed-fact EM, 2025 − 2015 corpus', lambda r: r.get('temporal changed gain SE', np.nan)),
           ('closed-set − majority', 5, 'closed-set: NPM − majority class (avg of 4)', lambda r: r.get('closed-set − majority SE', np.nan)),
           ('translation macro EM', 10, 'entity translation macro EM', lambda r: se(r['translation macro EM'], 60))]
fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
A = df[df.run == 'A'].sort_values('NPM steps')
for ax, (col, target, title, sef) in zip(axes, TARGETS):
    a = A[A[col].notna()] if col in A else A.iloc[:0]
    ax.errorbar(a['NPM steps'].astype(float), a[col].astype(float), yerr=[sef(r) for _, r in a.iterrows()], marker='o', capsize=3,
                label='A: NPM from MiniLM (one 3k-step schedule)')
    for name, mk, x, lab in (('B1000', 's', 1000, 'B: 1k MLM + 1k NPM steps'), ('cpu profile (B recipe, re-trained)', 'D', 1060, 'cpu profile (B recipe)'),
                             ('C2000', '^', 2060, 'C: NPM from MiniLM, a 2k-step schedule'),
                             ('Bconst', 'v', 940, 'Bconst: B with a constant rate after warm-up')):
        if name in df.index and col in df and pd.notna(df.loc[name, col]):
            r = df.loc[name]; ax.errorbar([x], [float(r[col])], yerr=[sef(r)], marker=mk, ls='', capsize=3, label=lab)
    ax.axhline(target, ls='--', c='tab:red', lw=1, label='issue #8 target')
    ax.axhline(0, c='gray', lw=0.5)
    if col == 'temporal changed gain' and 'temporal: leaders read (own year)' in A:
        b = A[A['temporal: leaders read (own year)'].notna()]
        ax.plot(b['NPM steps'].astype(float), b['temporal: leaders read (own year)'].astype(float), ls=':', marker='.', c='tab:purple',
                label="A: leaders' names read from their own year's corpus (the most a swap can move)")
    if col == 'closed-set − majority':   # the untrained init abstains (no label word among its neighbours): far below
        y0 = float(A.loc[A['NPM steps'] == 0, col].iloc[0]); ax.set_ylim(-8, 8)
        ax.annotate(f'0 steps: {y0:.1f}\n(the init abstains)', (0, -8), xytext=(250, -6.5), fontsize=7, arrowprops={'arrowstyle': '->'})
    if col == 'lama_geo EM': ax.axhline(2 * 6.2, ls=':', c='tab:gray', lw=1, label='2 × MLM given the gold length')
    ax.set_title(title, fontsize=9); ax.set_xlabel('NPM training steps (8 × 128 tokens)')
    ax.set_xticks([0, 300, 1000, 2000, 3000])
axes[0].set_ylabel('points (± 1 SE)')
hl = {l: h for a in axes for h, l in zip(*a.get_legend_handles_labels())}
fig.legend(list(hl.values()), list(hl.keys()), loc='lower center', ncol=3, fontsize=8, bbox_to_anchor=(0.5, -0.1))
fig.suptitle('Issue #8 targets vs NPM training at CPU scale (cpu-profile evaluation, 2 cores)', fontsize=10)
fig.tight_layout(rect=(0, 0.08, 1, 1))
fig.savefig(HERE/'targets_vs_steps.png', dpi=110, bbox_inches='tight')
