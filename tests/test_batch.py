"The batch runner (npm_nb.run.batch) on tiny demo experiments in a temp folder, plus the real smoke profile end to end."
import json, os
from pathlib import Path
import pytest, yaml
from npm_nb.run.batch import (BatchError, main, run_batch, load_profile, apply_overrides, plan, list_profiles,
                          make_demo_notebook, write_results_readme)
from npm_nb.core import project_root

ROOT = project_root()
P = "profile: str = 'smoke'  # profile\n"

@pytest.fixture
def ws(tmp_path, monkeypatch):
    "A workspace: demo experiments, a params folder with base + `tiny`, and temp results and data folders."
    monkeypatch.setenv('NPM_NB_RESULTS', str(tmp_path/'results'))
    monkeypatch.setenv('NPM_NB_DATA', str(tmp_path/'data'))   # its locks and step caches: not the smoke batch's
    ex, pa = tmp_path/'experiments', tmp_path/'params'
    make_demo_notebook(ex/'01_a.ipynb', P + "n: int = 5  # steps\nlr: float = 0.1  # rate\n",
                       "import pandas as pd\nfrom npm_nb.run.batch import write_table\n"
                       "write_table('01_a', pd.DataFrame({'acc': [n * lr]}, index=pd.Index(['NPM'], name='model')),"
                       " title='Demo table', profile=profile, paper_ref='Table 1', scale={'training steps': n}, reading='Holds.')")
    make_demo_notebook(ex/'02_b.ipynb', P + "device: str = 'auto'  # device\n", "assert device == 'cpu', device")
    make_demo_notebook(ex/'03_fails.ipynb', P + "k: int = 1  # k\n", "raise ValueError(f'broken k={k}')")
    make_demo_notebook(ex/'04_after_fail.ipynb', P)
    pa.mkdir()
    (pa/'base.yaml').write_text(yaml.safe_dump({'params': {'device': 'auto'}, 'notebooks': {
        '01_a': {}, '02_b': {'after': ['01_a']}, '03_fails': {}, '04_after_fail': {'after': ['03_fails']}}}, sort_keys=False))
    (pa/'tiny.yaml').write_text('params:\n  device: cpu\nnotebooks:\n  01_a:\n    params: {n: 2, lr: 5e-1}\n')
    kw = dict(params_folder=pa, experiments_folder=ex, echo=lambda *a: None)
    return dict(ex=ex, pa=pa, res=tmp_path/'results', kw=kw,
                cli=['--params-dir', str(pa), '--experiments-dir', str(ex)])

def states(st): return {n: s['state'] for n, s in st['steps'].items()}

