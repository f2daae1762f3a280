"""Issue #28 item 5: the explorer web app when many people use it, and when someone tries to misuse it.

Each test is one finding of the probe: a paste held a global lock while it was encoded, each paste left its store on
disk for ever, any Host header was answered (DNS rebinding), a body was read whole whatever its size, messages showed
absolute server paths, and bad input was answered with HTTP 200. The app is the real one (`create_app`), driven with
Flask's test client, over a tiny random-init encoder built in code (registered as the model `tiny`); every file goes
under a temporary `NPM_NB_DATA`, so nothing here needs a checkpoint or a cache and the whole file takes seconds."""
import gc, io, json, os, subprocess, sys, textwrap, threading, time
from pathlib import Path
import numpy as np, pytest

os.environ.setdefault('HF_HUB_OFFLINE', '1'); os.environ.setdefault('TRANSFORMERS_OFFLINE', '1')
import npm_nb.run.explorer as E
from npm_nb.run.explorer import Explorer, ModelEntry, register_model, MODELS, CORPORA, prepare_npm, answer_npm, create_app, MASK
from npm_nb.npm.inference import NPM
from npm_nb.models import load_tokenizer, tiny_encoder, load_encoder
from npm_nb.core import project_root, data_dir

Q = 'The Banpo Bridge crosses the [MASK] in Seoul.'
PASTE = '# Banpo\nThe Banpo Bridge crosses the Han River in Seoul.\n\n# Athens\nAthens is the capital of Greece.'
HOLD = {}  # 'paste': an Event a pasted corpus waits for before it is encoded (a paste that takes as long as we like)


@pytest.fixture(scope='module')
def tok(): return load_tokenizer('minilm')


@pytest.fixture(scope='module', autouse=True)
def tiny(tok):
    "The model `tiny`: a random-init 2-layer encoder (hidden 32) with NPM's scoring; pastes can be held back with HOLD."
    def load(profile, device=None): return E._remember_queries(NPM(tiny_encoder(tok, seed=0), tok))
    def prepare(model, corpus, docs=None, profile='cpu', progress=True, **kw):
        if corpus.pasted and HOLD.get('paste') is not None:
            HOLD['entered'].set(); assert HOLD['paste'].wait(60)
        return prepare_npm(model, corpus, docs, profile, progress, **kw)
    register_model(ModelEntry('tiny', 'tiny random-init encoder', load, prepare, answer_npm))
    yield
    MODELS.pop('tiny', None)


@pytest.fixture
def data(tmp_path, monkeypatch):
    "Every file the explorer writes goes under tmp_path/data."
    monkeypatch.setenv('NPM_NB_DATA', str(tmp_path/'data'))
    return tmp_path/'data'


@pytest.fixture
def ex(data):
    e = Explorer(profile='smoke', progress=False, fuzzy=False)
    yield e
    getattr(e, 'close', lambda: None)()


def post(client, **body): return client.post('/api/explore', json={'model': 'tiny', 'bm25': False, 'k': 16, **body})


def stores_under(folder) -> list:
    "The datastore folders (those with a manifest) anywhere under `folder`."
    return sorted(p.parent for p in Path(folder).rglob('manifest.json'))


def pasted_stores(data) -> list:
    "Datastores under `data` that hold pasted documents (ids 'pasted-N'), wherever the explorer put them."
    from datasets import load_from_disk
    import json
    out = []
    for s in stores_under(data):
        g = json.loads((s/'manifest.json').read_text())['generation']
        if str(load_from_disk(str(s/f'meta-{g}'/'docs'))['id'][0]).startswith('pasted-'): out.append(s)
    return out


def folder_bytes(folder) -> int: return sum(f.stat().st_size for f in Path(folder).rglob('*') if f.is_file())


# 1. A paste is limited in characters and in tokens, with a clear error (HTTP 413).

