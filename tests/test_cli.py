"""The command line end to end, as a user gets it: a wheel built from the sources, installed (without dependencies)
into a folder of its own and run from outside the repository (issue 29). The encoder is a tiny random-init BERT saved
to a folder, so every command takes seconds; what is checked is provenance (which documents answers come from), not
answer quality."""
import json, os, shutil, socket, subprocess, sys, time, urllib.request
from pathlib import Path
from types import SimpleNamespace
import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ['setup.py', 'settings.ini', 'pyproject.toml', 'README.md']  # what the wheel is built from, with npm_nb/
QUERY = 'Zanzibar is an island off the coast of [MASK].'


def run(cmd, **kw):
    "Run a command; fail the test with its output when it fails."
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope='module')
def cli(tmp_path_factory):
    "`cli(*args)` runs the installed `npm-nb` script from a folder outside the repository."
    t = tmp_path_factory.mktemp('cli')
    src = t/'src'; src.mkdir()  # a copy, so building leaves no build/ or egg-info in the checkout
    for f in SOURCES: shutil.copy(ROOT/f, src/f)
    shutil.copytree(ROOT/'npm_nb', src/'npm_nb', ignore=shutil.ignore_patterns('__pycache__'))
    pip = [sys.executable, '-m', 'pip', '--disable-pip-version-check', '--no-input']
    run(pip + ['wheel', '--no-deps', '--no-build-isolation', '--no-index', '-w', t/'dist', src])
    wheel = next((t/'dist').glob('npm_nb-*.whl'))
    run(pip + ['install', '--no-deps', '--no-index', '--target', t/'site', wheel])
    work = t/'work'; work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith('NPM_NB_')}
    env.update(PYTHONPATH=str(t/'site'), NPM_NB_DATA=str(work/'data'), NPM_NB_RESULTS=str(work/'results'), HF_HUB_OFFLINE='1',
               TRANSFORMERS_OFFLINE='1', HF_DATASETS_OFFLINE='1', TOKENIZERS_PARALLELISM='false', PYTHONDONTWRITEBYTECODE='1')
    where = run([sys.executable, '-c', 'import npm_nb; print(npm_nb.__file__)'], cwd=work, env=env).stdout.strip()
    assert Path(where).resolve().is_relative_to((t/'site').resolve()), f"npm_nb imported from {where}, not the wheel"
    script = t/'site'/'bin'/'npm-nb'
    assert script.exists(), 'the wheel installed no npm-nb script (console_scripts in settings.ini / setup.py)'

    from npm_nb.models import load_tokenizer, tiny_encoder  # the tiny encoder is made with the checkout's package
    tok = load_tokenizer('minilm'); tiny_encoder(tok).save_pretrained(work/'tiny'); tok.save_pretrained(work/'tiny')

    def cli(*args, ok=True, module=None):
        cmd = [sys.executable, '-m', module] if module else [script]
        r = subprocess.run([str(c) for c in cmd + list(args)], capture_output=True, text=True, cwd=work, env=env, timeout=300)
        if ok is not None: assert (r.returncode == 0) == ok, f"npm-nb {' '.join(map(str, args))}: {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r
    return SimpleNamespace(run=cli, work=work, env=env, script=script)


def answers(cli, store, query=QUERY):
    "Every answer for `query` (k above the store's size and a large topn: every short phrase is a candidate)."
    r = cli.run('ask', store, query, '-k', '100000', '--topn', '1000', '--json')
    return json.loads(r.stdout)['answers']


