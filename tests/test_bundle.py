"""The offline bundle (npm_nb.run.bundle).

`test_offline_jobs_simulated` (about 4 minutes, always runs): the worked example of docs/gpu.md (an offline node reached
by transfers of 64 MiB that carry the checkout, jobs with a time limit), job by job, one process per job: parts sized
from the working tree (each fits one 64 MiB transfer with it), handed to the installer one job at a time; then
`bundle run` jobs with a time budget that cuts training (it checkpoints and resumes) until training is done, as when
the node's GPU time ends; the pieces each job brings back stay within the limits of the way back;
`bundle collect --finish-here` here joins them into the run folder and restores the checkpoint, and the batch finishes
the steps the GPU did not reach on this CPU (the GPU's steps stay done).

`test_bundle_end_to_end` is slow (10-20 minutes) and runs only with NPM_NB_TEST_BUNDLE=1 (`make bundle-test`): with
PyPI reachable, train a tiny run, build the bundle for this machine's Python with that checkpoint in it; then, as on a
GPU machine without a package index: a fresh venv with only a few of that machine's packages (torch, transformers,
numpy, pandas, seaborn, pyarrow, pytest), the parts handed to the installer one job at a time (`--no-index`), and a
smoke step through the batch runner in that venv: 01_train finds the restored checkpoint and skips training.
"""
import json, os, re, shutil, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
slow = pytest.mark.skipif(not os.environ.get('NPM_NB_TEST_BUNDLE'),
                          reason='slow (about 10-20 minutes): set NPM_NB_TEST_BUNDLE=1 or run `make bundle-test`')
PY = f'{sys.version_info.major}.{sys.version_info.minor}'
TRAIN = dict(objectives='npm', corpora='brown', steps=2, batch_size=2, max_len=32, max_blocks=16, warmup=1,
             n_eval_batches=1, log_every=1)  # 01_train parameters of the smoke step (and of the checkpoint trained here)


def _run(cmd, env=None, **kw):
    t0 = time.time()
    p = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env, capture_output=True, text=True, **kw)
    print(f'$ {" ".join(map(str, cmd))[:200]}  ({time.time() - t0:.0f} s, exit {p.returncode})\n{p.stdout[-1500:]}{p.stderr[-1500:]}')
    return p