def test_paste_over_the_character_limit_is_refused(ex):
    client = create_app(ex, model='tiny').test_client()
    text = 'The bridge crosses the river. ' * (E.MAX_CORPUS_CHARS // 30 + 1)
    assert E.MAX_CORPUS_CHARS <= 20_000 < len(text) < 50_000  # the probe's 48k paste was accepted before
    r = post(client, query=Q, corpus='pasted', corpus_text=text)
    assert r.status_code == 413 and 'characters long' in r.get_json()['error'], (r.status_code, r.get_json())
    assert not pasted_stores(data_dir())  # refused before anything was encoded


def test_paste_over_the_token_limit_is_refused(ex, tok):
    client = create_app(ex, model='tiny').test_client()
    text = '7 ' * 9_000  # under the character limit, but 9,000 tokens (one per digit), hand-counted
    assert len(text.strip()) < E.MAX_CORPUS_CHARS and len(tok(text, add_special_tokens=False)['input_ids']) == 9_000
    r = post(client, query=Q, corpus='pasted', corpus_text=text)
    assert r.status_code == 413, (r.status_code, r.get_json())
    err = r.get_json()['error']
    assert '9,000 tokens' in err and f'{E.MAX_CORPUS_TOKENS:,}' in err, err
    assert not pasted_stores(data_dir())
    ok = post(client, query=Q, corpus='pasted', corpus_text='7 ' * 100 + '\n\n' + PASTE)  # a small paste still answers
    assert ok.status_code == 200 and ok.get_json()['result']['answers'], ok.get_json()


# 2. Encoding a paste does not hold up other people's queries on other stores.

def test_a_paste_being_encoded_does_not_block_queries_on_other_stores(ex):
    assert ex.explore(Q, model='tiny', corpus='figure1', bm25=False, k=16).answers  # figure1 ready, as after start-up
    out, release, entered = {}, threading.Event(), threading.Event()
    HOLD.update(paste=release, entered=entered)
    paster = threading.Thread(target=lambda: out.update(paste=ex.explore_safe(Q, model='tiny', corpus='pasted', corpus_text=PASTE)))
    paster.start()
    try:
        assert entered.wait(30), 'the paste never started encoding'
        other = threading.Thread(target=lambda: out.update(other=ex.explore_safe(Q, model='tiny', corpus='figure1', bm25=False, k=16)))
        t0 = time.perf_counter(); other.start(); other.join(20)
        assert 'other' in out, 'a figure1 query waited for a paste that was being encoded (a lock held for the whole encode)'
        assert out['other'][1] is None and out['other'][0].answers and time.perf_counter() - t0 < 20
        assert 'paste' not in out  # the paste really was still being encoded meanwhile
    finally:
        release.set(); HOLD.clear(); paster.join(60)
    assert out['paste'][1] is None and out['paste'][0].answers[0].title in ('Banpo', 'Athens'), out['paste']


def test_remembered_query_and_search_are_per_thread(tok):
    "Answering holds no lock, so what a model remembers of its last query (and an index of its last search) is per thread."
    m, calls = NPM(tiny_encoder(tok), tok), []
    enc = m.encode_queries
    m.encode_queries = lambda texts, batch_size=32: calls.append(texts) or enc(texts, batch_size)
    m = E._remember_queries(m)
    a = m.encode_queries('Athens is in [MASK].')
    t = threading.Thread(target=m.encode_queries, args=('Seoul is in [MASK].',)); t.start(); t.join()
    assert m.encode_queries('Athens is in [MASK].') is a  # another person's query meanwhile did not replace this one's
    assert calls == ['Athens is in [MASK].', 'Seoul is in [MASK].'], calls

    class Index:
        searched = []
        def search(self, q, k): self.searched.append(k); return q[:, :k], q[:, :k]
    idx, q = E._LastSearch(Index()), np.ones((2, 8), np.float32)
    first = idx.search(q, 3)
    t = threading.Thread(target=idx.search, args=(q, 5)); t.start(); t.join()
    assert idx.search(q, 3) is first and Index.searched == [3, 5]


def test_answers_in_parallel_threads_equal_answers_one_at_a_time(ex):
    "No lock while answering: four people asking at once get what each would get alone."
    queries = ['The Banpo Bridge crosses the [MASK] in Seoul.', 'Athens is the capital of [MASK].',
               'The hotel was [MASK] and clean.', 'The concert was [MASK].']
    want = {q: [(a.text, round(a.score, 5)) for a in ex.explore(q, model='tiny', corpus='figure1', bm25=False, k=16).answers]
            for q in queries}
    assert len({tuple(v) for v in want.values()}) > 1  # the queries have different answers, so a mix-up shows
    got, errors = [], []
    def ask(q):
        for _ in range(15):
            e, err = ex.explore_safe(q, model='tiny', corpus='figure1', bm25=False, k=16)
            if err: errors.append(err)
            else: got.append((q, [(a.text, round(a.score, 5)) for a in e.answers]))
    threads = [threading.Thread(target=ask, args=(q,)) for q in queries]
    switch = sys.getswitchinterval(); sys.setswitchinterval(1e-6)  # threads take turns often: a shared cache shows
    try:
        for t in threads: t.start()
        for t in threads: t.join(120)
    finally: sys.setswitchinterval(switch)
    assert not errors and len(got) == 15 * len(queries), errors[:3]
    assert all(ans == want[q] for q, ans in got), [q for q, ans in got if ans != want[q]][:3]


# 3. Pasted stores are temporary: at most `keep_pasted` (and `pasted_bytes`) on disk, deleted at close and exit,
#    and those of a killed explorer are swept at the next start-up.

def test_pasted_stores_are_bounded_and_deleted(ex, data):
    texts = [f'# Doc {i}\nThe Banpo Bridge number {i} crosses the river {i} in Seoul.' for i in range(6)]
    for i, t in enumerate(texts):
        e, err = ex.explore_safe(Q, model='tiny', corpus='pasted', corpus_text=t)
        assert err is None and e.answers[0].title == f'Doc {i}', err
        on_disk = pasted_stores(data)
        assert len(on_disk) <= min(i + 1, getattr(E, 'PASTED_KEEP', 3)), on_disk  # older pastes are deleted, not kept for ever
    # the oldest paste is gone from disk; asked again, it is built again and answers the same
    e, err = ex.explore_safe(Q, model='tiny', corpus='pasted', corpus_text=texts[0])
    assert err is None and e.answers[0].title == 'Doc 0'
    assert stores_under(data/'cache'/'explorer'/'pasted')
    ex.close()
    assert pasted_stores(data) == [] and not any((data/'cache'/'explorer'/'pasted').iterdir())


def test_pasted_stores_are_bounded_in_bytes(data):
    ex = Explorer(profile='smoke', progress=False, fuzzy=False, keep_pasted=10, pasted_bytes=1)  # 1 byte: keep one
    try:
        for i in range(3):
            assert ex.explore_safe(Q, model='tiny', corpus='pasted', corpus_text=f'The bridge {i} crosses the river.')[1] is None
            assert len(pasted_stores(data)) == 1
    finally: ex.close()
    assert pasted_stores(data) == []


def test_an_explorer_that_is_garbage_collected_deletes_its_pastes(data):
    ex = Explorer(profile='smoke', progress=False, fuzzy=False)
    assert ex.explore_safe(Q, model='tiny', corpus='pasted', corpus_text=PASTE)[1] is None and pasted_stores(data)
    del ex; gc.collect()
    assert pasted_stores(data) == []


CHILD = textwrap.dedent("""
    import os, sys
    import npm_nb.run.explorer as E
    from npm_nb.npm.inference import NPM
    from npm_nb.models import load_tokenizer, tiny_encoder
    tok = load_tokenizer('minilm')
    E.register_model(E.ModelEntry('tiny', 'tiny', lambda p, d=None: NPM(tiny_encoder(tok), tok), E.prepare_npm, E.answer_npm))
    ex = E.Explorer(profile='smoke', progress=False, fuzzy=False)
    e, err = ex.explore_safe('The Banpo Bridge crosses the [MASK].', model='tiny', corpus='pasted',
                             corpus_text='The Banpo Bridge crosses the Han River.')
    assert err is None, err
    print('built', flush=True)
    if sys.argv[1] == 'killed': os._exit(0)  # no clean-up runs: as if killed
""")


@pytest.mark.parametrize('how', ['exits', 'killed'])
def test_pastes_of_a_finished_process_do_not_stay(data, how):
    env = {**os.environ, 'NPM_NB_DATA': str(data), 'TOKENIZERS_PARALLELISM': 'false'}
    p = subprocess.run([sys.executable, '-c', CHILD, how], capture_output=True, text=True, env=env, timeout=300,
                       cwd=project_root())
    assert p.returncode == 0 and 'built' in p.stdout, p.stderr[-2000:]
    left = pasted_stores(data)
    if how == 'exits': assert left == [], left  # deleted at exit
    else:
        assert len(left) == 1  # a killed process cannot clean up ...
        live = Explorer(profile='smoke', progress=False, fuzzy=False)  # ... so the next start-up does
        try:
            assert live.explore_safe(Q, model='tiny', corpus='pasted', corpus_text=PASTE)[1] is None
            assert len(pasted_stores(data)) == 1 and left[0] not in pasted_stores(data)
            other = Explorer(profile='smoke', progress=False, fuzzy=False)  # a second explorer spares a live one's pastes
            assert len(pasted_stores(data)) == 1; other.close()
        finally: live.close()


def test_pastes_of_earlier_versions_are_swept(data, tok):
    "Earlier versions kept pastes in the store cache beside the built-in corpora's stores: the start-up removes them."
    m = NPM(tiny_encoder(tok), tok); stores = data/'cache'/'explorer'/'stores'
    m.build_datastore(E.parse_corpus(PASTE), stores/'0123abcd-pasted', remove_stopwords=True, progress=False)
    m.build_datastore(E.FIGURE1_DOCS, stores/'0123abcd-figure1', remove_stopwords=True, progress=False)
    Explorer(profile='smoke', progress=False, fuzzy=False).close()
    assert stores_under(stores) == [stores/'0123abcd-figure1']


# 4. The Host header is checked (DNS rebinding): localhost's names and the bound host, plus --allow-host.

@pytest.mark.parametrize('host, ok', [('localhost', True), ('127.0.0.1:8765', True), ('[::1]:8765', True),
                                      ('LocalHost.:8765', True), ('evil.example', False), ('evil.example:8765', False),
                                      ('127.0.0.1.evil.example', False), ('localhost.evil.example:8765', False),
                                      ('', False), ('a b', False)])
def test_host_header_is_checked(ex, host, ok):
    client = create_app(ex, model='tiny').test_client()
    for r in (client.get('/', headers={'Host': host}),
              client.post('/api/explore', json={'query': Q, 'model': 'tiny', 'k': 16, 'bm25': False}, headers={'Host': host})):
        if ok: assert r.status_code == 200, (host, r.status_code)
        else:
            assert r.status_code == 403, (host, r.status_code)
            assert '--allow-host' in r.get_json()['error']


def test_allow_host_and_the_bound_host(ex):
    app = create_app(ex, model='tiny', host='0.0.0.0', allow_hosts=['explorer.lan'])
    c = app.test_client()
    assert c.get('/', headers={'Host': 'explorer.lan:8765'}).status_code == 200
    assert c.get('/', headers={'Host': '0.0.0.0:8765'}).status_code == 403  # a wildcard bind is no name
    assert c.get('/', headers={'Host': 'evil.example'}).status_code == 403
    c = create_app(ex, model='tiny', host='192.168.1.5').test_client()
    assert c.get('/', headers={'Host': '192.168.1.5:8765'}).status_code == 200
    assert c.get('/', headers={'Host': '192.168.1.6:8765'}).status_code == 403
    import contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit): E.main(['--help'])
    assert '--allow-host' in buf.getvalue()