def test_run_folder_failure_and_resume(ws):
    st = run_batch('tiny', **ws['kw'])
    assert states(st) == {'01_a': 'done', '02_b': 'done', '03_fails': 'failed', '04_after_fail': 'skipped'}
    run = Path(st['run_dir'])
    assert run.parent == ws['res']/'runs'/'tiny'
    assert {p.name for p in run.iterdir() if p.is_file()} == {'01_a.ipynb', '02_b.ipynb', '03_fails.ipynb', 'config.yaml',
                                                             'env.json', 'status.json', '.started-here', 'README.md'}
    cfg = yaml.safe_load((run/'config.yaml').read_text())
    assert cfg['steps']['01_a']['params'] == {'profile': 'tiny', 'n': 2, 'lr': 0.5}
    assert cfg['steps']['02_b']['params'] == {'profile': 'tiny', 'device': 'cpu'}
    env = json.loads((run/'env.json').read_text())
    assert {'git_commit', 'git_dirty', 'python', 'packages', 'device'} <= set(env) and 'papermill' in env['packages']
    status = json.loads((run/'status.json').read_text())
    assert 'ValueError: broken k=1' in status['steps']['03_fails']['error']
    assert '03_fails' in status['steps']['04_after_fail']['error'] and status['finished'] is None
    # the failing step's partial notebook is kept, with the traceback in it
    assert 'broken k=1' in (run/'03_fails.ipynb').read_text()
    # tiny is not the committed profile: the table went into the run folder, stamped with the run, and the run's page
    # lists it; results/tables and results/README.md are not written
    meta = json.loads((run/'tables'/'01_a.meta.json').read_text())
    assert meta['run'] == f'tiny/{run.name}' and meta['step'] == '01_a' and (run/'tables'/'01_a.md').exists()
    assert not (ws['res']/'tables').exists() and not (ws['res']/'README.md').exists()
    page = (run/'README.md').read_text()
    assert '- [Demo table](tables/01_a.md): Holds.' in page and '| NPM | 1 |' not in page  # one line a table on the page
    table = (run/'tables'/'01_a.md').read_text()
    assert '| NPM | 1 |' in table and 'training steps: 2' in table and 'Holds.' in table
    assert f'`{run.name}`' in page and 'Profile**: `tiny`' in page

    # re-run: resumes the same run; done steps are skipped; the failed one is retried (its first attempt archived)
    make_demo_notebook(ws['ex']/'03_fails.ipynb', P + "k: int = 1  # k\n", "print('fixed')")
    st2 = run_batch('tiny', **ws['kw'])
    assert st2['run_dir'] == st['run_dir']
    assert states(st2) == {n: 'done' for n in st['steps']}
    assert st2['steps']['01_a'].get('cached') and st2['steps']['02_b'].get('cached')
    assert not st2['steps']['03_fails'].get('cached') and (run/'attempts'/'03_fails.1.ipynb').exists()
    assert json.loads((run/'status.json').read_text())['finished']

    # --dry-run checks and plans without running
    assert states(run_batch('tiny', **ws['kw'], dry_run=True)) == {n: 'planned' for n in st['steps']}

def test_new_run_and_changed_params(ws):
    (ws['pa']/'one.yaml').write_text('params: {device: cpu}\nnotebooks:\n  03_fails: {enabled: false}\n'
                                     '  04_after_fail: {enabled: false}\n')
    st = run_batch('one', **ws['kw'])
    assert states(st) == {'01_a': 'done', '02_b': 'done'}
    st2 = run_batch('one', **ws['kw'])  # the last run is finished: a new one, the old one untouched
    assert st2['run_dir'] != st['run_dir'] and len(list((ws['res']/'runs'/'one').glob('2*'))) == 2
    # make the latest run unfinished, then change a parameter: the step and its dependent run again
    status_path = Path(st2['run_dir'])/'status.json'
    s = json.loads(status_path.read_text()); s['steps']['02_b']['state'] = 'interrupted'; status_path.write_text(json.dumps(s))
    st3 = run_batch('one', overrides=[('01_a.n', '7')], **ws['kw'])
    assert st3['run_dir'] == st2['run_dir'] and states(st3) == {'01_a': 'done', '02_b': 'done'}
    assert not st3['steps']['01_a'].get('cached') and not st3['steps']['02_b'].get('cached')
    run = Path(st3['run_dir'])
    assert (run/'attempts'/'01_a.1.ipynb').exists() and (run/'attempts'/'config.1.yaml').exists()
    assert yaml.safe_load((run/'config.yaml').read_text())['steps']['01_a']['params']['n'] == 7
    # --new starts a fresh run even when the latest one is unfinished
    s = json.loads(status_path.read_text()); s['steps']['02_b']['state'] = 'failed'; status_path.write_text(json.dumps(s))
    assert main(['one', '--new'] + ws['cli']) == 0
    assert len(list((ws['res']/'runs'/'one').glob('2*'))) == 3
    # an unfinished run that this checkout did not start (committed results in a fresh clone) is never resumed
    st4 = Path(run_batch('one', **ws['kw'])['run_dir'])   # the --new run finished: a 4th run
    s = json.loads((st4/'status.json').read_text()); s['steps']['02_b']['state'] = 'interrupted'; (st4/'status.json').write_text(json.dumps(s))
    (st4/'.started-here').unlink()
    st5 = run_batch('one', **ws['kw'])
    assert Path(st5['run_dir']) != st4 and states(st5) == {'01_a': 'done', '02_b': 'done'}
    assert not st5['steps']['01_a'].get('cached') and (Path(st5['run_dir'])/'.started-here').exists()

