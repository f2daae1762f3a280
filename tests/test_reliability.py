"""Replays the reliability probe (shared/audits/RELIABILITY.md, issue #10) on tiny data, so its cases stay fixed.

Each test is named by what it checks; the comment above it gives the probe's case numbers (or the round that added it:
round two, #28; round three, #38), so it can be traced to the audit. Every SILENT and LOST case is here (it must now
be refused, detected, rebuilt or finished), and so is every DEEP case that now gives a clear error. Tiny random-init
encoders on the MiniLM tokenizer and a handful of documents keep the file fast; nothing needs `data/processed` or a GPU.
"""
import json, os, shutil, signal, subprocess, sys, time, warnings
from pathlib import Path
import numpy as np
import pytest
import torch
from npm_nb.core import hold_lock, LockedError
from npm_nb.models import load_tokenizer, tiny_encoder, load_encoder, write_model_checksums, CHECKSUMS
from npm_nb.data.blocks import build_blocks
from npm_nb.npm.datastore import Datastore
from npm_nb.npm.index import build_index, load_index
from npm_nb.npm.inference import NPM, BM25Retriever
from npm_nb.run.reference import reference_bm25
from npm_nb.npm.training import TrainConfig, train, list_checkpoints, drop_final, is_published
from npm_nb.run.batch import main as batch_main, make_demo_notebook
from conftest import raises

torch.set_num_threads(2)
PY = sys.executable
ENV = {**os.environ, 'PYTHONPATH': str(Path(__file__).resolve().parent.parent)}

DOCS = {'text': ['Thessaloniki is the second largest city in Greece.', 'Athens is the capital of Greece.',
                 'Seoul is the capital of South Korea.', 'The Han River flows through Seoul.'],
        'id': ['d0', 'd1', 'd2', 'd3']}
MORE = {'text': ['The Tiber flows through Rome.'], 'id': ['d4']}
Q = 'Thessaloniki is a city in [MASK].'
VERB = {'greece': ['Greece', 'Athens'], 'korea': ['Korea', 'Seoul']}

def scribble(f, n=4096, byte=None, where=0.5):
    "Overwrite `n` bytes in the middle of `f` (random bytes by default), keeping its size."
    f = Path(f)
    with open(f, 'r+b') as h: h.seek(int(f.stat().st_size * where)); h.write(os.urandom(n) if byte is None else byte * n)

def cut(f, keep=0.5):
    f = Path(f); f.write_bytes(f.read_bytes()[:int(f.stat().st_size * keep)])

# ---------------------------------------------------------------- fixtures: a tokenizer, two encoders, two stores
@pytest.fixture(scope='module')
def tok(): return load_tokenizer('minilm')

@pytest.fixture(scope='module')
def models(tok): return NPM(tiny_encoder(tok, seed=0), tok), NPM(tiny_encoder(tok, seed=1), tok)

@pytest.fixture(scope='module')
def root(tmp_path_factory): return tmp_path_factory.mktemp('rel')

@pytest.fixture(scope='module')
def store(models, root):
    "Store A of the init model (seed 0)."
    return models[0].build_datastore(DOCS, root/'A', max_len=32, progress=False)

@pytest.fixture
def copy(store, tmp_path):
    "A fresh copy of store A (for cases that damage it)."
    return lambda name='copy': Path(shutil.copytree(store.path, tmp_path/name))

# ---------------------------------------------------------------- 1. bad inputs to the API
# cases 1.6-1.8 (and 1.1)
def test_query_with_surrogate_bytes_none_or_no_mask_is_refused(models, store):
    m = models[0]
    raises(lambda: m.predict('Greece is \udcff [MASK].', store), 'not valid text', 'lone surrogate')  # 1.6
    raises(lambda: m.predict(b'Greece is [MASK].', store), 'decode it first', exc=TypeError)  # 1.7
    raises(lambda: m.predict(None, store), 'got NoneType', exc=TypeError)  # 1.8
    raises(lambda: m.predict('no mask', store), 'exactly one [MASK], found 0')  # 1.1 (was clear already)

# cases 1.12, 1.13
def test_empty_batch_gives_empty_results_and_a_bare_string_is_refused(models, store):
    m = models[0]
    assert m.predict_batch([], store) == []  # 1.12
    raises(lambda: m.predict_batch(Q, store), 'list of queries', 'predict(text, ds)', exc=TypeError)  # 1.13
    assert m.closed_set_probs([], store, VERB).shape == (0, 2)

# cases 1.15, 1.18, 1.19, 1.21, 1.22, 1.26
@pytest.mark.parametrize('kw, part', [(dict(topn=-1), 'topn=-1'), (dict(k=-5), 'k=-5'), (dict(k=0), 'k=0'),
                                      (dict(l_max=0), 'l_max=0'), (dict(l_max=-3), 'l_max=-3'),
                                      (dict(temperature=-1), 'temperature=-1'), (dict(temperature=0), 'temperature=0'),
                                      (dict(temperature=float('nan')), 'temperature=nan'),
                                      (dict(alpha=float('nan')), 'alpha=nan')])
def test_predict_refuses_out_of_range_numbers(models, store, kw, part):
    raises(lambda: models[0].predict(Q, store, **kw), part)

# cases 1.23, 1.25
def test_closed_set_refuses_bad_temperature_and_verbalizer_of_strings(models, store):
    m = models[0]
    for T in (-5, 0, float('nan')): raises(lambda: m.closed_set_probs(Q, store, VERB, temperature=T), 'temperature=')  # 1.23
    raises(lambda: m.closed_set_probs(Q, store, {'greece': 'Greece', 'korea': 'Korea'}), "e.g. ['Greece']", exc=TypeError)  # 1.25
    p = m.closed_set_probs(Q, store, VERB)
    assert p.shape == (2,) and 0 <= p.sum() <= 1 + 1e-9
    single = NPM(m.encoder, m.tok, mode='single')
    raises(lambda: single.predict_single(Q, store, topn=-1), 'topn=-1')

# case 1.29
def test_loading_a_folder_that_is_not_a_model_is_refused(tmp_path, store):
    (tmp_path/'notes.txt').write_text('hello')
    raises(lambda: load_encoder(str(tmp_path)), str(tmp_path), 'config.json + model.safetensors')
    raises(lambda: load_encoder(str(store.path)), 'model folder')  # a datastore folder

# cases 1.34, 1.35
def test_documents_with_mismatched_ids_or_non_text_rows_are_refused(models, tmp_path):
    m = models[0]
    raises(lambda: m.build_datastore({'text': ['a b', 'c d'], 'id': ['1']}, tmp_path/'x', progress=False),
           "column 'id' has 1 values")
    raises(lambda: m.build_datastore({'text': [1, 2]}, tmp_path/'y', progress=False), "row 0 is int")

# ---------------------------------------------------------------- 2. mismatches
# case 2.3
def test_store_of_another_encoder_is_refused_and_the_check_is_cheap(models, store):
    trained, ds = models[1], Datastore.load(store.path)  # opened without a model: the old hole
    raises(lambda: trained.predict(Q, ds), 'encoder mismatch')
    raises(lambda: trained.predict_batch([Q], ds), 'encoder mismatch')
    raises(lambda: trained.closed_set_probs(Q, ds, VERB), 'encoder mismatch')
    raises(lambda: NPM(trained.encoder, trained.tok, mode='single').predict_single(Q, ds), 'encoder mismatch')
    # the fingerprint is cached: a check costs microseconds, not a pass over the weights
    t = time.perf_counter()
    for _ in range(100): models[0].predict_batch([], store)
    assert time.perf_counter() - t < 1.0

# cases 2.7, 2.8, 2.11
def test_faiss_index_of_another_or_grown_store_is_refused(models, store, copy, tmp_path):
    m = models[0]
    ix = build_index(store, 'hnsw', progress=False); ix.save(tmp_path/'ixA')  # a FAISS index keeps its vectors (flat is rebuilt from its store)
    other = m.build_datastore({'text': DOCS['text'][:3]}, tmp_path/'B', max_len=32, progress=False)
    raises(lambda: m.predict(Q, other, index=load_index(tmp_path/'ixA')), 'rebuild the index')  # 2.7 (N differs)
    same_n = models[1].build_datastore(DOCS, tmp_path/'A1', max_len=32, progress=False)  # same N, other encoder
    raises(lambda: models[1].predict(Q, same_n, index=load_index(tmp_path/'ixA')), 'encoder', 'rebuild the index')  # 2.8
    grown = Datastore.load(copy('grown'), m.encoder, m.tok).add(MORE, progress=False)
    raises(lambda: m.predict(Q, grown, index=load_index(tmp_path/'ixA')), 'rebuild the index')  # 2.11
    assert m.predict(Q, store, index=load_index(tmp_path/'ixA'), k=8)  # the right store still works

