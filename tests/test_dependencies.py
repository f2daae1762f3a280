"""Dependency layout (audit D5): FAISS is an extra, imported only when an index is used, and `make install` asks for
torch's CPU build (plain PyPI's torch==2.13.0 is the CUDA 13 build)."""
import os, subprocess, sys
from configparser import ConfigParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _settings():
    cp = ConfigParser(delimiters=['=']); cp.read(ROOT/'settings.ini', encoding='utf-8'); return cp['DEFAULT']


def test_faiss_is_an_extra():
    s = _settings()
    assert not [r for r in s['requirements'].split() if r.startswith('faiss')]
    assert s['cpu_requirements'].split() == ['faiss-cpu>=1.8'] and s['gpu_requirements'].split() == ['faiss-gpu>=1.8']
    assert "'cpu': shlex.split(cfg.get('cpu_requirements'" in (ROOT/'setup.py').read_text()


def test_training_and_search_run_without_faiss():
    "With `import faiss` failing, everything but the FAISS indexes imports; using one says which extra to install."
    code = ("import sys; sys.modules['faiss'] = None\n"
            "import npm_nb.npm.training, npm_nb.npm.datastore, npm_nb.npm.inference, npm_nb.npm.evaluation\n"
            "import npm_nb.run.reference, npm_nb.npm.index\n"
            "try: npm_nb.npm.index.faiss.IndexFlatIP\n"
            "except ImportError as e: print('refused:', e)\n")
    p = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, 'PYTHONPATH': str(ROOT)})
    assert p.returncode == 0, p.stderr
    assert "refused: FAISS is not installed: pip install 'npm-nb[cpu]'" in p.stdout, p.stdout


def test_make_install_asks_for_the_cpu_build():
    p = subprocess.run(['make', '-n', 'install', 'VENV=/nonexistent-venv'], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert '"torch==2.13.0+cpu"' in p.stdout and 'download.pytorch.org/whl/cpu' in p.stdout and '".[dev,cpu]"' in p.stdout
    gpu = subprocess.run(['make', '-n', 'install', 'VENV=/nonexistent-venv', 'TORCH_VARIANT=cu128', 'EXTRAS=dev,gpu'],
                         cwd=ROOT, capture_output=True, text=True).stdout
    assert '"torch==2.13.0+cu128"' in gpu and 'whl/cu128' in gpu and '".[dev,gpu]"' in gpu
