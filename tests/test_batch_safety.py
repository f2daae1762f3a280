"""Hand runs never touch the committed results, and the batch runner's open reliability cases stay fixed.

Replays of shared cases: NEWCOMER-3.md's first two problems (a notebook run by hand rewrote `results/`; an experiment
did not say what it needs first) and RELIABILITY-4.md's batch cases (the case id is in the comment above each test).
Tiny inputs only: demo notebooks, a few JSON files, the tiny encoder; nothing needs `data/processed` or a GPU.
"""
import errno, json, math, os, shutil, warnings
from pathlib import Path
import pytest
from npm_nb.core import project_root, results_dir, committed_results_dir, data_dir, atomic_write_json
from npm_nb.run import batch
from npm_nb.run.batch import (main as batch_main, make_demo_notebook, write_table, save_figure, write_results_readme,
                              run_batch, BatchError, require_trained, require_data, MissingPrerequisite)

ROOT = project_root()
EXPERIMENTS = ROOT/'nbs'/'experiments'


@pytest.fixture
def ws(tmp_path, monkeypatch):
    "A scratch data and results folder, a demo notebook that writes a table, and a profile that runs it."
    monkeypatch.setenv('NPM_NB_RESULTS', str(tmp_path/'results')); monkeypatch.setenv('NPM_NB_DATA', str(tmp_path/'data'))
    ex, pa = tmp_path/'ex', tmp_path/'params'; pa.mkdir()
    make_demo_notebook(ex/'01_a.ipynb', "profile: str = 'smoke'  # profile\nsteps: int = 5  # steps [>= 1]\n"
                       "name: str = 'x'  # a free name\nrate: float = 0.5  # a rate [> 0, <= 10]\n"
                       "kinds: str = 'a'  # kinds [one of: a, b]\n",
                       "import pandas as pd\nfrom npm_nb.run.batch import write_table\n"
                       "write_table('01_a', pd.DataFrame({'acc': [steps]}), title='Demo', profile=profile)")
    (pa/'base.yaml').write_text('notebooks:\n  01_a: {}\n'); (pa/'tiny.yaml').write_text('params: {}\n')
    return dict(ex=ex, pa=pa, res=tmp_path/'results', data=tmp_path/'data', tmp=tmp_path,
                cli=['--params-dir', str(pa), '--experiments-dir', str(ex)], kw=dict(params_folder=pa, experiments_folder=ex))

def tracked_results() -> dict:
    "Every file of the tracked results/ tables and figures, with its size and mtime."
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for k in ('tables', 'figures', 'benchmarks')
            for p in (ROOT/'results'/k).glob('*') if p.is_file()}


# ---------------------------------------------------------------- hand runs (NEWCOMER-3, problem 1)
# NEWCOMER-3 #1: write_table / save_figure outside the batch rewrote results/tables and results/figures
def test_write_outside_the_batch_does_not_land_in_the_tracked_results(tmp_path, monkeypatch):
    import pandas as pd, matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt
    monkeypatch.delenv('NPM_NB_RESULTS', raising=False); monkeypatch.setenv('NPM_NB_DATA', str(tmp_path/'data'))
    before = tracked_results()
    t = write_table('train_retrieval', pd.DataFrame({'top1': [0.0]}), title='smoke numbers', profile='smoke')
    fig, ax = plt.subplots(); ax.plot([1, 2]); f = save_figure(fig, 'train_loss', title='smoke loss', profile='smoke'); plt.close(fig)
    assert t == tmp_path/'data'/'scratch'/'results'/'tables'/'train_retrieval.md' and t.exists()
    assert f == tmp_path/'data'/'scratch'/'results'/'figures'/'train_loss.png' and f.exists()
    assert tracked_results() == before   # results/ untouched
    assert committed_results_dir('tables') == ROOT/'results'/'tables'   # readers of the committed tree still find it

def test_scratch_folder_is_said_once_and_git_ignored(tmp_path, monkeypatch, capsys):
    from npm_nb import core
    monkeypatch.delenv('NPM_NB_RESULTS', raising=False); monkeypatch.setattr(core, '_SCRATCH_SAID', [])
    results_dir('tables'); results_dir('figures')
    err = capsys.readouterr().err
    assert err.count('NPM_NB_RESULTS is not set') == 1 and 'not the tracked results/' in err, err
    assert 'data/scratch/' in (ROOT/'.gitignore').read_text().splitlines()

def test_results_variable_still_chooses_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv('NPM_NB_RESULTS', str(tmp_path/'pub'))
    assert results_dir('tables') == committed_results_dir('tables') == tmp_path/'pub'/'tables'

