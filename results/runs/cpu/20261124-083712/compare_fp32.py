"""This run (bf16-encoded datastores, `encode_amp: bf16`) against the previous fresh-clone `cpu` run (fp32 stores,
`../20261123-201109/`), table by table.

Run from the repository root: python results/runs/cpu/20261124-083712/compare_fp32.py
Writes vs_fp32.md beside this script: every table of the two runs marked identical, differing only in timing columns,
or changed; a changed table lists its differing cells (at most 12 a table)."""
from pathlib import Path
import pandas as pd

HERE = Path(__file__).resolve().parent
NEW, OLD = HERE/'tables', HERE.parent/'20261123-201109'/'tables'
TIMING = ('slowdown', 'second', 'seconds', '_s', ' s', 'qps', 'q/s', 'time', 'wall', 'cpu_s', 'tokens_per_s', 'tok/s', 'speed', 'ms', 'min')

def t(run, name):
    d = pd.read_csv(run/f'{name}.csv')
    return d.drop(columns=[c for c in d.columns if c.startswith('Unnamed')])
def timing(col: str) -> bool:
    c = col.lower()
    return any(c.endswith(x) or x in c for x in TIMING)

same, timing_only, changed, only = [], [], {}, []
for f in sorted(NEW.glob('*.csv')):
    g = OLD/f.name
    if not g.exists(): only.append(f.stem); continue
    a, b = t(NEW, f.stem), t(OLD, f.stem)
    if a.equals(b): same.append(f.stem); continue
    if list(a.columns) != list(b.columns) or len(a) != len(b): changed[f.stem] = ['columns or rows differ']; continue
    cells = []
    for col in a.columns:
        for i in range(len(a)):
            x, y = a[col].iat[i], b[col].iat[i]
            if not (x == y or (pd.isna(x) and pd.isna(y))): cells.append((col, i, a.iloc[i, 0], y, x))
    if f.stem.endswith('_speed') or all(timing(c) for c, *_ in cells): timing_only.append(f.stem)  # *_speed: timings only
    else:
        changed[f.stem] = [f'row {i} ({r}), `{c}`: {y} → {x}' for c, i, r, y, x in cells if not timing(c)]
out = ['# This run (bf16-encoded datastores) against the fp32 run `../20261123-201109/`, table by table', '',
       'Same code otherwise but for the commits between the two runs (see git log); `→` reads fp32 → bf16.', '',
       f'Identical ({len(same)}): ' + ', '.join(f'`{s}`' for s in same) + '.', '',
       f'Differing only in timing columns ({len(timing_only)}): ' + ', '.join(f'`{s}`' for s in timing_only) + '.', '',
       f'Only in this run ({len(only)}): ' + ', '.join(f'`{s}`' for s in only) + '.', '',
       f'Changed ({len(changed)}):', '']
for k, v in changed.items():
    out += [f'- `{k}` ({len(v)} cells):'] + [f'  - {x}' for x in v[:12]] + (['  - …'] if len(v) > 12 else [])
(HERE/'vs_fp32.md').write_text('\n'.join(out) + '\n')
print('\n'.join(out))