# cases 2.9, 2.10
def test_foreign_bm25_index_is_refused_and_a_stale_cache_rebuilt(models, store, copy):
    m = models[0]
    other = m.build_datastore({'text': DOCS['text'][:3]}, copy('unused').parent/'B', max_len=32, progress=False)
    raises(lambda: m.predict(Q, other, bm25=BM25Retriever(store)), 'BM25 index was built on another datastore')  # 2.9
    p = copy('bm25'); ds = Datastore.load(p, m.encoder, m.tok)
    first = reference_bm25(ds)
    ds.add(MORE, progress=False)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always'); fresh = reference_bm25(ds)  # 2.10: the stale cache is rebuilt
    assert any('rebuilding' in str(x.message) for x in w) and fresh.store == ds.fingerprint != first.store
    assert [x.text for x in m.predict('The Tiber flows through [MASK].', ds, bm25=fresh, topn=50)]
    assert len(fresh.retrieve('Tiber Rome', 1)) == 1

# case 2.5
def test_store_opened_with_another_tokenizer_is_refused(models, store, tok):
    t2 = load_tokenizer('minilm'); t2.add_tokens(['zzqx'])
    raises(lambda: Datastore.load(store.path, tok=t2), 'tokenizer mismatch')

# ---------------------------------------------------------------- 3. corruption
# cases 3.2, 3.3
@pytest.mark.parametrize('how', ['random', 'nan', 'zeros'])
def test_damaged_vectors_are_detected_on_open(copy, how):
    p = copy(how); f = p/'vectors.f16'
    if how == 'zeros': f.write_bytes(b'\0' * f.stat().st_size)
    else: scribble(f, 256, None if how == 'random' else b'\xff')
    raises(lambda: Datastore.load(p), 'changed since they were written', 'build it again')
    assert len(Datastore.load(p, verify=False))  # skipping the check is possible, on request

# cases 3.1, 3.5-3.13
def test_damaged_or_missing_store_files_are_named_on_open(copy):
    def edit(p, f): m = json.loads((p/'manifest.json').read_text()); f(m); (p/'manifest.json').write_text(json.dumps(m))
    p = copy('v1'); cut(p/'vectors.f16', 0.5); raises(lambda: Datastore.load(p), 'truncated or missing')  # 3.1
    p = copy('v2'); (p/'vectors.f16').unlink(); raises(lambda: Datastore.load(p, verify=False), 'truncated or missing')
    p = copy('m1'); cut(p/'manifest.json', 0.3); raises(lambda: Datastore.load(p), 'manifest.json is damaged')  # 3.5
    p = copy('m2'); (p/'manifest.json').write_text(''); raises(lambda: Datastore.load(p), 'manifest.json is damaged')
    p = copy('m3'); edit(p, lambda m: m.pop('hidden')); raises(lambda: Datastore.load(p), "lacks ['hidden']")  # 3.7
    p = copy('m4'); edit(p, lambda m: m['shape'].__setitem__(0, m['shape'][0] - 10))
    raises(lambda: Datastore.load(p, verify=False), 'is inconsistent')  # 3.8
    p = copy('m5'); edit(p, lambda m: m.__setitem__('generation', 7)); raises(lambda: Datastore.load(p), 'meta-7 lacks')  # 3.9
    p = copy('m6'); (p/'meta-1'/'rows.npz').unlink(); raises(lambda: Datastore.load(p), 'lacks rows.npz')
    p = copy('m7'); shutil.rmtree(p/'meta-1'); raises(lambda: Datastore.load(p), 'meta-1 lacks')
    p = copy('m8'); cut(p/'meta-1'/'rows.npz'); raises(lambda: Datastore.load(p), 'rows.npz (content changed)')  # 3.10
    raises(lambda: Datastore.load(p, verify=False), 'cannot read meta-1')
    for sub in ('blocks', 'docs'):  # 3.11
        p = copy(f'm9{sub}'); shutil.rmtree(p/'meta-1'/sub); raises(lambda: Datastore.load(p), f'lacks {sub}')
    arrow = lambda p, sub: next((p/'meta-1'/sub).glob('*.arrow'))
    p = copy('m10'); scribble(arrow(p, 'docs'), 64); raises(lambda: Datastore.load(p), 'content changed')  # 3.12
    p = copy('m11'); cut(arrow(p, 'docs')); raises(lambda: Datastore.load(p), 'content changed')
    p = copy('m12'); scribble(arrow(p, 'blocks'), 64); raises(lambda: Datastore.load(p), 'content changed')  # 3.13

# cases 3.14, 3.15
def test_damaged_bm25_cache_is_named_and_rebuilt(models, copy):
    m = models[0]
    for k, damage in enumerate([lambda b: cut(b/'vocab.index.json', 0.5), lambda b: (b/'params.index.json').write_text(''),
                                lambda b: cut(next(b.glob('*.npy')), 0.5), lambda b: (b/'n_blocks.txt').unlink(),
                                lambda b: scribble(next(b.glob('*.npy')), 8), lambda b: (b/'n_blocks.txt').write_text('1')]):
        p = copy(f'b{k}'); ds = Datastore.load(p, m.encoder, m.tok); good = reference_bm25(ds)
        damage(p/'bm25')
        raises(lambda: BM25Retriever.load(p/'bm25'), 'BM25 index')  # a clear error naming the folder
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always'); again = reference_bm25(ds)  # the cache is rebuilt
        assert any('damaged' in str(x.message) for x in w)
        assert again.retrieve('capital Greece', 3).tolist() == good.retrieve('capital Greece', 3).tolist()

# case 3.17
def test_damaged_faiss_index_files_are_refused(store, tmp_path):
    build_index(store, 'hnsw', progress=False).save(tmp_path/'ix')
    for k, damage in enumerate([lambda d: cut(d/'index.faiss', 0.4), lambda d: (d/'index.faiss').unlink(),
                                lambda d: (d/'index.json').write_text(''), lambda d: scribble(d/'index.faiss', 16)]):
        d = Path(shutil.copytree(tmp_path/'ix', tmp_path/f'ix{k}')); damage(d)
        raises(lambda: load_index(d), 'index', 'build the index again')

# ---------------------------------------------------------------- checkpoints (3.18-3.25, 4.8, 6.4)
TOY = ["Thessaloniki is the second largest city in Greece. The port of Thessaloniki is on the Thermaic Gulf.",
       "Athens is the capital of Greece. The port of Piraeus serves Athens and the islands of the Aegean Sea.",
       "Patras is the third largest city in Greece. The port of Patras links Greece to Italy across the Ionian Sea.",
       "Heraklion is the largest city on Crete. The port of Heraklion is the main gate to the island of Crete.",
       "Larissa is the capital of Thessaly. The river Pineios flows through the city of Larissa in central Greece.",
       "Volos is a port city in Thessaly. The port of Volos is on the Pagasetic Gulf of the Aegean Sea."]

def cfg(d, **kw):
    return TrainConfig(**{**dict(objective='npm', model='tiny', corpora=('toy',), batch_size=2, steps=4, warmup=1, lr=1e-3,
                                 heldout=0.0, log_every=1, save_every=1, keep_last=3, out_dir=str(d)), **kw})

@pytest.fixture(scope='module')
def run(tok, root):
    "A clean 4-step run (checkpoints 2, 3, 4) and the blocks it trained on."
    blocks = build_blocks({'text': TOY}, tok, max_len=32, source='toy', progress=False)
    fin = train(cfg(root/'run'), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False)
    return fin, blocks

def resume_after(damage, run, tok, tmp_path):
    "Copy the run, drop its final checkpoint, damage the newest remaining one, resume; the warnings and final weights."
    fin, blocks = run
    d = Path(shutil.copytree(fin.parent, tmp_path/'r', symlinks=True))
    shutil.rmtree(d/'checkpoint-4'); drop_final(d)
    damage(d/'checkpoint-3')
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        out = train(cfg(d), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False)
    return [str(x.message) for x in w], out

def same_weights(a, b):
    from safetensors.torch import load_file
    x, y = load_file(Path(a)/'model.safetensors'), load_file(Path(b)/'model.safetensors')
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)

# cases 3.23-3.25
@pytest.mark.parametrize('case, damage', [
    ('3.24 weights scribbled', lambda c: scribble(c/'model.safetensors', 4096)),
    ('3.23 trainer state cut', lambda c: cut(c/'trainer_state.pt', 0.5)),
    ('3.25 weights cut', lambda c: cut(c/'model.safetensors', 0.5)),
    ('3.25 config deleted', lambda c: (c/'train_config.json').unlink())])
