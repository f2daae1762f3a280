"""The offline bundle end to end (npm_nb.bundle). Slow (minutes, see README "Offline GPU machines"): it runs only with
NPM_NB_TEST_BUNDLE=1 (`make bundle-test`).

Here, with PyPI reachable: train a tiny run, build the bundle for this machine's Python with that checkpoint in it.
Then, as on a GPU machine without a package index: a fresh venv with only what that machine has (torch, transformers,
numpy, pandas, seaborn, pyarrow, pytest), the parts handed to the installer one call at a time (`--no-index`), and a
smoke step through the batch runner in that venv: 01_train finds the restored checkpoint and skips training.
"""
import json, os, shutil, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not os.environ.get('NPM_NB_TEST_BUNDLE'),
                                reason='slow (about 10-20 minutes): set NPM_NB_TEST_BUNDLE=1 or run `make bundle-test`')
PY = f'{sys.version_info.major}.{sys.version_info.minor}'
TRAIN = dict(objectives='npm', corpora='brown', steps=2, batch_size=2, max_len=32, max_blocks=16, warmup=1,
             n_eval_batches=1, log_every=1)  # 01_train parameters of the smoke step (and of the checkpoint trained here)


def _run(cmd, env=None, **kw):
    t0 = time.time()
    p = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env, capture_output=True, text=True, **kw)
    print(f'$ {" ".join(map(str, cmd))[:200]}  ({time.time() - t0:.0f} s, exit {p.returncode})\n{p.stdout[-1500:]}{p.stderr[-1500:]}')
    return p


def test_bundle_end_to_end(tmp_path, monkeypatch):
    import torch
    from npm_nb.models import load_tokenizer
    from npm_nb.training import TrainConfig, train, training_blocks, checkpoint_dir
    from npm_nb.bundle import export_checkpoint, DEVICE_PRESENT
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
    b = _run([sys.executable, '-m', 'npm_nb.bundle', 'build', '--out', tmp_path/'bundle', '--python', PY,
              '--platform', 'manylinux_2_28_x86_64', '--checkpoint-files', ckpt])
    assert b.returncode == 0, b.stderr
    man = json.loads((tmp_path/'bundle'/'manifest.json').read_text())
    assert all(p['bytes'] <= 56 * 2**20 for p in man['parts'])
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
    p = _run([py, '-m', 'pip', 'install', '-q', f'torch=={tv}', *[d for d in DEVICE_PRESENT if d != 'torch']])
    assert p.returncode == 0, p.stderr
    times['venv with the GPU machine\'s packages'] = time.time() - t0

    # 4. install from the parts, one call per part (as one device call carries one part), no index
    t0 = time.time()
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
    env.update(NPM_NB_DATA=str(tmp_path/'data'), NPM_NB_RESULTS=str(tmp_path/'results'), PIP_NO_INDEX='1',
               PATH=f"{venv/'bin'}:{env['PATH']}", HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1', HF_DATASETS_OFFLINE='1')
    there = tmp_path/'device'/'bundle'; there.mkdir(parents=True)
    shutil.copy(tmp_path/'bundle'/'manifest.json', there)
    for i, part in enumerate(man['parts']):
        shutil.copy(tmp_path/'bundle'/part['name'], there)
        r = _run([py, '-m', 'npm_nb.bundle', 'install', '--bundle', there], env=env)
        assert r.returncode == (0 if i == len(man['parts']) - 1 else 3), r.stderr
    again = _run([py, '-m', 'npm_nb.bundle', 'install', '--bundle', there], env=env)  # idempotent
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
    r = _run([py, '-m', 'npm_nb.batch', 'bundletest', '--params-dir', prof, '--time-budget', '900'], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    times['smoke step (01_train, training skipped)'] = time.time() - t0
    assert [p.name for p in restored.glob('checkpoint-*')] == ['checkpoint-2']  # nothing new was trained
    st = torch.load(restored/'final'/'trainer_state.pt', weights_only=False)
    assert st['restored']['archive'] == ckpt.name and st['step'] == 2
    assert (tmp_path/'results'/'tables'/'train_retrieval.md').exists()
    print('\n'.join(f'{k}: {v:.0f} s' for k, v in times.items()))