# NEWCOMER-3 #9: the dry run did not say where the run goes, whether it publishes, or how long it takes
def test_dry_run_names_folder_publishing_and_expected_time(ws, capsys):
    assert batch_main(['tiny', '--dry-run'] + ws['cli']) == 0
    out = capsys.readouterr().out
    assert f"Run folder: a new folder {ws['res']/'runs'/'tiny'}/" in out, out
    assert 'Publishes: no' in out and 'Expected time: unknown: no earlier finished run' in out, out
    assert not (ws['res']/'runs').exists()   # a dry run creates nothing
    d = ws['res']/'runs'/'tiny'/'20260101-000000'; d.mkdir(parents=True)
    atomic_write_json(d/'status.json', {'profile': 'tiny', 'run_id': d.name, 'started': '2026-01-01 00:00 UTC',
                                        'finished': '2026-01-01 01:00 UTC', 'steps': {'01_a': {'state': 'done', 'seconds': 150.0}}})
    assert batch_main(['tiny', '--dry-run', '--publish'] + ws['cli']) == 0
    out = capsys.readouterr().out
    assert 'Expected time: about 2.5 min' in out and 'tiny/20260101-000000' in out and 'Publishes: yes' in out, out


# ---------------------------------------------------------------- prerequisites (NEWCOMER-3, problem 2)
# NEWCOMER-3 #2: 11_qualitative failed after 19 s on a fresh clone; its introduction never said it needs 01_train
def test_missing_trained_model_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv('NPM_NB_DATA', str(tmp_path/'data'))
    with pytest.raises(MissingPrerequisite) as e: require_trained('smoke', 'npm,mlm,init')
    msg = str(e.value)
    assert 'python -m npm_nb.run.batch smoke' in msg and 'papermill nbs/experiments/01_train.ipynb' in msg, msg
    with pytest.raises(MissingPrerequisite, match='make data'): require_data()
    assert require_trained('smoke', 'init,bm25') == {}

def test_every_experiment_states_and_checks_what_it_needs():
    for p in sorted(EXPERIMENTS.glob('*.ipynb')):
        cells = json.loads(p.read_text())['cells']
        intro = ''.join(next(c for c in cells if c['cell_type'] == 'markdown')['source'])
        assert '**Needs first**' in intro, f'{p.name}: the introduction does not say what it needs first'
        i = next(i for i, c in enumerate(cells) if 'parameters' in c['metadata'].get('tags', []))
        if 'nothing to train or fetch' in intro: continue
        assert 'require_data()' in ''.join(cells[i + 1]['source']), f'{p.name}: the cell after the parameters checks nothing'


# ---------------------------------------------------------------- the sweep's parameters (RELIABILITY-4 N7, N8, N9)
# N7: `recipes ''` passed the dry run, then the notebook failed with StopIteration
# N8, N9: `steps_scale .inf` / `1e300` and `lr .inf` were planned
@pytest.mark.parametrize('name,value,why', [('recipes', "''", 'it is empty'), ('steps_scale', '.inf', 'finite'),
                                            ('steps_scale', '1e300', 'at most'), ('steps_scale', '50', '<= 10'),
                                            ('lr', '.inf', 'finite'), ('lr', '5', '<= 1')])
def test_sweep_refuses_an_empty_grid_and_unbounded_numbers(name, value, why, capsys):
    assert batch_main(['sweep', '--dry-run', '-p', f'22_recipe_sweep.{name}', value]) == 2
    err = capsys.readouterr().err
    assert f"parameter '{name}'" in err and why in err and 'Traceback' not in err, err

def test_numbers_are_finite_and_bounded_everywhere(ws, capsys):
    for v in ('.nan', '.inf', '1e300', str(10**30)):
        assert batch_main(['tiny', '--dry-run', '-p', '01_a.steps' if v.isdigit() else '01_a.rate', v] + ws['cli']) == 2, v
        assert 'is not allowed' in capsys.readouterr().err
    assert batch_main(['tiny', '--dry-run', '-p', '01_a.rate', '11'] + ws['cli']) == 2
    assert 'it must be > 0 and <= 10' in capsys.readouterr().err
    assert batch_main(['tiny', '--dry-run', '-p', '01_a.kinds', ''] + ws['cli']) == 2
    assert 'it is empty: name at least one of a, b' in capsys.readouterr().err