def test_failure_exit_code_and_summary(ws, capsys):
    (ws['pa']/'bad.yaml').write_text('params: {device: cpu}\nnotebooks:\n  01_a: {enabled: false}\n  02_b: {enabled: false}\n')
    assert main(['bad'] + ws['cli']) == 1
    out = capsys.readouterr().out
    assert '03_fails' in out and 'failed' in out and 'skipped: 03_fails did not finish' in out

def test_wrong_type(ws, capsys):
    assert main(['tiny', '--dry-run', '-p', '01_a.n', 'five'] + ws['cli']) == 2
    err = capsys.readouterr().err
    assert "'n' expects int" in err and "got str 'five'" in err and '-p 01_a.n' in err
    (ws['pa']/'typo.yaml').write_text('notebooks:\n  01_a: {params: {lr: fast}}\n')
    with pytest.raises(BatchError, match="'lr' expects float"): run_batch('typo', **ws['kw'])
    assert not (ws['res']/'runs'/'typo').exists(), 'nothing runs when a parameter is wrong'

def test_undeclared_parameter(ws, capsys):
    assert main(['tiny', '--dry-run', '-p', '01_a.lrr', '3'] + ws['cli']) == 2
    err = capsys.readouterr().err
    assert "'lrr' is not declared" in err and "did you mean 'lr'" in err and 'parameters cell of 01_a.ipynb' in err
    assert main(['tiny', '--dry-run', '-p', 'batch_size', '3'] + ws['cli']) == 2
    assert "no notebook of this profile declares 'batch_size'" in capsys.readouterr().err

def test_unknown_profile_and_notebook(ws, capsys):
    assert main(['tinny'] + ws['cli']) == 2
    assert "Unknown profile 'tinny'" in (err := capsys.readouterr().err) and "did you mean 'tiny'" in err
    (ws['pa']/'ghost.yaml').write_text('notebooks:\n  05_ghost: {}\n')
    assert main(['ghost'] + ws['cli']) == 2
    assert "Unknown notebook '05_ghost'" in capsys.readouterr().err
    assert main(['tiny', '-p', '09_x.n', '1'] + ws['cli']) == 2
    assert "has no notebook '09_x'" in capsys.readouterr().err

def test_results_readme_is_deterministic(ws):
    from npm_nb.run.batch import write_table, beside_paper
    import pandas as pd
    ours = pd.DataFrame({'acc': [0.5]}, index=pd.Index(['NPM'], name='model'))
    write_table('05_demo', beside_paper(ours, {'NPM': {'acc': 87.2}}), title='T', profile='tiny', reading='R.')
    a = write_results_readme().read_text(); b = write_results_readme().read_text()
    t = (ws['res']/'tables'/'05_demo.md').read_text()
    assert a == b and '- [T](tables/05_demo.md): R.' in a and '| model | acc | acc (paper) |' in t and '| NPM | 0.5 | 87.2 |' in t

def test_project_profiles_are_valid():
    "Every profile in params/ loads and checks against the experiment notebooks that exist (no execution)."
    profiles = list_profiles(ROOT/'params')
    assert {'smoke', 'cpu', 'gpu'} <= set(profiles)
    import torch
    for p in profiles:  # a CUDA profile is checked as if on a GPU machine: its device rule needs one visible
        cfg = load_profile(p, ROOT/'params')
        if str(cfg['params'].get('device', '')).startswith('cuda') and not torch.cuda.is_available():
            cfg['params']['device'] = 'auto'
        plan(apply_overrides(cfg), ROOT/'nbs'/'experiments')
    assert load_profile('gpu', ROOT/'params')['params']['device'] == 'cuda'  # never silently on the CPU (audit D4)