# 5. A body over the limit is refused (413) without being read.

class Spaces(io.RawIOBase):
    "`n` bytes of spaces, made as they are read; `served` counts the bytes the server read."
    def __init__(self, n): self.n, self.pos, self.served = n, 0, 0
    def readable(self): return True
    def seekable(self): return True
    def tell(self): return self.pos
    def seek(self, off, whence=0): self.pos = {0: off, 1: self.pos + off, 2: self.n + off}[whence]; return self.pos
    def readinto(self, b):
        k = max(0, min(len(b), self.n - self.pos)); b[:k] = b' ' * k; self.pos += k; self.served += k; return k


def test_huge_body_is_refused_unread(ex):
    client = create_app(ex, model='tiny').test_client()
    body = Spaces(100 * 2**20)  # the probe's 100 MB
    r = client.post('/api/explore', input_stream=body, content_type='application/json')
    assert r.status_code == 413, r.status_code
    assert body.served < 2**20, f'the server read {body.served:,} bytes of a body it refuses'
    assert 'bytes' in r.get_json()['error'] and 'npm-error' in r.get_json()['html']
    paste = ('\U0001D538' * 90 + '\n\n') * 200  # under the character limit, 12 bytes a character in escaped JSON
    assert len(paste.strip()) < E.MAX_CORPUS_CHARS and len(paste) * 12 > 200_000
    ok = post(client, query=Q, corpus='pasted', corpus_text=paste)
    assert ok.status_code != 413, ok.get_json()  # a paste within the character limit always fits the body limit


