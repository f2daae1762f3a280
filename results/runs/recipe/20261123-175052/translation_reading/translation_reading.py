"""Why entity translation is at 0 EM: does NPM read *which* language the query asks for, and does that improve with training?

Run from the repository root after `make reproduce PROFILE=recipe` (its run A checkpoints at 300 / 1k / 2k / 3k steps
from MiniLM) and `make reproduce` (the cpu profile's MLM and NPM, run B: 1,000 MLM steps then 1,000 NPM steps):

    python results/runs/recipe/20261123-175052/translation_reading/translation_reading.py

Writes translation_reading.csv and .json beside this file. For each checkpoint, on 40 seeded examples a language
(600 in all) of the translation task, over the whole CLDR-rendered corpus (626 documents, one per place):
  * `npm_nb.evaluation.translation_name_choice`: NPM's span score of every name in the subject's own document
    ("Andorra (Arabic: ...; Greek: ...; ...)"); how often the asked language's name scores highest, against chance
    (1 / names in the document). Retrieval and occurrence-summing are taken out: the reading alone.
  * 07_translation's pipeline (BM25 top-3 blocks, l_max 20, k 1024): macro EM, recall, and how many predictions are
    a language name ("Chinese", "Turkish", ...) rather than a place name.
"""
import json, sys, time
from pathlib import Path
import numpy as np, pandas as pd, datasets, transformers
from npm_nb.inference import NPM
from npm_nb.reference import reference_datastore, reference_bm25
from npm_nb.tasks import load_task
from npm_nb.evaluation import eval_open_set, translation_name_choice
from npm_nb.search import set_threads

set_threads(0); transformers.logging.set_verbosity_error(); datasets.disable_progress_bars()
HERE = Path(__file__).parent
A = 'data/cache/recipe/recipe/curve_minilm'
CHECKPOINTS = [('MiniLM init', 0, 'minilm'), ('A (NPM from MiniLM)', 300, f'{A}/checkpoint-300'),
               ('A (NPM from MiniLM)', 1000, f'{A}/checkpoint-1000'), ('A (NPM from MiniLM)', 2000, f'{A}/checkpoint-2000'),
               ('A (NPM from MiniLM)', 3000, f'{A}/checkpoint-3000'),
               ('MLM-continued MiniLM (B init), NPM scoring', 1000, 'data/cache/checkpoints/cpu/mlm/final'),
               ('B (cpu profile: NPM from the MLM)', 2000, 'data/cache/checkpoints/cpu/npm/final')]
LANGUAGES = {'Arabic', 'Czech', 'Greek', 'Hindi', 'Hebrew', 'Japanese', 'Korean', 'Malayalam', 'Mongolian', 'Polish',
             'Russian', 'Tamil', 'Thai', 'Turkish', 'Chinese'}
PLOT_ONLY = '--plot-only' in sys.argv  # redraw the figure from translation_reading.csv
task = load_task('translation').to_pandas()
sample = pd.concat([g.sample(min(len(g), 40), random_state=0) for _, g in task.groupby('lang', sort=False)]).reset_index(drop=True)
rows = []
for model, steps, path in ([] if PLOT_ONLY else CHECKPOINTS):
    t0 = time.time()
    m = NPM.from_pretrained(path, device='cpu')
    ds = reference_datastore(m, 'reading', ['translation'], 'diag', remove_stopwords=True, max_len=256, progress=False)
    _, choice = translation_name_choice(m, ds, rows=sample)
    tab, s = eval_open_set(m, 'translation', ds, mode='bm25', bm25=reference_bm25(ds), k=1024, restrict_k=3, l_max=20,
                           rows=sample, by='lang')
    rows.append(dict(model=model, total_steps=steps, checkpoint=path, n=choice['n'],
                     pick_asked_name=choice['pick_rate'], pick_se=choice['pick_rate_se'], chance=choice['chance'],
                     mean_rank=choice['mean_rank'], chance_rank=choice['chance_rank'],
                     most_picked_language=choice['most_picked'], most_picked_share=choice['most_picked_share'],
                     macro_em=round(s['macro_em'], 1), recall=round(s['recall'], 1),
                     predictions_that_are_a_language_name=round(100 * np.mean([p.strip() in LANGUAGES for p in tab.pred]), 1),
                     seconds=round(time.time() - t0)))
    print(rows[-1], flush=True)
if not PLOT_ONLY:
    df = pd.DataFrame(rows)
    df.to_csv(HERE/'translation_reading.csv', index=False)
    (HERE/'translation_reading.json').write_text(json.dumps(rows, indent=1) + '\n')
df = pd.read_csv(HERE/'translation_reading.csv')
import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(6.4, 3.6))
a = df[df.model.str.startswith(('MiniLM init', 'A '))]
ax.errorbar(a.total_steps, a.pick_asked_name, yerr=a.pick_se, marker='o', capsize=3, label='NPM from MiniLM (run A)')
for name, mk in (('B (cpu', 's'), ('MLM-continued', '^')):
    b = df[df.model.str.startswith(name)]
    ax.errorbar(b.total_steps, b.pick_asked_name, yerr=b.pick_se, marker=mk, ls='none', capsize=3, label=b.model.iloc[0])
ax.axhline(df.chance.iloc[0], color='grey', ls='--', lw=1, label=f'chance ({df.chance.iloc[0]:.1f}%)')
ax.set(xlabel='training steps (MLM + NPM), 8 x 128 tokens each', ylabel="asked language's name first (%)", ylim=(0, 20),
       title="Entity translation: does NPM read which language is asked?")
ax.legend(fontsize=7, loc='upper left'); fig.tight_layout()
tmp = HERE/'.translation_reading.png'; fig.savefig(tmp, dpi=120, format='png'); tmp.replace(HERE/'translation_reading.png')
print(df.drop(columns=["checkpoint"]).to_string(index=False))