@pytest.mark.skipif(not (ROOT/'data'/'processed').exists(), reason='data/processed missing: run `make data` first')
def test_smoke_batch(tmp_path, monkeypatch):
    "The real smoke profile end to end (about 5 minutes), into a temp results folder."
    if not plan(apply_overrides(load_profile('smoke', ROOT/'params')), ROOT/'nbs'/'experiments'):
        pytest.skip('params/smoke.yaml lists no experiments yet')
    monkeypatch.setenv('NPM_NB_RESULTS', str(tmp_path/'results'))
    st = run_batch('smoke', params_folder=ROOT/'params')
    bad = {n: s.get('error') for n, s in st['steps'].items() if s['state'] != 'done'}
    assert not bad, f'smoke steps did not finish: {bad}'
    run = Path(st['run_dir'])   # smoke is not the committed profile: its page and tables stay in its run folder
    assert (run/'README.md').exists() and (run/'tables'/'05_open_set.md').exists()
    assert not (tmp_path/'results'/'README.md').exists() and not (tmp_path/'results'/'tables').exists()
    # the executed notebooks keep their bars' text, not their widget state (a committed run folder travels with the tree)
    nbs = [json.loads(p.read_text()) for p in run.glob('*.ipynb')]
    assert nbs and not [n for n in nbs if 'widgets' in n['metadata']]
    assert not [o for n in nbs for c in n['cells'] for o in c.get('outputs', []) if 'application/vnd.jupyter.widget-view+json' in o.get('data', {})]

def test_profile_extends(ws):
    "`extends: tiny` reads base, then tiny, then the child; a cycle is an error that names it."
    (ws['pa']/'child.yaml').write_text("extends: tiny\nnotebooks:\n  01_a:\n    params: {lr: 0.25}\n  03_fails: {enabled: false}\n")
    cfg = load_profile('child', ws['pa'])
    assert cfg['profile'] == 'child' and cfg['params'] == {'device': 'cpu'}                # tiny's device, not base's
    assert cfg['notebooks']['01_a']['params'] == {'n': 2, 'lr': 0.25}                      # tiny's n, the child's lr
    assert cfg['notebooks']['03_fails']['enabled'] is False and cfg['notebooks']['02_b']['after'] == ['01_a']
    (ws['pa']/'loop.yaml').write_text("extends: loop2\n"); (ws['pa']/'loop2.yaml').write_text("extends: loop\n")
    with pytest.raises(BatchError, match='cycle'): load_profile('loop', ws['pa'])
    # the real cpu-long profile is cpu plus its own steps
    long, cpu = load_profile('cpu-long', ROOT/'params'), load_profile('cpu', ROOT/'params')
    assert long['notebooks']['05_open_set'] == cpu['notebooks']['05_open_set'] and long['notebooks']['09_recipe']['enabled']
    # cpu trains the dev sweep's recipe (C2k: NPM 2,000 steps from MiniLM) after the MLM baseline (1,000 steps, 100 warm-up);
    # cpu-2k is cpu at the paper's open-set scoring, cpu-b1k the previous recipe (NPM 1,000 steps from the MLM)
    t = cpu['notebooks']['01_train']['params']
    assert t['npm_init'] == 'model' and t['steps'] == 2000 and t['mlm_steps'] == 1000 and t['mlm_warmup'] == 100
    c2k, b1k = load_profile('cpu-2k', ROOT/'params'), load_profile('cpu-b1k', ROOT/'params')
    assert cpu['params']['open_temperature'] == 0.5 and c2k['params']['open_temperature'] == b1k['params']['open_temperature'] == 1
    assert c2k['notebooks'] == cpu['notebooks'] and {k: v for k, v in b1k['notebooks'].items() if k != '01_train'} == {k: v for k, v in cpu['notebooks'].items() if k != '01_train'}
    tb = b1k['notebooks']['01_train']['params']
    assert tb == {**t, 'steps': 1000, 'npm_init': 'mlm', 'mlm_warmup': 0} and tb['warmup'] * tb['mlm_steps'] / tb['steps'] == 100
    # ... and the recipe profile is cpu-long's 09_recipe alone, without the sweep and with a shorter run B
    rec = load_profile('recipe', ROOT/'params')
    assert [n for n, v in rec['notebooks'].items() if v.get('enabled', True)] == ['09_recipe']
    r, l = rec['notebooks']['09_recipe']['params'], long['notebooks']['09_recipe']['params']
    assert r == {**l, 'sweep_steps': 0, 'b_steps': 1000} and l['sweep_steps'] > 0