# 6. No message shows an absolute server path.

def test_messages_show_no_absolute_paths(data, monkeypatch):
    roots = [str(project_root()), str(data), str(data.resolve())]
    ex = Explorer(profile='no-such-profile', progress=False, fuzzy=False)
    client = create_app(ex, model='tiny').test_client()
    page = client.get('/').get_data(as_text=True)
    assert 'not trained yet' in page and not any(r in page for r in roots), 'the page shows a server path'
    r = post(client, query=Q, model='npm')
    err = r.get_json()['error']
    assert 'not available' in err and 'data/cache/checkpoints' in err and not any(x in err for x in roots), err
    k = E.register_checkpoint('/srv/secret/models/checkpoint-40', key='test-ckpt')
    try:
        err = post(client, query=Q, model=k).get_json()['error']
        assert '/srv/secret' not in err and 'checkpoint-40' in err, err
    finally: MODELS.pop(k)
    def broken(model, res, query, s): raise FileNotFoundError(2, 'No such file or directory', str(res.ds.path/'vectors.npy'))
    register_model(ModelEntry('broken', 'broken', MODELS['tiny'].load, MODELS['tiny'].prepare, broken))
    try:
        r = post(client, query=Q, model='broken', corpus='figure1')
        err = r.get_json()['error']
        assert r.status_code == 500 and 'vectors.npy' in err and 'data/cache/explorer' in err, (r.status_code, err)
        assert not any(x in err for x in roots) and not any(x in r.get_json()['html'] for x in roots), err
    finally: MODELS.pop('broken')