def test_resume_falls_back_past_a_damaged_checkpoint(run, tok, tmp_path, case, damage):
    msgs, out = resume_after(damage, run, tok, tmp_path)
    assert any('checkpoint-3' in m and 'resuming from checkpoint-2 instead' in m for m in msgs), msgs
    assert same_weights(out, run[0]), 'resumed from the intact checkpoint: the weights of the clean run'

# case 3.24
def test_resume_without_an_intact_checkpoint_is_refused_until_no_resume(run, tok, tmp_path):
    fin, blocks = run
    d = Path(shutil.copytree(fin.parent, tmp_path/'r', symlinks=True)); drop_final(d)
    for c in list_checkpoints(d): scribble(c/'model.safetensors', 4096)
    for _ in range(2):  # refused each time (nothing is set aside), until told to start over
        raises(lambda: train(cfg(d), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False),
               'no intact checkpoint', '--no-resume')
    assert same_weights(train(cfg(d), resume=False, model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False), fin)

# case 3.23
def test_resume_falls_back_past_a_damaged_checkpoint_without_checksums(run, tok, tmp_path):
    def damage(c): (c/CHECKSUMS).unlink(); cut(c/'trainer_state.pt', 0.5)
    msgs, out = resume_after(damage, run, tok, tmp_path)
    assert any('resuming from checkpoint-2' in m for m in msgs) and same_weights(out, run[0])

# cases 3.18-3.22
def test_loading_a_damaged_checkpoint_is_refused(run, tmp_path):
    fin = run[0]
    def bad(name, damage, *parts):
        d = Path(shutil.copytree(fin, tmp_path/name)); damage(d)
        raises(lambda: NPM.from_pretrained(str(d), device='cpu'), *parts)
    bad('cut', lambda d: cut(d/'model.safetensors', 0.5), 'model.safetensors (content changed)')  # 3.18
    bad('hdr', lambda d: scribble(d/'model.safetensors', 8, where=0.0), 'model.safetensors (content changed)')
    bad('rot', lambda d: scribble(d/'model.safetensors', 4096), 'model.safetensors (content changed)')  # 3.19
    bad('notok', lambda d: (d/'tokenizer.json').unlink(), 'tokenizer.json (missing)')  # 3.21
    bad('cuttok', lambda d: cut(d/'tokenizer.json', 0.5), 'tokenizer.json (content changed)')  # 3.22
    # without checksums.json (a folder copied by hand): still refused, by the vocabulary size and the parser
    bad('notok2', lambda d: ((d/CHECKSUMS).unlink(), (d/'tokenizer.json').unlink()), 'only 5 tokens', 'tokenizer.json')
    bad('cuttok2', lambda d: ((d/CHECKSUMS).unlink(), cut(d/'tokenizer.json', 0.5)), 'tokenizer files', 'damaged')
    bad('cut2', lambda d: ((d/CHECKSUMS).unlink(), cut(d/'model.safetensors', 0.5)), str(tmp_path/'cut2'))
    def nan_weights(d):
        from safetensors.torch import load_file, save_file
        w = load_file(d/'model.safetensors'); k = next(iter(w)); w[k].view(-1)[0] = float('nan'); save_file(w, d/'model.safetensors')
        (d/CHECKSUMS).unlink()
    bad('nan', nan_weights, 'NaN')