def test_shared_override_wins_over_notebook_params(ws):
    "`-p lr 0.3` (no notebook named) beats a notebook's own profile value, as `-p 01_a.lr 0.3` does; other notebooks keep theirs."
    cfg = load_profile('tiny', ws['pa'])
    assert cfg['notebooks']['01_a']['params']['lr'] == 0.5
    for name in ('lr', '01_a.lr'):
        steps = {s['name']: s['params'] for s in plan(apply_overrides(cfg, [(name, '0.3')]), ws['ex'])}
        assert steps['01_a']['lr'] == 0.3 and steps['01_a']['n'] == 2
    assert cfg['notebooks']['01_a']['params']['lr'] == 0.5  # the loaded profile is not changed


def test_only_the_committed_profile_writes_results(ws):
    "#28: a run of any profile but the committed one (cpu) leaves results/tables, figures and README.md alone."
    one = 'params: {device: cpu}\nnotebooks:\n  02_b: {enabled: false}\n  03_fails: {enabled: false}\n  04_after_fail: {enabled: false}\n'
    (ws['pa']/'cpu.yaml').write_text(one); (ws['pa']/'smoke.yaml').write_text(one)
    st = run_batch('smoke', **ws['kw'])
    assert not (ws['res']/'tables').exists() and not (ws['res']/'README.md').exists()
    assert (Path(st['run_dir'])/'tables'/'01_a.md').exists() and (Path(st['run_dir'])/'README.md').exists()
    st = run_batch('cpu', **ws['kw'])   # the committed profile writes results/, and its page links the other profile's
    assert st['published'] and (ws['res']/'tables'/'01_a.md').exists() and (Path(st['run_dir'])/'tables'/'01_a.md').exists()
    page = (ws['res']/'README.md').read_text()
    assert 'Profile**: `cpu`' in page and '## Other profiles' in page and 'runs/smoke/' in page
    before = {f: f.read_bytes() for f in (ws['res']/'tables').iterdir()}
    run_batch('smoke', overrides=[('01_a.n', '9')], new=True, **ws['kw'])   # a later smoke run changes nothing there
    assert {f: f.read_bytes() for f in (ws['res']/'tables').iterdir()} == before and 'Profile**: `cpu`' in (ws['res']/'README.md').read_text()
    run_batch('smoke', new=True, publish=True, **ws['kw'])   # --publish: on purpose
    assert json.loads((ws['res']/'tables'/'01_a.meta.json').read_text())['profile'] == 'smoke'

def test_log_output_streams_the_notebook(ws, capfd):
    "#28: --log-output shows what the notebook prints while it runs."
    make_demo_notebook(ws['ex']/'02_b.ipynb', P + "device: str = 'auto'  # device", "print('streamed-line-42')")
    (ws['pa']/'one.yaml').write_text('params: {device: cpu}\nnotebooks:\n  01_a: {enabled: false}\n  03_fails: {enabled: false}\n'
                                     '  04_after_fail: {enabled: false}\n  02_b: {after: []}\n')
    assert main(['one', '--log-output'] + ws['cli']) == 0
    assert 'streamed-line-42' in capfd.readouterr().out
    assert main(['one', '--new'] + ws['cli']) == 0
    assert 'streamed-line-42' not in capfd.readouterr().out