def test_round_trip(cli):
    w = cli.work
    docs = w/'docs'; docs.mkdir()
    (docs/'greece.txt').write_text('Thessaloniki is the second-largest city in Greece.', encoding='utf-8')
    (docs/'islands.jsonl').write_text('{"id": "zanzibar", "title": "Zanzibar", "text": "Zanzibar is an island off the coast of Tanzania."}\n'
                                      '{"text": "Crete is the largest island of Greece."}\n', encoding='utf-8')
    (docs/'ports.csv').write_text('title,text\nKavala,"Kavala is a port city in Macedonia, Greece."\n', encoding='utf-8')
    (docs/'cafe.txt').write_bytes('Un café à Montréal.'.encode('latin-1'))  # not UTF-8

    r = cli.run('build', 'store', 'docs', '--model', 'tiny', ok=False)  # the bad file is named, with the fix; nothing built
    assert r.returncode == 1 and 'docs/cafe.txt: not valid utf-8 text (byte 0xe9 on line 1)' in r.stderr
    assert '--encoding latin-1' in r.stderr and '--skip-bad' in r.stderr and not (w/'store').exists()
    r = cli.run('build', 'store', 'docs', '--model', 'tiny', '--skip-bad', '--max-len', '32')
    assert 'left out docs/cafe.txt' in r.stderr and '4 documents' in r.stdout

    info = json.loads(cli.run('info', 'store', '--json', '--ids').stdout)
    assert info['documents'] == 4 and info['encoder_name'] == str((w/'tiny').resolve()) and info['precision'] == 'fp32'
    assert [d['id'] for d in info['ids']] == ['greece.txt', 'zanzibar', 'islands.jsonl:2', 'ports.csv:1']
    assert info['size_bytes'] > info['vectors'] * 32 * 2 > 0 and info['created']

    before = answers(cli, 'store')  # no --model: the store's own encoder folder
    assert {'zanzibar', 'greece.txt'} <= {a['doc_id'] for a in before}
    z = next(a for a in before if a['doc_id'] == 'zanzibar')
    text = 'Zanzibar is an island off the coast of Tanzania.'
    assert text[z['char_start']:z['char_end']] == z['text'] and '**' + z['text'] + '**' in z['snippet']
    r = cli.run('ask', 'store', QUERY, '--topn', '2')  # the text form: rank, phrase, score, then the evidence
    assert r.stdout.startswith(QUERY + '\n  1. ') and 'score ' in r.stdout and '**' in r.stdout

    (w/'more').mkdir(); (w/'more'/'kenya.txt').write_text('Mombasa is a port city of Kenya.', encoding='utf-8')
    assert 'added 1 document;' in cli.run('add', 'store', 'more').stdout
    assert 'kenya.txt' in {a['doc_id'] for a in answers(cli, 'store')}
    bm = json.loads(cli.run('ask', 'store', 'Mombasa is a port city of [MASK].', '--bm25', '1', '--topn', '1000', '--json').stdout)
    assert {a['doc_id'] for a in bm['answers']} == {'kenya.txt'}  # BM25's top block holds only the Kenya document
    assert 'removed 1 document; now 4 documents' in cli.run('remove', 'store', 'zanzibar').stdout
    after = answers(cli, 'store')
    assert 'zanzibar' not in {a['doc_id'] for a in after} and not any('zanzibar' in a['text'].lower() for a in after)
    assert {'greece.txt', 'kenya.txt'} <= {a['doc_id'] for a in after}
    assert cli.run('ask', 'store', 'no blank here', ok=False).returncode == 2  # (more errors: nbs/24_cli.ipynb)
    r = cli.run('ask', 'store', QUERY, '--l-max', '1000000', ok=False)  # a range of npm_nb.core.SETTINGS, not a long hang
    assert r.returncode != 0 and '1000000' in r.stderr and '512' in r.stderr and 'Traceback' not in r.stderr, r.stderr


def test_default_encoder_is_said(cli):
    "Without --model and without a trained checkpoint, the MiniLM init is used and stderr says so."
    (cli.work/'one.txt').write_text('Athens is the capital of Greece.', encoding='utf-8')
    r = cli.run('build', 'init-store', 'one.txt')
    assert 'untrained MiniLM init' in r.stderr and 'make reproduce' in r.stderr and '1 document,' in r.stdout