@slow
def test_bundle_end_to_end(tmp_path, monkeypatch):
    import torch
    from npm_nb.core import load_state
    from npm_nb.models import load_tokenizer
    from npm_nb.npm.training import TrainConfig, train, training_blocks, checkpoint_dir
    from npm_nb.run.bundle import export_checkpoint, DEVICE_CORE, call_plan
    times = {}

    # 1. a finished tiny run of profile `bundletest`, trained here as 01_train would build it
    t0 = time.time()
    cfg = TrainConfig(objective='npm', model='minilm', corpora=('brown',), max_len=32, batch_size=2, lr=3e-4, warmup=1,
                      steps=2, profile='bundletest', log_every=1, save_every=100, max_blocks=16, device='cpu')
    tok = load_tokenizer('minilm'); blocks = training_blocks(cfg, tok)
    monkeypatch.setenv('NPM_NB_DATA', str(tmp_path/'here-data'))
    fin = train(cfg, blocks=blocks, tok=tok, progress=False)
    ckpt = export_checkpoint(fin, tmp_path/'ckpt-bundletest-npm.tar.xz')
    monkeypatch.delenv('NPM_NB_DATA')
    times['train and export a tiny checkpoint'] = time.time() - t0

    # 2. the bundle, for this machine's Python (the GPU machine's would be --python 3.12)
    t0 = time.time()
    b = _run([sys.executable, '-m', 'npm_nb.run.bundle', 'build', '--out', tmp_path/'bundle', '--python', PY,
              '--platform', 'manylinux_2_28_x86_64', '--checkpoint-files', ckpt, '--present', ','.join(DEVICE_CORE), '--with', 'lm',
              '--pins', 'device' if PY == '3.12' else 'none'])   # the worked example node's pins need Python 3.12 (numpy 2.5)
    assert b.returncode == 0, b.stderr
    man = json.loads((tmp_path/'bundle'/'manifest.json').read_text())
    assert all(c['fits'] for c in call_plan(tmp_path/'bundle'))
    kinds = {it['kind'] for it in man['items']}
    assert kinds == {'wheel', 'wheel-nodeps', 'data', 'model', 'checkpoint'}, kinds
    names = {it['name'].split('/')[-1].split('-')[0].lower() for it in man['items'] if it['kind'] == 'wheel'}
    assert {'datasets', 'papermill', 'bm25s', 'faiss_cpu', 'nbdev', 'ipykernel'} <= names, names
    assert not {'torch', 'numpy', 'pandas', 'transformers', 'babel'} & names, names  # there already / build-only
    times['build the bundle'] = time.time() - t0
    print('parts:', [(p['name'], round(p['bytes'] / 2**20, 1)) for p in man['parts']])

    # 3. a fresh venv with only what the GPU machine has (from PyPI / the local torch wheel: that machine has them)
    t0 = time.time()
    venv = tmp_path/'venv'
    assert _run([getattr(sys, '_base_executable', sys.executable), '-m', 'venv', venv]).returncode == 0
    py = venv/'bin'/'python'
    tv = torch.__version__
    p = _run([py, '-m', 'pip', 'install', '-q', f'torch=={tv}', *[d for d in DEVICE_CORE if d != 'torch']])
    assert p.returncode == 0, p.stderr
    times['venv with the GPU machine\'s packages'] = time.time() - t0

    # 4. install from the parts, one job per part (as one transfer carries one part), no index
    t0 = time.time()
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
    env.update(NPM_NB_DATA=str(tmp_path/'data'), NPM_NB_RESULTS=str(tmp_path/'results'), PIP_NO_INDEX='1',
               PATH=f"{venv/'bin'}:{env['PATH']}", HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1', HF_DATASETS_OFFLINE='1')
    there = tmp_path/'device'/'bundle'; there.mkdir(parents=True)
    shutil.copy(tmp_path/'bundle'/'manifest.json', there)
    for i, part in enumerate(man['parts']):
        shutil.copy(tmp_path/'bundle'/part['name'], there)
        r = _run([py, '-m', 'npm_nb.run.bundle', 'install', '--bundle', there], env=env)
        assert r.returncode == (0 if i == len(man['parts']) - 1 else 3), r.stderr
    again = _run([py, '-m', 'npm_nb.run.bundle', 'install', '--bundle', there], env=env)  # idempotent
    assert again.returncode == 0 and 'complete' in again.stdout
    times['install from the parts'] = time.time() - t0
    assert (tmp_path/'data'/'processed'/'corpora'/'brown'/'build.json').exists()
    assert (tmp_path/'data'/'cache'/'models'/'all-MiniLM-L6-v2'/'config.json').exists()
    restored = tmp_path/'data'/'cache'/'checkpoints'/'bundletest'/'npm'
    assert (restored/'final'/'trainer_state.pt').exists()

    # 5. smoke step in the venv, through the batch runner with a time budget: training is skipped
    t0 = time.time()
    prof = tmp_path/'params'; prof.mkdir()
    (prof/'bundletest.yaml').write_text(json.dumps({'params': {'device': 'cpu'}, 'notebooks': {'01_train': {'params': TRAIN}}}))
    r = _run([py, '-m', 'npm_nb.run.batch', 'bundletest', '--params-dir', prof, '--time-budget', '900'], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    times['smoke step (01_train, training skipped)'] = time.time() - t0
    assert [p.name for p in restored.glob('checkpoint-*')] == ['checkpoint-2']  # nothing new was trained
    st = load_state(restored/'final'/'trainer_state.pt')
    assert st['restored']['archive'] == ckpt.name and st['step'] == 2
    assert list((tmp_path/'results'/'runs'/'bundletest').glob('*/tables/train_retrieval.md'))   # not the committed profile: its run folder

    # 6. the GPU tests' runner with the bundled nbdev in that venv (a #| gpu chapter; without CUDA its GPU cell says it skips)
    t0 = time.time()
    g = _run([py, '-m', 'npm_nb.run.bundle', 'gputests', '--budget', '300', '--out', tmp_path/'gout', ROOT/'nbs'/'11_search.ipynb'], env=env)
    assert g.returncode == 0 and re.search(r'11_search +ok', g.stdout), g.stdout + (tmp_path/'gout'/'gputests.log').read_text()[-3000:]
    times['gputests (11_search)'] = time.time() - t0
    print('\n'.join(f'{k}: {v:.0f} s' for k, v in times.items()))


SIM = dict(objectives='npm', corpora='brown', steps=1000, batch_size=4, max_len=64, max_blocks=80, warmup=20,
           n_eval_batches=1, log_every=100, save_every=500)   # 01_train: long enough that the first job's budget cuts it
SIM05 = dict(rows='npm,npm_dense,init,bm25', per_bucket=4, compare_random_slice=False)   # 05: about as long as a job's rest


def test_offline_jobs_simulated(tmp_path):
    "#27: the worked example of docs/gpu.md, job by job: parts that fit with the tree, installs, budget-cut runs that resume, collect, finish here."
    from npm_nb.run.bundle import build, call_plan, collect, tree_bytes, CALL_LIMIT_MB, MiB
    from npm_nb.run.batch import list_experiments
    t_all = time.time()
    # 1. here: the bundle (init models only: wheels need PyPI and data is already on this machine), parts sized from the
    # tree; MiniLM as it travels, and a tiny random BERT that the simulated run trains and evaluates (fast enough for a test)
    from npm_nb.models import load_tokenizer, tiny_encoder
    tok = load_tokenizer('minilm'); tiny = tmp_path/'tiny-bert'
    tiny_encoder(tok, hidden=32, layers=2).save_pretrained(tiny); tok.save_pretrained(tiny)
    man = build(tmp_path/'bundle', wheels=False, data=False, models=('minilm', str(tiny)), work=tmp_path/'build')
    plan = call_plan(tmp_path/'bundle')
    assert len(plan) >= 2 and all(c['fits'] for c in plan)
    tree = tree_bytes()
    for p in man['parts']:   # what one install job carries: the working tree, manifest.json and one part
        assert tree + (tmp_path/'bundle'/'manifest.json').stat().st_size + p['bytes'] <= CALL_LIMIT_MB * MiB
    assert man['part_mb'] * MiB + tree <= (CALL_LIMIT_MB - 4) * MiB

    # 2. "there": its own data folder (the processed data linked in, as an installed data item would be) and results
    dev = tmp_path/'device'; (dev/'data').mkdir(parents=True)
    for d in ('processed', 'raw'): (dev/'data'/d).symlink_to(ROOT/'data'/d)
    env = {k: v for k, v in os.environ.items() if k not in ('NPM_NB_DATA', 'NPM_NB_RESULTS')}
    env.update(NPM_NB_DATA=str(dev/'data'), NPM_NB_RESULTS=str(dev/'results'), HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1',
               HF_DATASETS_OFFLINE='1', TOKENIZERS_PARALLELISM='false', PYTHONUNBUFFERED='1',
               NPM_NB_MIN_STEP_S='5', NPM_NB_TRAIN_MARGIN_S='12')   # the margins of 8-minute jobs, scaled to these 45 s ones
    carried = dev/'bundle'; carried.mkdir()
    for i, c in enumerate(plan):   # one install job per part: exit 3 until the last part is in
        for rel in c['carry']: shutil.copy(tmp_path/'bundle'/Path(rel).name, carried)
        r = _run([sys.executable, '-m', 'npm_nb.run.bundle', 'install', '--bundle', carried, '--stage', dev/'stage'], env=env)
        assert r.returncode == (0 if i == len(plan) - 1 else 3), r.stdout + r.stderr
    assert (dev/'data'/'cache'/'models'/'all-MiniLM-L6-v2'/'config.json').exists()
    model = dev/'data'/'cache'/'models'/'tiny-bert'   # the restored tiny init: what the run trains from and evaluates
    assert (model/'config.json').exists()

    # 3. `bundle run` jobs with a budget until the run is done; every job returns within the limits
    prof = tmp_path/'params'; prof.mkdir()
    (prof/'base.yaml').write_text((ROOT/'params'/'base.yaml').read_text())
    off = {n: {'enabled': False} for n in list_experiments() if n not in ('01_train', '05_open_set')}
    # named smoke: numbers meaningless (a random tiny BERT need not learn), one thread (steps of a tiny model on a busy
    # 2-core machine are many times slower with 2 threads than with 1)
    (prof/'smoke.yaml').write_text(json.dumps({'params': {'device': 'cpu', 'model': str(model), 'threads': 1}, 'notebooks': {
        **off, '01_train': {'params': SIM}, '05_open_set': {'params': SIM05}}}))
    jobs, states, outs, progress = 0, [], [], []
    metrics = dev/'data'/'cache'/'checkpoints'/'smoke'/'npm'/'metrics.jsonl'
    while jobs < 12:   # on a quiet machine 2 jobs; a loaded one makes less progress a job, never none
        jobs += 1; out = tmp_path/f'out{jobs}'; outs.append(out)
        # the first job cuts training (about 20 s of it: 1,000 steps take 25-40 s); later ones leave about 25 s of work
        # after the start and the margins, enough to finish training (a loaded machine needs another job)
        budget = '45' if jobs == 1 else '60'
        r = _run([sys.executable, '-m', 'npm_nb.run.bundle', 'run', 'smoke', '--budget', budget, '--reserve', '12', '--out', out,
                  '--checkpoints', '--params-dir', prof], env=env)
        assert r.returncode in (0, 3), r.stdout + r.stderr
        files = list(out.iterdir())
        assert len(files) <= 8 and all(f.stat().st_size <= 16 * MiB for f in files) and sum(f.stat().st_size for f in files) <= 64 * MiB
        st = json.loads(next((dev/'results'/'runs'/'smoke').glob('*/status.json')).read_text())
        states.append({n: (s['state'], s.get('cuts', 0)) for n, s in st['steps'].items()})
        if r.returncode == 0 or states[-1]['01_train'][0] == 'done': break   # the GPU time is up once training is done
        progress.append((len(metrics.read_text().splitlines()) if metrics.exists() else 0,))
        assert len(progress) < 4 or len(set(progress[-4:])) > 1, f'jobs {jobs - 2}-{jobs} made no progress: {states}'
    print('jobs:', states)
    assert jobs >= 2 and states[0]['01_train'][0] == 'interrupted', f'the first job did not cut training: {states}'
    # training went on from its checkpoint: one metric line a logged step, none twice
    steps = [json.loads(l)['step'] for l in metrics.read_text().splitlines()]
    assert steps == list(range(SIM['log_every'], SIM['steps'] + 1, SIM['log_every'])), steps

    # 4. here: collect what the jobs returned; the steps the GPU did not reach are finished here, on this CPU
    here = tmp_path/'here'; (here/'data').mkdir(parents=True)
    for d in ('processed', 'raw'): (here/'data'/d).symlink_to(ROOT/'data'/d)
    env_here = {**env, 'NPM_NB_DATA': str(here/'data'), 'NPM_NB_RESULTS': str(here/'results')}
    c = _run([sys.executable, '-m', 'npm_nb.run.bundle', 'collect', '--finish-here', '--dest', here, *outs], env=env_here)
    assert c.returncode == 0 and 'ckpt-smoke-npm.tar.xz' in c.stdout, c.stdout + c.stderr
    run = next((here/'results'/'runs'/'smoke').glob('2*'))
    assert (here/'data'/'cache'/'checkpoints'/'smoke'/'npm'/'final'/'config.json').exists()   # restored here
    if r.returncode == 0:   # a fast machine finished 05 in the same job: nothing is left to do here
        assert 'nothing to finish here' in c.stdout, c.stdout
    else:
        assert '-p device cpu` finishes them here' in c.stdout, c.stdout
        f = _run([sys.executable, '-m', 'npm_nb.run.batch', 'smoke', '-p', 'device', 'cpu', '--params-dir', prof], env=env_here)
        assert f.returncode == 0, f.stdout + f.stderr
        assert f'Resuming the unfinished run {run}' in f.stdout and '[done] 01_train: already done' in f.stdout, f.stdout
        assert '[run ] 05_open_set' in f.stdout
    # 05's final attempt has every part of its table, each computed once over its attempts there (StepCache), or here
    used = re.search(r'StepCache\([^:]*: (\d+) parts reused, (\d+) stored this time\)', (run/'05_open_set.ipynb').read_text())
    n_parts = 4 * 4 + 2 * 2   # rows x tasks, and npm / init on the two other question templates
    assert used and int(used.group(1)) + int(used.group(2)) == n_parts, used
    st = json.loads((run/'status.json').read_text())
    assert st['finished'] and {n: s['state'] for n, s in st['steps'].items()} == {'01_train': 'done', '05_open_set': 'done'}, st
    assert (run/'tables'/'05_open_set.md').exists() and 'Open-set' in (run/'README.md').read_text()
    assert not (here/'results'/'tables').exists()   # smoke is not the committed profile
    print(f'simulated offline node: {jobs} run jobs, {time.time() - t_all:.0f} s in all')


def test_finish_here_after_the_gpu_time_ends(tmp_path, monkeypatch):
    """#27: a run whose jobs ended after its first step (the node's 15 minutes are up) comes back, and the rest runs here.

    "There" runs with bf16 kept (a GPU, or a CPU with native bf16); here the CPU has none, so the step left over runs in
    fp32 (`fit_precision`) while the step done there stays done (`profile_key`): nothing runs twice, the run finishes."""
    import yaml
    from npm_nb.run import batch
    from npm_nb.run.batch import make_demo_notebook, run_batch
    from npm_nb.run.bundle import pack, send, collect
    import npm_nb.npm.training as training
    P = "profile: str = 'smoke'  # profile\ndevice: str = 'auto'  # device\namp: str = 'none'  # autocast\n"
    ex, pa, log = tmp_path/'experiments', tmp_path/'params', tmp_path/'ran.txt'
    body = lambda name: (f"import time; time.sleep(8)\nopen({str(log)!r}, 'a').write(f'{name} {{device}} {{amp}}\\n')\n"
                         "import pandas as pd\nfrom npm_nb.run.batch import write_table\n"
                         f"write_table('{name}', pd.DataFrame({{'amp': [amp]}}), title='{name}', profile=profile)")
    make_demo_notebook(ex/'01_a.ipynb', P, body('01_a')); make_demo_notebook(ex/'02_b.ipynb', P, body('02_b'))
    pa.mkdir()
    (pa/'base.yaml').write_text(yaml.safe_dump({'params': {'device': 'cpu', 'amp': 'bf16'},
                                                'notebooks': {'01_a': {}, '02_b': {'after': ['01_a']}}}))
    (pa/'onejob.yaml').write_text('params: {}\n')
    kw = dict(params_folder=pa, experiments_folder=ex, echo=print)

    # there: the budget lets 01_a start (the setup takes well under 8 s) and, once 01_a's 8 s are over, leaves too little
    # for 02_b (a step starts only with MIN_STEP_S = 52 of the budget's 60 s left)
    monkeypatch.setenv('NPM_NB_RESULTS', str(tmp_path/'there'/'results')); monkeypatch.setenv('NPM_NB_DATA', str(tmp_path/'there'/'data'))
    monkeypatch.setattr(batch, 'MIN_STEP_S', 52.0)
    st = run_batch('onejob', time_budget=60, keep_bf16=True, **kw)
    assert {n: s['state'] for n, s in st['steps'].items()} == {'01_a': 'done', '02_b': 'pending'} and st['budget_reached']
    pack('onejob', outbox=tmp_path/'outbox'); send(tmp_path/'out1', outbox=tmp_path/'outbox')

    # here: collect --finish-here marks the run; the batch resumes it on a CPU without native bf16
    here = tmp_path/'here'
    monkeypatch.setenv('NPM_NB_RESULTS', str(here/'results')); monkeypatch.setenv('NPM_NB_DATA', str(here/'data'))
    monkeypatch.setattr(batch, 'MIN_STEP_S', 30.0); monkeypatch.setattr(training, 'cpu_bf16_native', lambda: False)
    got = collect(tmp_path/'out1', dest=here, finish_here=True)
    assert got['finish_here'] == ['python -m npm_nb.run.batch onejob -p device cpu'], got
    st2 = run_batch('onejob', overrides=[('device', 'cpu')], **kw)
    assert st2['run_dir'] == str(here/'results'/'runs'/'onejob'/Path(st['run_dir']).name)
    assert st2['steps']['01_a'].get('cached') and st2['steps']['02_b']['state'] == 'done'
    assert log.read_text().splitlines() == ['01_a cpu bf16', '02_b cpu none'], log.read_text()   # each ran once
    run = Path(st2['run_dir'])
    assert json.loads((run/'status.json').read_text())['finished'] and (run/'tables'/'02_b.md').exists()
    cfg = yaml.safe_load((run/'config.yaml').read_text())
    assert '02_b.amp=none (no native bf16)' in cfg['overrides'] and cfg['steps']['02_b']['params']['amp'] == 'none'


# ---------------------------------------------------------------- #38: what arrives in files stays where it belongs
def _tar(path, members):
    "A tar at `path` of `{name: bytes}` (a bytes value: a file; None: a symlink to /etc/passwd)."
    import io, tarfile
    with tarfile.open(path, 'w') as t:
        for name, body in members.items():
            ti = tarfile.TarInfo(name)
            if body is None: ti.type, ti.linkname = tarfile.SYMTYPE, '/etc/passwd'
            else: ti.size = len(body)
            t.addfile(ti, io.BytesIO(body or b''))
    return path


def _part(path, items, extra=None):
    "A bundle part holding `items` ({name: bytes}) in one chunk each, with its table of contents (bundle.json)."
    import hashlib
    h = lambda b: hashlib.sha256(b).hexdigest()
    toc = {'format': 1, 'items': [{'name': n, 'kind': 'file', 'bytes': len(b), 'sha256': h(b), 'chunks': [
        {'part': Path(path).name, 'member': f'{n}.000', 'offset': 0, 'bytes': len(b), 'sha256': h(b)}]} for n, b in items.items()]}
    return _tar(path, {'bundle.json': json.dumps(toc).encode(), **{f'{n}.000': b for n, b in items.items()}, **(extra or {})})


# reliability round three (issue #38)
def test_install_refuses_names_that_leave_the_stage(tmp_path):
    "Item names of a table of contents, chunk members, extra members and links: each refused, nothing written outside."
    from npm_nb.run.bundle import install
    for i, (items, extra, part) in enumerate([
            ({'../../../evil': b'x'}, None, "item '../../../evil'"), ({'/tmp/evil-abs': b'x'}, None, 'is an absolute path'),
            ({'ok.bin': b'x'}, {'stray': b'y'}, "member 'stray' is not listed"), ({'ok.bin': b'x'}, {'ln': None}, "member 'ln'")]):
        d = tmp_path/f'b{i}'; d.mkdir(); _part(d/'npm-nb-bundle.part01.tar', items, extra)
        with pytest.raises(ValueError, match=re.escape(part)): install(d, stage=tmp_path/f's{i}'/'stage', python='-')
    assert not (tmp_path/'evil').exists() and not Path('/tmp/evil-abs').exists() and not (tmp_path/'s0'/'evil').exists()
    d = tmp_path/'bad-toc'; d.mkdir(); _tar(d/'npm-nb-bundle.part01.tar', {'bundle.json': b'{"format": 1, "items": [{"name": 3}]}'})
    with pytest.raises(ValueError, match=r'bundle.json is damaged .*`items\[0\].name` must be a string'):
        install(d, stage=tmp_path/'s-toc', python='-')
    d = tmp_path/'not-tar'; d.mkdir(); (d/'npm-nb-bundle.part01.tar').write_bytes(b'not a tar' * 100)
    with pytest.raises(ValueError, match='not a readable tar'): install(d, stage=tmp_path/'s-nt', python='-')


# reliability round three (issue #38)
def test_model_and_checkpoint_names_stay_in_their_folders(tmp_path):
    "`weights: ../../x` in bundle_model.json, a profile `../../../../tmp/x` in train_config.json: refused."
    import torch
    from safetensors.torch import save_file
    from npm_nb.run.bundle import restore_model, restore_checkpoint
    save_file({'w': torch.zeros(2)}, str(tmp_path/'w.safetensors')); w = (tmp_path/'w.safetensors').read_bytes()
    for info, part in [({'name': 'm', 'weights': '../../escaped.safetensors'}, "'weights'"), ({'name': '..', 'weights': 'a'}, "'name'"),
                       ({'name': 'm'}, 'has no `weights`')]:
        arch = _tar(tmp_path/'model.tar', {'bundle_model.json': json.dumps(info).encode(), 'model.fp16.safetensors': w})
        with pytest.raises(ValueError, match=re.escape(part)): restore_model(arch, root=tmp_path/'models'/'inner')
    assert not list(tmp_path.rglob('escaped*'))
    cfg = {'profile': '../../../../tmp/x', 'objective': 'npm', 'model': 'minilm'}
    arch = _tar(tmp_path/'ckpt.tar', {'train_config.json': json.dumps(cfg).encode(), 'state.json': b'{}', 'model.fp16.safetensors': w})
    with pytest.raises(ValueError, match="train_config.json: profile '../../../../tmp/x'"): restore_checkpoint(arch)
    with pytest.raises(ValueError, match="--profile 'a/b'"): restore_checkpoint(arch, profile='a/b')


# reliability round three (issue #38)
def test_collect_writes_only_under_results(tmp_path):
    "A results archive with Makefile / npm_nb/__init__.py / .git hooks is refused; pieces are checked (name, checksum, tar)."
    from npm_nb.run.bundle import collect, main, sha256
    here = tmp_path/'here'; here.mkdir()
    for i, bad in enumerate(['Makefile', 'npm_nb/__init__.py', '.git/hooks/post-checkout', 'results/../Makefile']):
        out = tmp_path/f'o{i}'; out.mkdir()
        _tar(out/'results-x.tar.xz.1of1', {'results/runs/x/1/status.json': b'{}', bad: b'echo owned'})
        with pytest.raises(ValueError, match='outside results/|climbs out'): collect(out, dest=here)
    assert sorted(p.name for p in here.iterdir()) == ['dist'] and not (here/'Makefile').exists()
    out = tmp_path/'sums'; out.mkdir(); f = _tar(out/'results-x.tar.xz.1of1', {'results/a.md': b'ok', 'results/runs/x/1/.started-here': b''})
    (out/'pieces.sha256.json').write_text(json.dumps({f.name: '0' * 64}))
    with pytest.raises(ValueError, match='results-x.tar.xz.1of1 is damaged: its sha256 differs'): collect(out, dest=here)
    (out/'pieces.sha256.json').write_text(json.dumps({f.name: sha256(f)}))
    assert collect(out, dest=here)['done'] == {'results-x.tar.xz': str(here/'results')} and (here/'results'/'a.md').read_text() == 'ok'
    assert not (here/'results'/'runs'/'x'/'1'/'.started-here').exists()   # only --finish-here marks a run as started here
    for name, body, part in [('results-x.tar.xz.1ofN', b'', 'is not a piece `bundle send` writes'),
                             ('results-y.tar.xz.1of1', b'not a tar' * 50, 'is not a readable tar archive')]:
        out = tmp_path/name; out.mkdir(); (out/name).write_bytes(body)
        assert main(['collect', '--dest', str(here), str(out)]) == 2   # a sentence, not a traceback
        with pytest.raises(ValueError, match=re.escape(part)): collect(out, dest=here)


# reliability round three (issue #38)
def test_extract_checks_members_without_the_tar_filter(tmp_path, monkeypatch):
    "On a Python whose tarfile has no `filter` argument, members are still checked (and written by hand)."
    import tarfile
    from npm_nb.run.bundle import _extract
    monkeypatch.delattr(tarfile, 'data_filter', raising=False)
    with pytest.raises(ValueError, match="climbs out"): _extract(_tar(tmp_path/'a.tar', {'../evil': b'x'}), tmp_path/'x')
    with pytest.raises(ValueError, match="is a link"): _extract(_tar(tmp_path/'b.tar', {'ln': None}), tmp_path/'x')
    assert _extract(_tar(tmp_path/'c.tar', {'d/ok': b'1'}), tmp_path/'x') == ['d/ok'] and (tmp_path/'x'/'d'/'ok').read_bytes() == b'1'
    assert not (tmp_path/'evil').exists()


# reliability round three (issue #38)
@pytest.mark.parametrize('status, part', [({'profile': 'p'}, 'has no `steps`'), ({'steps': []}, '`steps` must be a mapping, not a list'),
                                          ({'steps': None}, '`steps` must be a mapping, not null')])
def test_finish_here_on_a_damaged_status_is_a_sentence(tmp_path, capsys, status, part):
    "collect --finish-here on a status.json with no `steps` (or a list, or null): a sentence naming the file and the fix."
    from npm_nb.run.bundle import main
    out = tmp_path/'out'; out.mkdir()
    _tar(out/'results-p.tar.xz.1of1', {'results/runs/p/20260101-000000/status.json': json.dumps(status).encode()})
    assert main(['collect', '--finish-here', '--dest', str(tmp_path/'here'), str(out)]) == 2
    err = capsys.readouterr().err
    assert part in err and 'status.json is damaged' in err and 'collect --finish-here' in err and 'Traceback' not in err, err
    assert 'nothing to finish' not in err


# reliability round three (issue #38)
def test_forged_part_does_not_leave_install_stuck(tmp_path):
    "A forged extra part poisons a chunk: install says what to do, and once the part is gone the next install completes."
    from npm_nb.run.bundle import install, write_parts
    src = tmp_path/'src'; src.mkdir(); (src/'a.bin').write_bytes(os.urandom(50_000)); (src/'b.bin').write_bytes(os.urandom(30_000))
    man = write_parts([{'name': f'files/{n}', 'kind': 'file', 'path': src/n} for n in ('a.bin', 'b.bin')], tmp_path/'bundle', part_mb=0.1)
    there = tmp_path/'there'; shutil.copytree(tmp_path/'bundle', there)
    chunk = man['items'][0]['chunks'][0]
    forged = json.loads(json.dumps(man['items'])); forged[0]['chunks'][0].update(part='npm-nb-bundle.part99.tar')
    import hashlib, io, tarfile
    bad = os.urandom(chunk['bytes']); forged[0]['chunks'][0]['sha256'] = hashlib.sha256(bad).hexdigest()
    forged[0]['chunks'] = forged[0]['chunks'][:1]
    toc = json.dumps({'format': 1, 'items': forged[:1]}).encode()
    with tarfile.open(there/'npm-nb-bundle.part99.tar', 'w') as t:
        for name, body in (('bundle.json', toc), (chunk['member'], bad)):
            ti = tarfile.TarInfo(name); ti.size = len(body); t.addfile(ti, io.BytesIO(body))
    # with manifest.json beside the parts, a part it does not list is refused before anything is unpacked
    with pytest.raises(ValueError, match=r'npm-nb-bundle.part99.tar is not a part of this bundle .*remove it'):
        install(there, stage=tmp_path/'stage1', python='-')
    # without it the forged chunk gets in (its own table vouches for it) and the item does not reassemble
    (there/'manifest.json').unlink()
    with pytest.raises(ValueError, match=r'reassembled file is damaged.*will be unpacked again.*install --force'):
        install(there, stage=tmp_path/'stage', python='-')
    (there/'npm-nb-bundle.part99.tar').unlink()   # the forged part removed: install recovers with no guess and no --force
    r = install(there, stage=tmp_path/'stage', python='-')
    assert r['complete'], r
    for n in ('a.bin', 'b.bin'): assert (tmp_path/'stage'/'items'/'files'/n).read_bytes() == (src/n).read_bytes()