def test_budget_stop_anywhere_is_clean(ws, capsys, monkeypatch):
    "#28: a time budget that rings before the notebook runs (kernel start, imports) is a clean budget stop: exit 3, no traceback."
    import time
    from npm_nb.run import batch
    monkeypatch.setattr(batch, 'MIN_STEP_S', 0.0)
    real = batch._archive
    def slow_archive(p): time.sleep(3); real(p)   # the step's preamble outlasts the 1 s budget
    monkeypatch.setattr(batch, '_archive', slow_archive)
    (ws['pa']/'one.yaml').write_text('params: {device: cpu}\nnotebooks:\n  02_b: {enabled: false}\n  03_fails: {enabled: false}\n'
                                     '  04_after_fail: {enabled: false}\n')
    assert main(['one', '--time-budget', '1'] + ws['cli']) == 3
    out, err = capsys.readouterr()
    assert 'Traceback' not in out + err and 'time budget reached' in err and 'interrupted:' not in err
    st = json.loads(next((ws['res']/'runs'/'one').glob('*/status.json')).read_text())
    assert st['steps']['01_a']['state'] == 'interrupted' and st['steps']['01_a']['budget_cut']
    monkeypatch.setattr(batch, '_archive', real)
    assert main(['one'] + ws['cli']) == 0   # the same command continues and finishes

def test_step_cache_makes_progress_across_cut_calls(ws, monkeypatch):
    "A step longer than one call keeps its finished parts (StepCache): each call adds parts, none is computed twice."
    from npm_nb.run import batch
    monkeypatch.setattr(batch, 'MIN_STEP_S', 0.0); monkeypatch.setattr(batch, 'TRAIN_MARGIN_S', 0.0)
    monkeypatch.setenv('NPM_NB_DATA', str(ws['res'].parent/'data'))
    log = ws['res'].parent/'computed.txt'
    make_demo_notebook(ws['ex']/'05_long.ipynb', P + "parts: int = 5  # parts\n",
                       "import time, os\nfrom npm_nb.run.batch import StepCache\ncache = StepCache()\n"
                       f"def part(i):\n    time.sleep(1.5)\n    open({str(log)!r}, 'a').write(f'{{i}}\\n')\n    return {{'i': i, 'sq': i * i}}\n"
                       "res = [cache(('part', i), lambda i=i: part(i)) for i in range(parts)]\n"
                       "assert [r['sq'] for r in res] == [i * i for i in range(parts)]\nprint(cache)")
    (ws['pa']/'long.yaml').write_text('params: {device: cpu}\nnotebooks:\n  01_a: {enabled: false}\n  02_b: {enabled: false}\n'
                                      '  03_fails: {enabled: false}\n  04_after_fail: {enabled: false}\n  05_long: {}\n')
    calls, st = 0, None
    while calls < 10:
        calls += 1
        st = run_batch('long', time_budget=6.5, **ws['kw'])
        if st['steps']['05_long']['state'] == 'done': break
        assert st['steps']['05_long']['budget_cut']
    done = log.read_text().split()
    assert st['steps']['05_long']['state'] == 'done' and calls >= 2, (calls, done)
    assert sorted(done) == [str(i) for i in range(5)], f'a part was computed twice or lost: {done}'
    run = Path(st['run_dir'])
    assert (ws['res'].parent/'data'/'cache'/'steps'/'long').is_dir()
    assert not (ws['res'].parent/'data'/'cache'/'steps'/'long'/run.name).exists()  # removed when the run finished


def test_committed_results_page_is_short_and_says_each_thing_once():
    "results/README.md: under PAGE_LIMIT, one line a table (no table body, no reading printed twice)."
    from npm_nb.run.batch import PAGE_LIMIT
    page = (ROOT/'results'/'README.md').read_text()
    assert len(page.encode()) <= PAGE_LIMIT, f'results/README.md is {len(page.encode()):,} bytes (limit {PAGE_LIMIT:,})'
    assert '|---' not in page  # tables live on their own pages
    lines = [l for l in page.splitlines() if l.startswith('- [')]
    assert len(lines) == len(set(lines)) and not any(page.count(l) > 1 for l in lines)
    for l in lines:  # every link resolves
        target = l.split('](', 1)[1].split(')', 1)[0]
        assert (ROOT/'results'/target).exists(), target