@pytest.mark.parametrize('message, shown', [
    ('no checkpoint at /srv/secret/models/checkpoint-40 (config.json missing)', 'no checkpoint at …/checkpoint-40 (config.json missing)'),
    ("[Errno 2] No such file or directory: '/home/someone/x.npy'", "[Errno 2] No such file or directory: '…/x.npy'"),
    ('open http://127.0.0.1:8765/ in a browser; 1/2 of great: good | bad', 'open http://127.0.0.1:8765/ in a browser; 1/2 of great: good | bad'),
])
def test_public_message(message, shown):
    assert E.public_message(message) == shown


def test_public_message_under_the_project(data):
    assert E.public_message(f"cannot read {project_root()/'nbs'/'x.ipynb'}.") == 'cannot read nbs/x.ipynb.'
    assert E.public_message(f"store {data/'cache'/'explorer'/'stores'/'ab-cd'} is damaged") == \
        'store data/cache/explorer/stores/ab-cd is damaged'


# 7. Input errors answer 4xx, server errors 500, always with a JSON message.

@pytest.mark.parametrize('body, status, says', [
    ({'query': 'Thessaloniki is a city.'}, 422, 'has no [MASK]'),
    ({'query': '[MASK] is in [MASK].'}, 422, '2 [MASK]s'),
    ({'query': ''}, 422, 'Type a sentence'),
    ({'query': 'word ' * 300 + '[MASK]'}, 413, 'characters long'),
    ({'query': Q, 'k': 'many'}, 422, 'k must be a whole number'),
    ({'query': Q, 'l_max': 99}, 422, 'between 1 and 30'),
    ({'query': Q, 'colour': 'red'}, 422, 'unknown setting'),
    ({'query': Q, 'corpus': 'nope'}, 422, 'Unknown corpus'),
    ({'query': Q, 'model': 'nope'}, 422, 'Unknown model'),
    ({'query': Q, 'corpus': 'pasted', 'corpus_text': '  '}, 422, 'corpus is empty'),
    ({'query': Q, 'corpus': 'pasted', 'corpus_text': 'the of and whoever whatever .'}, 422, 'no words NPM can retrieve'),
    ({'query': Q, 'corpus': 'pasted', 'corpus_text': 'the of and 7 x .'}, 422, 'no word BM25 can index'),  # crashed deep
])
def test_input_errors_answer_4xx(ex, body, status, says):
    client = create_app(ex, model='tiny').test_client()
    r = post(client, **body)
    j = r.get_json()
    assert r.status_code == status and says in j['error'] and 'npm-error' in j['html'], (r.status_code, j)