# cases 4.8, 6.4
def test_checkpoint_folder_drops_dead_writers_files_and_refuses_a_second_trainer(run, tok, tmp_path):
    fin, blocks = run
    d = Path(shutil.copytree(fin.parent, tmp_path/'r', symlinks=True))
    (d/'.tmp-checkpoint-5-4194000').mkdir(); (d/'.old-checkpoint-2-4194001').mkdir()  # left by dead writers (4.8)
    list_checkpoints(d)
    assert not list(d.glob('.tmp-*')) and not list(d.glob('.old-*'))
    holder = subprocess.Popen([PY, '-c', f"from npm_nb.core import hold_lock\nimport time\n"
                               f"with hold_lock({str(d)!r}, 'checkpoint folder'): print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == 'held'
        raises(lambda: train(cfg(d, steps=6), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False),
               'being written by pid', exc=LockedError)  # 6.4: a second trainer fails at once
    finally: holder.kill(); holder.wait()
    lines = [json.loads(l)['step'] for l in (d/'metrics.jsonl').read_text().splitlines()]
    assert lines == [1, 2, 3, 4], 'nothing logged twice'

# case 2.12
def test_resume_with_a_changed_setting_names_it_and_the_no_resume_flag(run, tok):
    fin, blocks = run
    raises(lambda: train(cfg(fin.parent, lr=5e-4), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False),
           "'lr'", '--no-resume')

# ---------------------------------------------------------------- 4. interruption of datastore commits
# case 4.2
def test_unfinished_build_refuses_to_open_until_continued(models, tmp_path):
    class Stop(torch.nn.Module):
        def __init__(s, m): super().__init__(); s.m, s.calls, s.config = m, 0, m.config
        def forward(s, **kw):
            if s.calls >= 1: raise KeyboardInterrupt
            s.calls += 1; return s.m(**kw)
        def state_dict(s, *a, **k): return s.m.state_dict(*a, **k)
    m = models[0]
    with pytest.raises(KeyboardInterrupt):
        Datastore.build(DOCS, Stop(m.encoder), m.tok, tmp_path/'u', max_len=16, batch_size=1, progress=False)
    raises(lambda: Datastore.load(tmp_path/'u'), 'unfinished build (1 of', 'continue it')
    ds = Datastore.build(DOCS, m.encoder, m.tok, tmp_path/'u', max_len=16, batch_size=1, progress=False)
    assert ds.manifest['n_docs'] == 4

class Killed(BaseException):
    "Stands for a kill -9 at that instant: nothing after it runs (it is no Exception, so nothing catches it)."

# cases 4.3, 4.5
def test_crash_inside_a_commit_is_finished_by_the_next_call(models, store, tmp_path, monkeypatch):
    import npm_nb.npm.datastore as d
    m, p, write = models[0], tmp_path/'c', d.atomic_write_json
    def crash_at(generation):
        def boom(path, obj, *a, **k):  # the probe's injection point: just before the manifest names the new part
            if Path(path).name == 'manifest.json' and obj.get('generation') == generation: raise Killed()
            return write(path, obj, *a, **k)
        monkeypatch.setattr(d, 'atomic_write_json', boom)
    crash_at(1)
    with pytest.raises(Killed): m.build_datastore(DOCS, p, max_len=32, progress=False)
    assert (p/'pending'/'commit.json').exists() and not (p/'pending'/'vectors.tmp').exists()  # the stuck window of D4
    monkeypatch.setattr(d, 'atomic_write_json', write)
    ds = m.build_datastore(DOCS, p, max_len=32, progress=False)  # 4.3: used to fail forever on vectors.tmp
    assert np.array_equal(np.asarray(ds.vectors), np.asarray(store.vectors)) and not (p/'pending').exists()
    crash_at(2)
    with pytest.raises(Killed): ds.add(MORE, progress=False)
    monkeypatch.setattr(d, 'atomic_write_json', write)
    back = Datastore.load(p)  # 4.5: the next load finishes the add
    assert back.doc_ids == DOCS['id'] + MORE['id'] and not (p/'pending').exists()
    assert len(back) == len(Datastore.load(p, m.encoder, m.tok).add(MORE, progress=False))  # and it is not added twice

# case 4.6
def test_adding_the_same_documents_twice_adds_them_once(models, copy):
    m = models[0]
    ds = Datastore.load(copy('twice'), m.encoder, m.tok)
    ds.add(MORE, progress=False); n = len(ds)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always'); ds.add(MORE, progress=False)
    assert len(ds) == n and ds.manifest['n_docs'] == 5 and 'nothing to do' in str(w[-1].message)
    no_ids = {'text': ['Kavala is a port city.']}
    ds.add(no_ids, progress=False); ds.add(no_ids, progress=False)  # without ids: the same documents again
    assert ds.manifest['n_docs'] == 6
    raises(lambda: ds.add({'text': ['Another text.'], 'id': ['d1']}, progress=False), "ids ['d1'] are already in")

# ---------------------------------------------------------------- 5. batch runner and CLIs
@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.setenv('NPM_NB_RESULTS', str(tmp_path/'results')); monkeypatch.setenv('NPM_NB_DATA', str(tmp_path/'data'))
    ex, pa = tmp_path/'ex', tmp_path/'params'; pa.mkdir()
    make_demo_notebook(ex/'01_a.ipynb', "profile: str = 'smoke'  # profile\nsteps: int = 5  # steps [>= 1]\n"
                       "tasks: str = 'mr'  # tasks [one of: npm_nb.data.tasks.TASKS]\n", 'import time\ntime.sleep(60)')
    (pa/'base.yaml').write_text('notebooks:\n  01_a: {}\n'); (pa/'tiny.yaml').write_text('params: {}\n')
    return dict(ex=ex, pa=pa, res=tmp_path/'results', data=tmp_path/'data',
                cli=['--params-dir', str(pa), '--experiments-dir', str(ex)])

# cases 5.5-5.7
def test_dry_run_refuses_bad_values_invalid_yaml_and_a_notebook_list(ws, capsys):
    assert batch_main(['tiny', '--dry-run', '-p', '01_a.steps', '-3'] + ws['cli']) == 2  # 5.5
    assert 'it must be >= 1' in capsys.readouterr().err
    assert batch_main(['tiny', '--dry-run', '-p', '01_a.tasks', 'mr,nosuchtask'] + ws['cli']) == 2
    assert "'nosuchtask' is not one of the allowed values" in capsys.readouterr().err
    (ws['pa']/'bad.yaml').write_text('notebooks:\n  01_a: {params: {steps: 2}\n')
    assert batch_main(['bad', '--dry-run'] + ws['cli']) == 2 and 'is not valid YAML (line' in capsys.readouterr().err  # 5.6
    (ws['pa']/'lst.yaml').write_text('notebooks:\n  - 01_a\n')
    assert batch_main(['lst', '--dry-run'] + ws['cli']) == 2 and '`notebooks:` must be a mapping' in capsys.readouterr().err  # 5.7

# case 5.5
def test_real_notebooks_declare_rules_for_the_probed_parameters(capsys):
    "The real notebooks declare allowed values for the parameters the probe broke."
    assert batch_main(['smoke', '--dry-run', '-p', '01_train.steps', '-3']) == 2
    assert 'it must be >= 1' in capsys.readouterr().err
    assert batch_main(['smoke', '--dry-run', '-p', '04_closed_set.tasks', 'mr,nosuchtask']) == 2
    assert 'nosuchtask' in capsys.readouterr().err
    assert batch_main(['smoke', '--dry-run', '-p', 'device', 'cuda:99']) == 2
    assert "parameter 'device' = 'cuda:99' is not allowed" in capsys.readouterr().err
    assert batch_main(['smoke', '--dry-run', '-p', '01_train.lr', '.nan']) == 2

# case 5.11
def test_cut_short_status_file_is_named_with_the_new_flag(ws, capsys):
    run = ws['res']/'runs'/'tiny'/'20260101-000000'; run.mkdir(parents=True); (run/'status.json').write_text('{"steps": {')
    assert batch_main(['tiny'] + ws['cli']) != 0
    assert 'status.json is damaged' in (err := capsys.readouterr().err) and '--new' in err

# case 5.9
def test_tables_of_a_failed_step_are_marked_partial(ws):
    "A step that fails after writing a table: the results page says the table is partial (D12)."
    from npm_nb.run.batch import run_batch
    make_demo_notebook(ws['ex']/'02_half.ipynb', "profile: str = 'smoke'  # profile\n",
                       "import pandas as pd\nfrom npm_nb.run.batch import write_table\n"
                       "write_table('02_half', pd.DataFrame({'acc': [1.0]}), title='Half done', profile=profile)\n"
                       "# ---\nraise RuntimeError('died after its first table')")
    (ws['pa']/'half.yaml').write_text('notebooks:\n  01_a: {enabled: false}\n  02_half: {}\n')
    st = run_batch('half', params_folder=ws['pa'], experiments_folder=ws['ex'], echo=lambda *a: None)
    assert st['steps']['02_half']['state'] == 'failed'
    assert 'partial: written by step 02_half before it failed' in (Path(st['run_dir'])/'README.md').read_text()  # not the committed profile: its run folder's page

# case 5.13
def test_module_clis_print_help_and_exit_zero(capsys):
    from npm_nb.data import fetch, corpora, tasks; from npm_nb.npm import training
    for mod in (fetch, corpora, tasks, training):
        with pytest.raises(SystemExit) as e: mod.main(['--help'])
        assert e.value.code == 0 and 'usage: ' in capsys.readouterr().out

# case 5.14
def test_training_cli_error_is_one_line(capsys):
    from npm_nb.npm.training import main as train_main
    with pytest.raises(SystemExit) as e: train_main(['--objective', 'foo'])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith("error: objective='foo'") and len(err.splitlines()) == 1

# case 6.2
def test_second_runner_of_a_profile_on_the_same_data_is_refused(ws, capsys):
    "Two runners of one profile with different results folders share its checkpoints and datastores: refused."
    lock = ws['data']/'cache'/'batch-locks'/'tiny'
    holder = subprocess.Popen([PY, '-c', f"from npm_nb.core import hold_lock\nimport time\n"
                               f"with hold_lock({str(lock)!r}, 'x'): print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == 'held'
        assert batch_main(['tiny'] + ws['cli']) == 2
        assert 'its checkpoints and datastores' in capsys.readouterr().err
    finally: holder.kill(); holder.wait()

# case 4.10
def test_sigterm_stops_the_runner_cleanly_and_resumably(ws):
    "SIGTERM to the runner mid-step: rc 130, a resumable run, and no ZMQ traceback on the terminal."
    env = {**ENV, 'NPM_NB_RESULTS': str(ws['res']), 'NPM_NB_DATA': str(ws['data'])}
    p = subprocess.Popen([PY, '-u', '-m', 'npm_nb.run.batch', 'tiny'] + ws['cli'], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().startswith('New run')
        assert next(l for l in p.stdout if not l.startswith('Profile ')).startswith('[run ] 01_a')  # after the note that results/ is left alone
        time.sleep(2)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None: p.kill()
    assert p.returncode == 130 and 'interrupted: run the same command again to resume' in err
    assert 'Traceback' not in err and 'ZMQError' not in err, err  # the kernel's noise goes to the run's logs/
    assert '[STOP] 01_a' in out
    run = next(d for d in (ws['res']/'runs'/'tiny').iterdir() if d.is_dir())
    assert json.loads((run/'status.json').read_text())['steps']['01_a']['state'] == 'interrupted'

# ---------------------------------------------------------------- 6. concurrency of datastore writers
# case 6.3
def test_second_build_of_a_locked_store_is_refused(models, tmp_path):
    m, p = models[0], tmp_path/'conc'
    holder = subprocess.Popen([PY, '-c', f"from npm_nb.core import hold_lock\nimport time\n"
                               f"with hold_lock({str(p)!r}, 'datastore'): print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == 'held'
        raises(lambda: m.build_datastore(DOCS, p, max_len=32, progress=False), 'datastore', 'being written by pid',
               exc=LockedError)
    finally: holder.kill(); holder.wait()
    assert len(m.build_datastore(DOCS, p, max_len=32, progress=False))

# ================================================================ round two (issue #28): classes the first probe missed
# ---------------------------------------------------------------- code in files: trainer states load as plain values only
class Planted:
    "Unpickling this creates the folder `path`: what a planted trainer state would do on resume."
    def __init__(self, path): self.path = str(path)
    def __reduce__(self): return (os.mkdir, (self.path,))

# round two (#28), case 1
def test_planted_trainer_state_does_not_run_on_resume(run, tok, tmp_path):
    fin, blocks = run
    d = Path(shutil.copytree(fin.parent, tmp_path/'r', symlinks=True))
    shutil.rmtree(d/'checkpoint-4'); drop_final(d)
    c3, marker = d/'checkpoint-3', tmp_path/'PWNED'
    st = torch.load(c3/'trainer_state.pt', weights_only=True)
    torch.save({**st, 'extra': Planted(marker)}, c3/'trainer_state.pt')
    write_model_checksums(c3)  # the planter rewrites the checksums too, so the file passes the integrity check
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        out = train(cfg(d), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False)
    assert not marker.exists(), 'the planted object ran'
    msgs = [str(x.message) for x in w]
    assert any('not loaded' in m and 'resuming from checkpoint-2' in m for m in msgs), msgs
    assert same_weights(out, fin)

# round two (#28), case 1
@pytest.mark.parametrize('module, fn', [('npm_nb.baselines.replug', 'lsr_state'), ('npm_nb.baselines.realm_pretraining', 'check_realm_resume')])
def test_replug_and_realm_trainer_states_refuse_pickles(tmp_path, module, fn):
    import importlib
    marker = tmp_path/'PWNED'
    torch.save({'step': 1, 'data_fingerprint': 'x', 'extra': Planted(marker)}, tmp_path/'trainer_state.pt')
    f = getattr(importlib.import_module(module), fn)
    call = (lambda: f(tmp_path)) if fn == 'lsr_state' else (lambda: f(tmp_path, None, 'x'))
    raises(call, 'not loaded', 'could run code')
    assert not marker.exists()

# round two (#28), case 1
def test_checkpoint_export_refuses_a_pickled_trainer_state(run, tmp_path):
    from npm_nb.run.bundle import export_checkpoint
    d = Path(shutil.copytree(run[0].resolve(), tmp_path/'ck')); marker = tmp_path/'PWNED'
    st = torch.load(d/'trainer_state.pt', weights_only=True)
    torch.save({**st, 'extra': Planted(marker)}, d/'trainer_state.pt')
    raises(lambda: export_checkpoint(d, tmp_path/'out.tar.xz'), 'not loaded')
    assert not marker.exists()

# ---------------------------------------------------------------- a crash between the last checkpoint and `final`
# round two (#28), case 2
def test_npm_training_links_a_missing_final_on_the_next_call(run, tok, tmp_path):
    fin, blocks = run
    d = Path(shutil.copytree(fin.parent, tmp_path/'r', symlinks=True)); drop_final(d)  # the crash point
    out = train(cfg(d), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False)
    assert out.exists() and is_published(out, d/'checkpoint-4'), out
    assert same_weights(out, fin)

def file_digests(d):
    "sha256 of every file under folder `d`, by relative path (weights, configs, trainer state)."
    import hashlib
    d = Path(d)
    return {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob('*')) if p.is_file()}

def finished_then_relinked(out, again):
    "Unlink `out/final` of a finished run, call `again()`; check it relinks the last checkpoint and trains nothing."
    cks = [p.name for p in list_checkpoints(out)]
    assert len(cks) == 2 and is_published(out/'final', out/cks[-1]), cks
    before = file_digests(out/cks[-1])
    drop_final(out)  # the crash point: after the last checkpoint, before `final`
    got = Path(again())
    assert got.exists() and is_published(got, out/cks[-1]), got
    assert (out/'final').exists() and is_published(out/'final', out/cks[-1])
    assert [p.name for p in list_checkpoints(out)] == cks, 'a checkpoint was written or removed'
    assert file_digests(out/cks[-1]) == before, 'the last checkpoint changed'

# round two (#28), case 2
def test_replug_training_links_a_missing_final_without_training(tok, tmp_path):
    from npm_nb.baselines.replug import DenseRetriever, LSRConfig, train_lsr
    from npm_nb.baselines.lm import CausalLM, tiny_causal_lm
    ps = [dict(id=i, doc_id=i, title='', text=t) for i, t in zip(DOCS['id'], DOCS['text'])]
    qs = [('Athens is', ' the capital of Greece.'), ('Seoul is', ' the capital of South Korea.')]
    lm = CausalLM(tiny_causal_lm(tok, hidden=16, layers=1), tok, start_token='[CLS]', batch_size=4)
    c = LSRConfig(steps=2, batch_size=2, k=2, lr=1e-3, reembed_every=100, save_every=1, keep_last=2, warmup_ratio=0.0,
                  out_dir=str(tmp_path/'lsr'), device='cpu')
    retriever = lambda: DenseRetriever(tiny_encoder(tok, hidden=16, layers=1, seed=1), tok, max_len=32)
    train_lsr(c, retriever(), lm, ps, qs, progress=False)
    finished_then_relinked(tmp_path/'lsr', lambda: train_lsr(c, retriever(), lm, ps, qs, progress=False))

# round two (#28), case 2
def test_realm_training_links_a_missing_final_without_training(tok, tmp_path):
    from npm_nb.baselines.realm import REALM, Retriever, chunk_documents
    from npm_nb.baselines.realm_pretraining import RealmConfig, realm_examples, train_realm
    chunks = chunk_documents({'text': TOY, 'title': [t.split()[0] for t in TOY]}, tok, chunk_len=24)
    ex = realm_examples(chunks, tok, 2, tagger='regex')
    def model():
        torch.manual_seed(0)
        return REALM(Retriever(tiny_encoder(tok, hidden=16, layers=1)), tiny_encoder(tok, hidden=16, layers=1, masked_lm=True), tok)
    c = RealmConfig(steps=2, batch_size=1, k=2, lr=1e-3, warmup=1, refresh='none', save_every=1, keep_last=2,
                    out_dir=str(tmp_path/'realm'), device='cpu')
    train_realm(c, ex, chunks, model(), progress=False)
    finished_then_relinked(tmp_path/'realm', lambda: train_realm(c, ex, chunks, model(), progress=False))

# ---------------------------------------------------------------- what loads as an NPM encoder
# round two (#28), case 9
def test_causal_and_seq2seq_model_folders_are_refused(tok, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration
    LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)).save_pretrained(tmp_path/'llama')
    T5ForConditionalGeneration(T5Config(vocab_size=len(tok), d_model=16, d_kv=8, d_ff=32, num_layers=1,
                                        num_heads=2)).save_pretrained(tmp_path/'t5')
    tok.save_pretrained(tmp_path/'llama'); tok.save_pretrained(tmp_path/'t5')
    for name, why in (('llama', 'a decoder (causal LM)'), ('t5', 'an encoder-decoder model')):
        raises(lambda: NPM.from_pretrained(str(tmp_path/name)), why, 'bidirectional encoder')

# round two (#28), case 9
def test_tokenizer_of_another_model_is_refused(tok):
    from transformers import BertTokenizerFast
    special = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
    other = BertTokenizerFast(vocab={**{t: i for i, t in enumerate(special)}, **{f'w{i}': i + 5 for i in range(len(tok) - 2_000)}})
    raises(lambda: NPM(tiny_encoder(tok), other), 'come from different models')
    shifted = BertTokenizerFast(vocab={**{f'w{i}': i for i in range(len(tok) - 5)},
                                       **{t: len(tok) - 5 + i for i, t in enumerate(special)}})  # same size, [PAD] elsewhere
    raises(lambda: NPM(tiny_encoder(tok), shifted), 'pads with id')

# ---------------------------------------------------------------- numbers that used to commit garbage or crash FAISS
# round two (#28), case 3
@pytest.mark.parametrize('bs', [-1, 0, 2.5])
def test_bad_batch_size_is_refused_and_commits_nothing(models, tmp_path, bs):
    m = models[0]
    raises(lambda: m.build_datastore(DOCS, tmp_path/'z', max_len=32, batch_size=bs, progress=False), f'batch_size={bs!r}')
    assert not (tmp_path/'z'/'manifest.json').exists() or not json.loads((tmp_path/'z'/'manifest.json').read_text())['parts']
    ds = m.build_datastore(DOCS, tmp_path/'z', max_len=32, progress=False)  # a correct build afterwards really encodes
    assert np.abs(np.asarray(ds.vectors, dtype=np.float32)).sum(1).min() > 0, 'an all-zero row was committed'

# round two (#28), case 3
def test_store_never_commits_unencoded_blocks(models, tmp_path, monkeypatch):
    import npm_nb.npm.datastore as d
    monkeypatch.setattr(d, '_encode_pending', lambda *a, **k: None)  # an encoder loop that wrote nothing
    raises(lambda: models[0].build_datastore(DOCS, tmp_path/'z', max_len=32, progress=False), 'nothing was committed')

# round two (#28), case 4
@pytest.mark.parametrize('kw, part', [(dict(kind='ivfpq', nlist=0, m=8), 'nlist=0'), (dict(kind='hnsw', hnsw_m=0), 'hnsw_m=0'),
                                      (dict(kind='flat', chunk=-1), 'chunk=-1'), (dict(kind='hnsw', hnsw_m=1), 'hnsw_m=1'),
                                      (dict(kind='ivfpq', m=5), 'must divide'), (dict(kind='ivfpq', m=8, nbits=40), 'nbits=40')])
def test_bad_index_parameters_are_refused_before_faiss(kw, part):
    # in a child process: before the fix these crashed the interpreter (nlist=0 segfault, hnsw_m=0 abort)
    code = (f"import numpy as np\nfrom npm_nb.npm.index import build_index\nX = np.random.default_rng(0).normal(size=(300, 32)).astype(np.float16)\n"
            f"try: build_index(X, progress=False, **{kw!r})\nexcept ValueError as e: print('CLEAR', e)\nelse: print('BUILT')")
    r = subprocess.run([PY, '-c', code], capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 0 and 'CLEAR' in r.stdout and part in r.stdout, (r.returncode, r.stdout, r.stderr[-500:])

# ---------------------------------------------------------------- full and read-only disks
# round two (#28), case 6
def test_full_disk_is_refused_before_encoding(models, tmp_path, monkeypatch):
    import npm_nb.core as s
    monkeypatch.setattr(s, 'free_bytes', lambda folder: 1 << 20)  # 1 MiB free
    msg = raises(lambda: models[0].build_datastore(DOCS, tmp_path/'full', max_len=32, progress=False), 'not enough disk space')
    assert 'MiB are free' in msg
    monkeypatch.undo()
    assert len(models[0].build_datastore(DOCS, tmp_path/'full', max_len=32, progress=False))  # room again: it builds

# round two (#28), case 6
def test_disk_filling_between_check_and_allocation_is_named(tmp_path, monkeypatch):
    "The free-space check passes, then the disk fills before the file is allocated: still a clear error, not a Bus error later."
    import errno
    import npm_nb.core as s
    def full(fd, offset, length): raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(s.os, 'posix_fallocate', full)
    raises(lambda: s.reserve_space(tmp_path/'v.bin', 1 << 20), 'is full', 'v.bin needs 1.0 MiB', 'free some space', exc=OSError)
    def unsupported(fd, offset, length): raise OSError(errno.EOPNOTSUPP, 'Operation not supported')
    monkeypatch.setattr(s.os, 'posix_fallocate', unsupported)   # a file system without fallocate: the size, as before
    assert s.reserve_space(tmp_path/'w.bin', 1 << 20).stat().st_size == 1 << 20

# round two (#28), case 7
def test_unfinishable_commit_does_not_block_readers(models, store, tmp_path, monkeypatch):
    import npm_nb.npm.datastore as d
    m, p, write = models[0], tmp_path/'ro', d.atomic_write_json
    ds = m.build_datastore(DOCS, p, max_len=32, progress=False); n0 = len(ds)
    def boom(path, obj, *a, **k):  # killed just before the manifest of generation 2 is written
        if Path(path).name == 'manifest.json' and obj.get('generation') == 2: raise Killed()
        return write(path, obj, *a, **k)
    monkeypatch.setattr(d, 'atomic_write_json', boom)
    with pytest.raises(Killed): ds.add(MORE, progress=False)
    monkeypatch.setattr(d, 'atomic_write_json', write)
    def full(*a, **k): raise OSError(28, 'No space left on device')
    monkeypatch.setattr(d, '_finish_commit', full)  # the disk is now full (or read-only): the commit cannot finish
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always'); back = Datastore.load(p)
    assert len(back) == n0 and back.doc_ids == DOCS['id'], 'the intact previous version is read'
    assert any('could not be finished' in str(x.message) for x in w)
    monkeypatch.undo()
    assert Datastore.load(p).doc_ids == DOCS['id'] + MORE['id']  # with room again, the next open finishes the add

# ---------------------------------------------------------------- documents in other shapes
# round two (#28)
def test_surrogate_in_a_document_is_named(models, tmp_path):
    raises(lambda: models[0].build_datastore({'text': ['fine', 'bad \udcff byte'], 'id': ['a', 'b']}, tmp_path/'s',
                                             max_len=32, progress=False), "document 'b'", 'lone surrogate')

# round two (#28)
def test_documents_as_generator_list_or_dicts_build_the_same_store(models, tmp_path):
    m = models[0]
    a = m.build_datastore((t for t in DOCS['text']), tmp_path/'g', max_len=32, progress=False)
    b = m.build_datastore(list(DOCS['text']), tmp_path/'l', max_len=32, progress=False)
    c = m.build_datastore([{'text': t, 'id': str(i)} for i, t in enumerate(DOCS['text'])], tmp_path/'d', max_len=32, progress=False)
    assert np.array_equal(np.asarray(a.vectors), np.asarray(b.vectors)) and np.array_equal(np.asarray(a.vectors), np.asarray(c.vectors))
    raises(lambda: m.build_datastore('one text', tmp_path/'x', max_len=32, progress=False), 'wrap it in a list')
    raises(lambda: m.build_datastore([1, 2], tmp_path/'y', max_len=32, progress=False), 'all be strings or all dicts')

# ---------------------------------------------------------------- every parameter has a rule; profiles say what they mean
# round two (#28), case 8
def test_every_experiment_parameter_has_a_rule():
    "A new numeric or list parameter without a rule (comment or implied) fails here, so --dry-run checks every value."
    from npm_nb.run.batch import list_experiments, notebook_parameters, notebook_path, FREE_TEXT
    missing = [f'{n}.{k} ({v["type"]})' for n in list_experiments() for k, v in notebook_parameters(notebook_path(n)).items()
               if not v.get('rule') and v['type'] != 'bool' and k not in FREE_TEXT]
    assert not missing, f'parameters without a rule: {missing}'

# round two (#28), case 8
@pytest.mark.parametrize('name, value, part', [
    ('01_train.grad_accum', '0', 'must be >= 1'), ('01_train.weight_decay', '-0.1', 'must be >= 0'),
    ('01_train.heldout', '1.5', 'between 0 and 1'), ('05_open_set.l_max', '0', 'must be >= 1'),
    ('05_open_set.corpora', 'factbook2025,nosuch', "'nosuch' is not one of"), ('01_train.seed', '-1', 'must be >= 0'),
    ('03_index_benchmark.ef_sweep', '16,abc', "'abc' is not a number"), ('04_closed_set.max_tokens', '-5', 'must be >= 0'),
    ('07_translation.n_per_lang', '-1', 'must be >= 0'), ('12b_replug_tasks.weighting', 'unifrom', "did you mean 'uniform'"),
    ('05_open_set.open_temperature', '0', 'must be > 0'), ('01_train.lr', '0', 'must be > 0')])
def test_dry_run_refuses_impossible_values(capsys, name, value, part):
    assert batch_main(['smoke', '--dry-run', '-p', name, value]) == 2
    assert part in capsys.readouterr().err

# round two (#28), case 8
def test_zero_is_accepted_where_it_means_all(capsys):
    assert batch_main(['smoke', '--dry-run', '-p', '07_translation.n_per_lang', '0', '-p', '06_temporal.n_countries', '0']) == 0

# round two (#28), case 10
@pytest.mark.parametrize('text, part', [
    ('notebooks:\n  01_a: {enabled: "no"}\n', 'write `enabled: true` or `enabled: false`'),
    ('notebooks:\n  01_a: {enabled: 0}\n', 'write `enabled: true` or `enabled: false`'),
    ('params:\n  stesp: 3\nnotebooks:\n  01_a: {}\n', "shared parameter 'stesp' is declared by no experiment notebook; did you mean 'steps'"),
    ('params:\n  steps: 3\n  steps: 4\nnotebooks:\n  01_a: {}\n', "duplicate key 'steps' (first on line 2)"),
    ('notebooks:\n  01_a: {}\n  01_a: {enabled: false}\n', "duplicate key '01_a'")])
def test_profile_with_non_bool_enabled_unknown_or_duplicate_keys_is_refused(ws, capsys, text, part):
    (ws['pa']/'p.yaml').write_text(text)
    assert batch_main(['p', '--dry-run'] + ws['cli']) == 2
    assert part in capsys.readouterr().err

# ---------------------------------------------------------------- round three (#38): a damaged store is seen on every open
# round three (#38)
def test_bit_flip_is_seen_on_every_open(copy, monkeypatch):
    import npm_nb.npm.datastore as d
    p = copy('flip'); f = p/'vectors.f16'
    time.sleep(d.RACY_SECONDS + 0.1)  # the copy's files are no longer "racily" new: a verification is remembered
    Datastore.load(p); Datastore(p)
    hashed = []; real = d.file_checksum
    monkeypatch.setattr(d, 'file_checksum', lambda *a, **k: hashed.append(a) or real(*a, **k))
    Datastore.load(p); Datastore(p)
    assert not hashed, 'an unchanged store is not hashed again in the same process (the cost of an open stays small)'
    with open(f, 'r+b') as h: h.seek(100); b = h.read(1); h.seek(100); h.write(bytes([b[0] ^ 1]))  # one flipped bit
    raises(lambda: Datastore.load(p), 'changed since they were written')  # the second open in this process
    raises(lambda: Datastore(p), 'changed since they were written')  # opened directly
    with open(f, 'r+b') as h: h.seek(100); h.write(b)  # repaired: opens again
    assert len(Datastore(p))

# round three (#38)
def test_bit_flip_with_its_mtime_set_back_is_seen(copy):
    import npm_nb.npm.datastore as d
    p = copy('flip2'); f = p/'vectors.f16'
    time.sleep(d.RACY_SECONDS + 0.1); Datastore(p)
    st = f.stat()
    with open(f, 'r+b') as h: h.seek(64); b = h.read(1); h.seek(64); h.write(bytes([b[0] ^ 0x10]))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime as it was: the ctime still moved
    raises(lambda: Datastore(p), 'changed since they were written')

# round three (#38)
def test_store_changed_just_after_its_check_is_checked_again(copy):
    "Within RACY_SECONDS of a change the timestamps cannot tell a second change: such a check is not remembered."
    p = copy('racy'); f = p/'vectors.f16'
    Datastore(p)  # the copy is new: verified, not remembered
    with open(f, 'r+b') as h: h.seek(8); b = h.read(1); h.seek(8); h.write(bytes([b[0] ^ 1]))
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns))
    raises(lambda: Datastore(p), 'changed since they were written')

# ---------------------------------------------------------------- round three: paths that are links
# round three (#38)
@pytest.mark.parametrize('kind', ['symlink', 'hardlink'])
def test_lock_file_that_is_a_link_is_not_followed(tmp_path, kind):
    outside = tmp_path/'precious.txt'; outside.write_text('keep me\n')
    folder = tmp_path/'store'; folder.mkdir()
    (folder/'.lock').symlink_to(outside) if kind == 'symlink' else os.link(outside, folder/'.lock')
    raises(lambda: hold_lock(folder, 'datastore').__enter__(), '.lock', 'delete', 'run again')
    assert outside.read_text() == 'keep me\n', 'the target of the link was written'
    (folder/'.lock').unlink()
    with hold_lock(folder, 'datastore'): pass  # a plain lock file again: it locks

# round three (#38)
def test_links_and_unreadable_folders_in_an_input_folder_are_named(tmp_path):
    from npm_nb.npm.datastore import read_documents, DocumentError
    outside = tmp_path/'outside'; outside.mkdir(); (outside/'secret.txt').write_text('a secret outside the folder')
    d = tmp_path/'docs'; (d/'sub').mkdir(parents=True)
    (d/'a.txt').write_text('Athens is the capital of Greece.'); (d/'sub'/'b.txt').write_text('Seoul is in Korea.')
    (d/'passwd.txt').symlink_to(outside/'secret.txt'); (d/'linked').symlink_to(outside)  # a file and a folder link
    (d/'inside.txt').symlink_to(d/'a.txt')  # even a link that stays inside: one rule for every link
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always'); docs = read_documents(d)
    assert docs['id'] == ['a.txt', 'sub/b.txt'] and not any('secret' in t for t in docs['text'])
    said = ' '.join(str(x.message) for x in w)
    for name in ('passwd.txt ->', 'linked ->', 'inside.txt ->', 'left out 3 links'): assert name in said, said
    locked = d/'locked'; locked.mkdir(); (locked/'c.txt').write_text('hidden from us')
    scandir = os.scandir
    def unreadable(path='.'):  # as chmod 000 does for a user other than root
        if Path(path) == locked: raise PermissionError(13, 'Permission denied', str(path))
        return scandir(path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, 'scandir', unreadable)
        raises(lambda: read_documents(d), 'locked', 'cannot be read', exc=DocumentError)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always'); assert read_documents(d, skip_bad=True)['id'] == ['a.txt', 'sub/b.txt']
    assert any('locked' in str(x.message) and 'cannot be read' in str(x.message) for x in w)

# ---------------------------------------------------------------- round three: numeric settings, one table for the API and --dry-run
# round three (#38)
@pytest.mark.parametrize('kw, part', [(dict(l_max=10**6), 'l_max=1000000: use a whole number from 1 to 512'),
                                      (dict(temperature=1e-300), 'temperature=1e-300: use a finite number from 0.001'),
                                      (dict(temperature=True), 'temperature=True'), (dict(temperature=float('inf')), 'temperature=inf'),
                                      (dict(l_max=True), 'l_max=True')])
def test_api_refuses_out_of_range_settings(models, store, kw, part):
    raises(lambda: models[0].predict(Q, store, **kw), part)
    if 'temperature' in kw: raises(lambda: models[0].closed_set_probs(Q, store, VERB, **kw), part)

# round three (#38)
def test_phrase_growth_stops_when_no_longer_phrase_exists(models, store):
    from npm_nb.npm.inference import token_table, candidate_spans
    tt = token_table(store); seeds = np.arange(len(tt.token))
    t = time.perf_counter(); f, l = candidate_spans(tt, seeds, seeds, l_max=10**6)  # below the API edge: no range check
    assert time.perf_counter() - t < 3, 'the loop ran on after every block had ended'
    f2, l2 = candidate_spans(tt, seeds, seeds, l_max=64)  # blocks of 32 tokens: the same phrases
    assert sorted(zip(f.tolist(), l.tolist())) == sorted(zip(f2.tolist(), l2.tolist()))

# round three (#38)
def test_block_length_outside_the_encoders_range_is_refused(models, tmp_path):
    m = models[0]
    raises(lambda: m.build_datastore(DOCS, tmp_path/'a', max_len=3, progress=False), 'max_len=3: use a whole number from 8')
    n = m.encoder.config.max_position_embeddings
    raises(lambda: m.build_datastore(DOCS, tmp_path/'b', max_len=n + 1, progress=False), f'has {n} positions')
    raises(lambda: TrainConfig(max_len=3), 'max_len=3')
    assert not (tmp_path/'b'/'manifest.json').exists()

# round three (#38)
@pytest.mark.parametrize('name, value, part', [
    ('05_open_set.l_max', '1000000', 'l_max=1000000: use a whole number from 1 to 512'),
    ('04_closed_set.temperature', '1e-300', 'temperature=1e-300: use a finite number from 0.001'),
    ('06_temporal.open_temperature', '1e-300', 'open_temperature=1e-300: use a finite number from 0.001'),
    ('03_index_benchmark.hnsw_m', '1', 'hnsw_m=1: use a whole number from 2'), ('10_speed.hnsw_m', '1', 'hnsw_m=1'),
    ('01_train.max_len', '3', 'max_len=3: use a whole number from 8'),
    ('01_train.max_len', '1024', "max_len=1024: the encoder 'minilm' has 512 positions"),
    ('01_train.model', '/no/such/checkpoint', 'no model folder /no/such/checkpoint'),
    ('05_open_set.rows', 'npm,nosuchrow', "'nosuchrow' is not one of the allowed values"),
    ('04_closed_set.rows', 'npm,mlm_fuzy', "did you mean 'mlm_fuzzy'"), ('07_translation.rows', 'npm,single', "'single' is not one of")])
def test_dry_run_refuses_out_of_range_settings(capsys, name, value, part):
    assert batch_main(['smoke', '--dry-run', '-p', name, value]) == 2
    assert part in capsys.readouterr().err

# round three (#38)
def test_dry_run_and_api_share_one_table_of_ranges(monkeypatch, capsys, models, store):
    "A range changed in npm_nb.core.SETTINGS changes what both refuse: the two cannot drift apart."
    import npm_nb.core as core
    monkeypatch.setitem(core.SETTINGS, 'l_max', ('int', 1, 5, 'a narrower range'))
    assert batch_main(['smoke', '--dry-run', '-p', '05_open_set.l_max', '6']) == 2
    assert 'l_max=6: use a whole number from 1 to 5' in capsys.readouterr().err
    raises(lambda: models[0].predict(Q, store, l_max=6), 'l_max=6: use a whole number from 1 to 5')

# ---------------------------------------------------------------- round three: documents in other shapes, documents of any length
# round three (#38)
def test_dataframe_of_documents_builds_from_its_rows(models, tmp_path):
    import pandas as pd
    m = models[0]
    ds = m.build_datastore(pd.DataFrame(DOCS), tmp_path/'df', max_len=32, progress=False)
    assert ds.doc_ids == DOCS['id'] and ds.texts == DOCS['text']  # its rows, not its column names
    raises(lambda: m.build_datastore(pd.DataFrame({'body': DOCS['text']}), tmp_path/'x', max_len=32, progress=False),
           "needs a 'text' column", "['body']")

# round three (#38)
def test_huge_document_is_tokenized_in_windows(tok, monkeypatch):
    "One enormous line is never handed to the tokenizer whole (its offsets and encodings took gigabytes); the blocks are the same."
    import npm_nb.data.blocks as b
    text = ' '.join(DOCS['text'] * 40) + '\nSeoul ' * 30  # 2.6k characters, windows of 300
    whole = b.build_blocks({'text': [text, 'Athens.']}, tok, max_len=32, progress=False)
    seen, call = [], type(tok).__call__
    def spy(self, texts, *a, **k):
        seen.append(max(map(len, texts)) if isinstance(texts, list) else len(texts)); return call(self, texts, *a, **k)
    monkeypatch.setattr(type(tok), '__call__', spy); monkeypatch.setattr(b, 'LONG_TEXT', 300)
    cut = b.build_blocks({'text': [text, 'Athens.']}, tok, max_len=32, progress=False)
    assert max(seen) <= 300, f'the tokenizer saw {max(seen)} characters at once'
    assert cut.to_dict() == whole.to_dict()

# ---------------------------------------------------------------- round three: an empty store; a full disk and `ulimit -f` while saving
# round three (#38)
def test_predicting_from_a_store_without_vectors_is_refused_with_the_reason(models, tmp_path):
    m = models[0]
    empty = m.build_datastore({'text': ['the of and .', 'a the .']}, tmp_path/'e', max_len=32, remove_stopwords=True, progress=False)
    assert len(empty) == 0
    for f in (lambda: m.closed_set_probs(Q, empty, VERB), lambda: m.predict(Q, empty), lambda: m.predict_batch([Q], empty),
              lambda: NPM(m.encoder, m.tok, mode='single').predict_single(Q, empty)):
        raises(f, 'holds no vectors', 'stopword')
    raises(lambda: BM25Retriever(empty), 'BM25 has nothing to index')

# round three (#38)
def test_full_disk_while_saving_is_named(run, tmp_path, monkeypatch):
    "torch.save's 'unexpected pos' and FAISS's fwrite failure on a full disk become one sentence naming the file."
    import npm_nb.core as core, npm_nb.npm.training as tr
    monkeypatch.setattr(core, 'free_bytes', lambda folder: 1 << 20)
    def full(*a, **k): raise RuntimeError('[enforce fail at inline_container.cc:603] . unexpected pos 4544 vs 4432')
    monkeypatch.setattr(tr.torch, 'save', full)
    from npm_nb.models import load_encoder
    fin = run[0]; enc = load_encoder(str(fin), device='cpu'); tok = load_tokenizer(str(fin))
    raises(lambda: tr.save_checkpoint(tmp_path/'out', enc, tok, TrainConfig(), {'step': 7}), 'checkpoint-7', 'disk', 'is full',
           'free some space', exc=OSError)
    assert not any((tmp_path/'out').iterdir()), 'a half-written checkpoint was left behind'
    import faiss
    def fwrite(*a): raise RuntimeError("Error in void faiss::BufferedIOWriter::operator()... ret == (size * nitems) failed: fwrite")
    monkeypatch.setattr(faiss, 'write_index', fwrite)
    X = np.random.default_rng(0).normal(size=(64, 16)).astype(np.float16)
    raises(lambda: build_index(X, 'hnsw', progress=False).save(tmp_path/'ix'), 'index.faiss', 'is full', exc=OSError)

# round three (#38)
@pytest.mark.parametrize('what', ['bytes', 'index'])
def test_file_size_limit_is_named(tmp_path, what):
    "Under `ulimit -f` a write fails with EFBIG (Python ignores SIGXFSZ): a sentence naming the file and the limit."
    body = {'bytes': f"from npm_nb.core import atomic_write_bytes\natomic_write_bytes({str(tmp_path/'big.bin')!r}, b'x' * (4 << 20))",
            'index': "import numpy as np\nfrom npm_nb.npm.index import build_index\n"
                     "X = np.random.default_rng(0).normal(size=(6000, 128)).astype(np.float16)\n"
                     f"build_index(X, 'hnsw', progress=False).save({str(tmp_path/'ix')!r})"}[what]
    code = f"import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))\n{body}"
    r = subprocess.run([PY, '-c', code], capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr[-800:])
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith('OSError: ') and 'file size limit' in last and 'ulimit -f' in last, last
    assert ('big.bin' if what == 'bytes' else 'index.faiss') in last, last

# round three (#38)
def test_results_folder_lock_that_is_a_link_is_not_truncated(ws, capsys):
    "The batch runner's lock on a results folder (a folder that bundles are collected into) follows the same rule."
    outside = ws['res'].parent/'precious.txt'; outside.write_text('keep me\n')
    folder = ws['res']/'runs'/'p'; folder.mkdir(parents=True, exist_ok=True); (folder/'.lock').symlink_to(outside)
    (ws['pa']/'p.yaml').write_text('notebooks:\n  01_a: {}\n')
    assert batch_main(['p'] + ws['cli']) == 2
    assert 'symbolic link' in capsys.readouterr().err and outside.read_text() == 'keep me\n'

# ---------------------------------------------------------------- #38: run records and profiles from files
# issue #38
@pytest.mark.parametrize('body, part', [('{"profile": "tiny"}', 'has no `steps`'), ('{"steps": []}', '`steps` must be a mapping, not a list'),
                                        ('{"steps": null}', 'not null'), ('{"steps": {"01_a": {"state": "odd"}}}', '`steps.01_a.state`')])
def test_status_file_that_is_no_run_record_is_named(ws, capsys, body, part):
    "A status.json that parses but is no run record: a sentence naming the file and the command that recovers."
    run = ws['res']/'runs'/'tiny'/'20260101-000000'; run.mkdir(parents=True); (run/'status.json').write_text(body)
    (run/'.started-here').touch()
    assert batch_main(['tiny'] + ws['cli']) == 2
    err = capsys.readouterr().err
    assert 'status.json is damaged' in err and part in err and 'python -m npm_nb.run.batch tiny --new' in err and 'Traceback' not in err, err


# issue #38
def test_killed_run_behind_a_finished_one_is_marked_interrupted(ws, capsys):
    "A run killed mid-step whose id sorts before a finished run's (the clock was behind): marked interrupted, not `running`."
    from npm_nb.run.batch import run_batch
    runs = ws['res']/'runs'/'quick'
    killed, done = runs/'20250101-000000', runs/'20260101-000000'   # the killed run's id sorts first: the clock read earlier
    for d, st in ((killed, {'state': 'running', 'key': 'k', 'pid': 999_999_999}), (done, {'state': 'done', 'key': 'k'})):
        d.mkdir(parents=True); (d/'.started-here').touch()
        (d/'status.json').write_text(json.dumps({'profile': 'quick', 'run_id': d.name, 'steps': {'01_a': st}}))
    (ws['pa']/'quick.yaml').write_text('notebooks:\n  01_a: {enabled: false}\n')   # nothing to run: only the records matter
    st = run_batch('quick', params_folder=ws['pa'], experiments_folder=ws['ex'], echo=print)
    assert Path(st['run_dir']).name not in (killed.name, done.name)   # the latest run was finished: a new one
    st = json.loads((killed/'status.json').read_text())
    assert st['steps']['01_a']['state'] == 'interrupted' and 'stopped while it ran' in st['steps']['01_a']['error'], st
    assert 'marked interrupted' in capsys.readouterr().out


# issue #38
def test_profile_with_nested_aliases_or_wrong_types_is_refused(ws, capsys):
    "Nested YAML aliases in a parameter are refused at once (a short message); `after: 5` is a sentence, not a TypeError."
    import time as _t
    bomb = 'a: &a [x, x, x, x, x, x, x, x, x]\n' + ''.join(f'{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n'
                                                         for p, c in zip('abcdefgh', 'bcdefghi'))
    (ws['pa']/'bomb.yaml').write_text('params:\n  steps: !!str\nnotebooks:\n  01_a:\n    params:\n      tasks:\n' +
                                      ''.join(f'        {l}\n' for l in bomb.splitlines()))
    t0 = _t.time()
    assert batch_main(['bomb', '--dry-run'] + ws['cli']) == 2
    err = capsys.readouterr().err
    assert 'alias' in err and 'is not valid YAML (line' in err and len(err) < 2000 and _t.time() - t0 < 10, err[:500]
    (ws['pa']/'after.yaml').write_text('notebooks:\n  01_a: {after: 5}\n')
    assert batch_main(['after', '--dry-run'] + ws['cli']) == 2
    err = capsys.readouterr().err
    assert 'notebooks.01_a.after is 5 (int)' in err and 'Traceback' not in err, err


# issue #38
def test_read_only_runs_folder_is_named_with_the_fix(ws, capsys, monkeypatch):
    "A runs folder that cannot be written (read-only copy, mounted archive): a sentence naming the folder and the fix."
    from npm_nb.run import batch
    def refuse(folder, profile=None): raise PermissionError(13, 'Permission denied', str(folder/'.lock'))
    monkeypatch.setattr(batch, '_profile_lock', refuse)   # as root, chmod cannot make a folder read-only for this process
    assert batch_main(['tiny'] + ws['cli']) == 2
    err = capsys.readouterr().err
    assert 'cannot be written (Permission denied)' in err and 'chmod -R u+w' in err and 'NPM_NB_RESULTS' in err, err