# N11: a damaged row in rows_dir failed every rerun with a JSONDecodeError / TypeError that named no file
def test_damaged_sweep_row_is_named_and_skipped(tmp_path, capsys):
    cells = json.loads((EXPERIMENTS/'22_recipe_sweep.ipynb').read_text())['cells']
    code = lambda cid: ''.join(next(c for c in cells if c.get('id') == cid)['source'])
    import numpy as np, platform, time
    ns = {'np': np, 'json': json, 'Path': Path, 'platform': platform, 'time': time, 'results_dir': results_dir,
          'PAPER_SCORING': ('sum', 1.0, 0.5)}
    exec(code('22000002'), ns)   # the parameters
    ns.update(rows_dir=str(tmp_path), recompute=False)
    start = next(i for i, c in enumerate(cells) if c.get('id') == '22000010')
    for c in cells[start:]:      # rows_root, read_row, ...: the code cells from `rows_root` on, up to `read_row`
        if c['cell_type'] == 'code': exec(''.join(c['source']), ns)
        if 'read_row' in ns: break
    ns['row_key'] = lambda name, split: {'split': split}
    for bad in ('{', '[1, 2]', '{"no key": 1}'):
        (tmp_path/'C1k.json').write_text(bad)
        assert ns['read_row']('C1k', 'dev') is None
        out = capsys.readouterr().out
        assert str(tmp_path/'C1k.json') in out and 'damaged' in out and 'delete it' in out, out


# ---------------------------------------------------------------- profiles and -p values (N12, N13)
# N12: `{{7*7}}` in a profile: a traceback `TypeError: unhashable type: 'dict'`
def test_mapping_as_key_is_a_clear_error(ws, capsys):
    (ws['pa']/'tpl.yaml').write_text('notebooks:\n  01_a: {params: {name: {{7*7}}}}\n')
    assert batch_main(['tpl', '--dry-run'] + ws['cli']) == 2
    err = capsys.readouterr().err
    assert 'tpl.yaml is not valid YAML' in err and 'quote' in err and 'Traceback' not in err, err
    (ws['pa']/'q.yaml').write_text('notebooks:\n  01_a: {params: {? [a]: b}}\n')
    assert batch_main(['q', '--dry-run'] + ws['cli']) == 2 and 'a key is a list' in capsys.readouterr().err
    assert batch_main(['tiny', '--dry-run', '-p', '01_a.name', '{{7*7}}'] + ws['cli']) == 0   # on -p: the text itself, a str
    assert "'name': '{{7*7}}'" in capsys.readouterr().out

# N13: a 4 MB profile (a 2,000,000-item list) took 396 s and 1.4 GB before its error
def test_huge_profile_or_value_is_refused_by_size_at_once(ws, capsys):
    import time
    (ws['pa']/'big.yaml').write_text('params:\n  name: [' + 'x, ' * 400_000 + 'x]\n')
    t = time.time(); assert batch_main(['big', '--dry-run'] + ws['cli']) == 2; assert time.time() - t < 10
    err = capsys.readouterr().err
    assert 'big.yaml is 1.1 MiB: a profile is at most 256 KiB' in err, err
    assert batch_main(['tiny', '--dry-run', '-p', '01_a.name', 'x' * 300_000] + ws['cli']) == 2
    assert 'a -p value of 300,000 characters' in capsys.readouterr().err


# ---------------------------------------------------------------- --time-budget (N14, N15, N16, N17)
# N14: 0 read as no budget; N15: nan stopped every call at once; N16: inf / 1e300 a traceback; N17: -5 accepted
@pytest.mark.parametrize('budget', ['0', 'nan', 'inf', '1e300', '-5'])
def test_time_budget_must_be_positive_and_finite(ws, capsys, budget):
    assert batch_main(['tiny', '--time-budget', budget] + ws['cli']) == 2
    err = capsys.readouterr().err
    assert '--time-budget' in err and 'a number above 0' in err and 'Traceback' not in err, err
    assert not (ws['res']/'runs').exists()   # refused before a run folder is made


# ---------------------------------------------------------------- run records (N20, N21, N22, N23)
def _run(ws, **kw):
    st = run_batch('tiny', echo=lambda *a: None, **ws['kw'], **kw)
    return st, Path(st['run_dir'])