def test_other_bad_requests_and_server_errors(ex):
    client = create_app(ex, model='tiny').test_client()
    for r, status in [(client.post('/api/explore', data='not json', content_type='text/plain'), 400),
                      (client.post('/api/explore', json=['a', 'list']), 400),
                      (client.get('/api/explore'), 405), (client.get('/nope'), 404)]:
        assert r.status_code == status and r.is_json and r.get_json()['error'], (status, r.status_code, r.get_data()[:200])
    def broken(model, res, query, s): raise RuntimeError('the index went away')
    register_model(ModelEntry('broken', 'broken', MODELS['tiny'].load, MODELS['tiny'].prepare, broken))
    try:
        r = post(client, query=Q, model='broken', corpus='figure1')
        assert r.status_code == 500 and 'RuntimeError' in r.get_json()['error'], (r.status_code, r.get_json())
    finally: MODELS.pop('broken')


# Round three (#38): request fields that are not one value, text that is not Unicode, and `npm-nb serve --allow-host`.

@pytest.mark.parametrize('extra, says', [({'k': [1, 2]}, "'k' must be a string, a number or true/false, not list"),
                                         ({'topn': {}}, "'topn' must be a string, a number or true/false, not dict"),
                                         ({'query': ['a', '[MASK]']}, "'query' must be"),
                                         ({'corpus': 'pasted', 'corpus_text': 'Athens \udcff is in Greece.'}, 'lone surrogate'),
                                         ({'query': 'Athens \ud800 is in [MASK].'}, 'lone surrogate'),
                                         ({'\udcffk': 3}, 'lone surrogate')])
def test_unreadable_request_fields_answer_400(ex, extra, says):
    "They used to be dropped (the defaults answered instead) or to crash deep (500)."
    client = create_app(ex, model='tiny').test_client()
    body = json.dumps({'model': 'tiny', 'bm25': False, 'k': 16, 'query': Q, **extra})  # json escapes a lone surrogate as \udcff
    r = client.post('/api/explore', data=body, content_type='application/json')
    j = r.get_json()
    assert r.status_code == 400 and says in j['error'] and 'npm-error' in j['html'], (r.status_code, j)


def test_serve_has_the_allow_host_its_refusal_names(tok, tmp_path, data):
    "`npm-nb serve --host 0.0.0.0` refuses other names with a message naming --allow-host: serve must accept it."
    from npm_nb.run import cli
    a = cli.parser().parse_args(['serve', 'store', '--host', '0.0.0.0', '--allow-host', 'box.lan', '--allow-host', 'box'])
    assert a.allow_host == ['box.lan', 'box']
    model = tmp_path/'tiny'; tiny_encoder(tok, seed=0).save_pretrained(model); tok.save_pretrained(model)
    NPM(load_encoder(str(model), device='cpu'), tok).build_datastore({'text': ['Athens is the capital of Greece.']},
                                                                     tmp_path/'store', max_len=32, progress=False)
    try:
        c = cli.serve_app(tmp_path/'store', str(model), 'cpu', host='0.0.0.0', allow_hosts=a.allow_host).test_client()
        assert c.get('/', headers={'Host': 'box.lan:8765'}).status_code == 200
        r = c.get('/', headers={'Host': 'evil.example'})
        assert r.status_code == 403 and '--allow-host' in r.get_json()['error']
    finally:
        MODELS.pop('store', None); CORPORA.pop('store', None)


# Issue #53 (RELIABILITY-4 D10): a pasted corpus that is not text, and a body key `self`, were answered 500
# ('AttributeError: 'int' object has no attribute 'strip'', 'TypeError').

@pytest.mark.parametrize('extra, says', [({'corpus': 'pasted', 'corpus_text': 5}, "The pasted corpus must be text"),
                                         ({'corpus': 'pasted', 'corpus_text': True}, "not bool True"),
                                         ({'self': 1}, "unknown setting(s) ['self']"),
                                         ({'explorer': 'x', 'settings': 2}, "unknown setting(s) ['explorer', 'settings']")])
def test_a_paste_that_is_not_text_or_an_unknown_key_answers_422(ex, extra, says):
    client = create_app(ex, model='tiny').test_client()
    r = post(client, query=Q, **extra)
    j = r.get_json()
    assert r.status_code == 422 and says in j['error'] and 'npm-error' in j['html'], (r.status_code, j)
    _, message, status = ex.explore_status(Q, model='tiny', corpus='pasted', corpus_text=5)
    assert status == 422 and 'must be text' in message