def test_help_everywhere(cli):
    r = cli.run('--help'); assert 'build' in r.stdout and 'ask' in r.stdout and 'examples:' in r.stdout
    for cmd in ['build', 'add', 'remove', 'ask', 'serve', 'info']:
        r = cli.run(cmd, '--help'); assert r.stdout.startswith(f'usage: npm-nb {cmd}') and '\nexample:\n  npm-nb ' in r.stdout
    assert cli.run('--help', module='npm_nb').stdout.startswith('usage: python -m npm_nb')
    assert cli.run(ok=False).returncode == 2  # no command: usage on stderr


def test_serve(cli):
    """The explorer on a store, as a real server: the page, whose banner names the encoder truly (here the quick NPM,
    a tiny model in its folder), then a plain API request (a query only), answered from the store's documents."""
    data = cli.work/'data-quick'; shutil.copytree(cli.work/'tiny', data/'cache'/'checkpoints'/'quick'/'npm'/'final')
    env = {**cli.env, 'NPM_NB_DATA': str(data)}
    docs = cli.work/'serve-docs'; docs.mkdir()
    (docs/'a.txt').write_text('Mombasa is a port city of Kenya.', encoding='utf-8')
    r = subprocess.run([str(cli.script), 'build', 'serve-store', str(docs)], cwd=cli.work, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and 'quick NPM' in r.stderr, r.stderr
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
    p = subprocess.Popen([str(cli.script), 'serve', 'serve-store', '--port', str(port)], cwd=cli.work, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        t0, lines = time.time(), []
        while time.time() - t0 < 180:
            line = p.stdout.readline(); lines.append(line)
            if f'http://127.0.0.1:{port}/' in line or p.poll() is not None: break
        assert p.poll() is None, ''.join(lines) + p.stdout.read()
        for _ in range(50):  # the server may take a moment after the line
            try: page = urllib.request.urlopen(f'http://127.0.0.1:{port}/', timeout=10).read().decode(); break
            except OSError: time.sleep(0.2)
        assert 'NPM explorer' in page
        banner = page.split('id="banner">', 1)[1].split('</div>', 1)[0]
        assert 'serve-store' in banner and 'the quick NPM' in banner and 'No trained' not in page, banner
        req = urllib.request.Request(f'http://127.0.0.1:{port}/api/explore', headers={'Content-Type': 'application/json'},
                                     data=json.dumps({'query': 'Mombasa is a port city of [MASK].', 'bm25': False}).encode())
        r = json.loads(urllib.request.urlopen(req, timeout=120).read())
        assert 'error' not in r, r
        assert r['result']['answers'] and {a['doc_id'] for a in r['result']['answers']} == {'a.txt'}, r['result']['answers'][:3]
    finally:
        p.terminate(); p.wait(timeout=30)


def test_messages_in_cli_words(cli):
    "Errors name flags, not Python names; a lower-case [mask] and an unquoted query get hints; `info | head` no traceback."
    (cli.work/'hint.txt').write_text('Mombasa is a port city of Kenya.', encoding='utf-8')
    cli.run('build', 'hint-store', 'hint.txt', '--model', 'tiny')
    r = cli.run('remove', 'hint-store', 'nope.txt', ok=False)
    assert '--missing-ok' in r.stderr and 'npm-nb info hint-store --ids' in r.stderr, r.stderr
    assert 'missing_ok' not in r.stderr and 'ds.doc_ids' not in r.stderr, r.stderr
    r = cli.run('ask', 'hint-store', 'Mombasa is a port city of [mask].', ok=False)
    assert r.returncode == 2 and 'case matters' in r.stderr, r.stderr
    r = cli.run('ask', 'hint-store', 'Mombasa', 'is', 'a', 'port', 'city', 'of', '[MASK].', ok=False)
    assert r.returncode == 2 and 'quote it' in r.stderr and '"Mombasa is a port city of [MASK]."' in r.stderr, r.stderr
    p = subprocess.Popen([str(cli.script), 'info', 'hint-store', '--ids'], cwd=cli.work, env=cli.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # the reader goes away at once, as `| head -0` would
    err = p.stderr.read(); p.wait(timeout=120)
    assert 'Traceback' not in err and 'BrokenPipe' not in err and 'Broken pipe' not in err, err