# N20, N21: attempts/env.x.json or a malformed attempts/env.1.json: a traceback after every step was done, rc 1
# N22: a malformed env.json in an unfinished run: a raw JSONDecodeError before any step, on every retry
def test_damaged_run_records_are_named_and_the_run_finishes(ws, capsys):
    st, d = _run(ws)
    st_ = json.loads((d/'status.json').read_text()); st_['steps']['01_a']['state'] = 'failed'; st_['finished'] = None
    atomic_write_json(d/'status.json', st_)   # unfinished: the next call resumes it
    (d/'env.json').write_text('{"git_commit": ')
    (d/'attempts').mkdir(exist_ok=True); (d/'attempts'/'env.x.json').write_text('{}'); (d/'attempts'/'env.1.json').write_text('{oops')
    assert batch_main(['tiny'] + ws['cli']) == 0   # a finished run: rc 0
    out, err = capsys.readouterr()
    assert 'env.json was damaged' in out and (d/'attempts'/'env.json.damaged').exists(), out
    assert 'attempts/env.x.json is not a record the runner writes' in err and 'attempts/env.1.json is damaged' in err, err
    page = (d/'README.md').read_text()
    assert '**Run records skipped**' in page and '**Device**' in page and 'Traceback' not in err

# N23: `device` a string in env.json / attempts/env.1.json, env.json a list: AttributeError in write_results_readme
def test_odd_run_records_still_give_a_results_page(ws, capsys):
    st, d = _run(ws)
    (d/'attempts').mkdir(exist_ok=True); (d/'attempts'/'env.1.json').write_text('{"device": "H200"}')
    page = write_results_readme(run_dir=d, root=d).read_text()
    assert "attempts/env.1.json: its device is a str" in page and '- **Device**: CPU' in page, page
    (d/'env.json').write_text('[1, 2]')
    page = write_results_readme(run_dir=d, root=d).read_text()
    assert 'env.json is damaged (a list, not a mapping)' in page and "- **Commit**: `unknown`" in page, page


# ---------------------------------------------------------------- full disks and read-only runs (N54, A19)
# N54: a full results folder said 'set NPM_NB_DATA to a larger disk'
def test_full_results_disk_names_the_results_variable(tmp_path, monkeypatch):
    from npm_nb.core import _no_room
    monkeypatch.setenv('NPM_NB_RESULTS', str(tmp_path/'res')); monkeypatch.setenv('NPM_NB_DATA', str(tmp_path/'data'))
    msg = str(_no_room(tmp_path/'res'/'runs'/'x'/'status.json', errno.ENOSPC))
    assert 'set NPM_NB_RESULTS to a larger disk' in msg, msg
    assert 'set NPM_NB_DATA to a larger disk' in str(_no_room(tmp_path/'data'/'cache'/'f.bin', errno.ENOSPC))

# A19: train() on a finished run in a read-only folder: `OSError: [Errno 30] Read-only file system: '…/.lock'`
def test_finished_run_in_a_read_only_folder_is_read_not_written(tmp_path, monkeypatch):
    import torch
    from npm_nb.models import load_tokenizer, tiny_encoder
    from npm_nb.data.blocks import build_blocks
    from npm_nb.npm.training import TrainConfig, train
    torch.set_num_threads(2)
    tok = load_tokenizer('minilm')
    docs = ["Athens is the capital of Greece. The port of Piraeus serves Athens and the islands.",
            "Seoul is the capital of South Korea. The Han River flows through Seoul and its parks."] * 3
    blocks = build_blocks({'text': docs}, tok, max_len=32, source='toy', progress=False)
    cfg = lambda **kw: TrainConfig(**{**dict(objective='npm', model='tiny', corpora=('toy',), batch_size=2, steps=2, warmup=1,
                                             lr=1e-3, heldout=0.0, log_every=1, save_every=1, out_dir=str(tmp_path/'run')), **kw})
    fin = train(cfg(), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False)
    part = dict(steps=4, out_dir=str(tmp_path/'run'/'part'))   # a run stopped at step 1 of 4
    train(cfg(**part), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False, stop_after=1)
    snap = lambda: sorted((str(p.relative_to(tmp_path)), p.lstat().st_mtime_ns) for p in (tmp_path/'run').rglob('*'))
    before = snap()
    real_access = os.access   # as root a chmod does not stop this process: the folder reads as read-only instead
    monkeypatch.setattr(os, 'access', lambda p, m, **k: False if (m & os.W_OK) and str(p).startswith(str(tmp_path/'run'))
                        else real_access(p, m, **k))
    assert train(cfg(), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False).resolve() == fin.resolve()
    assert snap() == before   # nothing written: no lock, no link, no metrics
    with pytest.raises(OSError, match='is read-only and its run stopped at step 1 of 4, so training would have to write'):
        train(cfg(**part), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False)
    assert snap() == before
