"""The training skeleton of chapter 09 (`run_checkpoints`, `restore_or_seed`, `CheckpointManager`) as the three
trainers use it: NPM's `train`, REPLUG-LSR's `train_lsr` and REALM's `train_realm`.

For each trainer, on the tiny models and toy data of its chapter: a run stopped after a step and resumed ends where the
uninterrupted run ends (the same losses and weights), and a deadline stops it with a checkpoint written and
`TrainingDeadline` raised, after which the same call resumes and finishes. A few seconds a trainer on a CPU.
"""
import time
from pathlib import Path
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer
from npm_nb.models import load_tokenizer, tiny_encoder
from npm_nb.data.blocks import build_blocks
from npm_nb.npm.training import (TrainConfig, train, list_checkpoints, load_state, CheckpointManager, TrainingDeadline,
                                 run_checkpoints, is_published)
from npm_nb.baselines.lm import CausalLM, tiny_causal_lm, resolve_lm
from npm_nb.baselines.replug import DenseRetriever, LSRConfig, train_lsr, lsr_state, passages
from npm_nb.baselines.realm import REALM, Retriever, chunk_documents
from npm_nb.baselines.realm_pretraining import RealmConfig, train_realm, realm_examples, read_jsonl

torch.set_num_threads(2)


@pytest.fixture(scope='module')
def tok(): return load_tokenizer('minilm')


def weights(model) -> dict: return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same(a: dict, b: dict, eps=0.0) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k].float(), b[k].float(), atol=eps, rtol=0) for k in a)


def past() -> float: return time.time() - 1  # a deadline that has passed: the first step is the last


# ---------------------------------------------------------------- the skeleton alone
def save_at(d):
    "A stand-in writer of `checkpoint-<step>`."
    def save(step):
        ck = Path(d)/f'checkpoint-{step}'
        ck.mkdir(parents=True, exist_ok=True)
        (ck/'trainer_state.pt').write_bytes(b'x')
        return ck
    return save


def run_steps(run, save, steps):
    "Call `step_done` after each step until it says stop; the last step."
    for s in range(1, steps + 1):
        if run.step_done(s, lambda s=s: save(s)): return s
    return steps


def test_skeleton_saves_every_n_steps_at_stop_after_and_at_the_end(tmp_path):
    run = CheckpointManager(tmp_path, steps=10, save_every=4, keep_last=10)
    assert run_steps(run, save_at(tmp_path), 10) == 10
    assert [p.name for p in list_checkpoints(tmp_path)] == ['checkpoint-4', 'checkpoint-8', 'checkpoint-10']
    assert is_published(tmp_path/'final', tmp_path/'checkpoint-10') and run.result(10) == tmp_path/'final'
    d = tmp_path/'stopped'
    run = CheckpointManager(d, steps=10, save_every=4, keep_last=10, stop_after=6)
    assert run_steps(run, save_at(d), 10) == 6
    assert [p.name for p in list_checkpoints(d)] == ['checkpoint-4', 'checkpoint-6'] and not (d/'final').exists()
    assert run.result(6) == d/'checkpoint-6'


def test_skeleton_deadline_checkpoints_and_raises_and_reads_the_environment(tmp_path, monkeypatch):
    run = CheckpointManager(tmp_path, steps=10, save_every=100, keep_last=2, deadline=past(), name='x')
    assert run_steps(run, save_at(tmp_path), 10) == 1 and run.late
    assert [p.name for p in list_checkpoints(tmp_path)] == ['checkpoint-1']
    with pytest.raises(TrainingDeadline, match=r'time budget reached at step 1 of 10 \(x\)'): run.result(1)
    monkeypatch.setenv('NPM_NB_DEADLINE', str(past()))
    assert CheckpointManager(tmp_path, 10, 100, 2).deadline is not None  # the batch runner's --time-budget
    monkeypatch.delenv('NPM_NB_DEADLINE')
    assert CheckpointManager(tmp_path, 10, 100, 2).deadline is None


def test_skeleton_start_over_deletes_checkpoints_and_final(tmp_path):
    run = CheckpointManager(tmp_path, steps=2, save_every=1, keep_last=2)
    run_steps(run, save_at(tmp_path), 2)
    assert [p.name for p in run_checkpoints(tmp_path, True)] == ['checkpoint-1', 'checkpoint-2']
    assert run_checkpoints(tmp_path, False) == [] and not (tmp_path/'final').exists()


# ---------------------------------------------------------------- NPM (`train`)
TOY = ["Thessaloniki is the second largest city in Greece. The port of Thessaloniki is on the Thermaic Gulf.",
       "Athens is the capital of Greece. The port of Piraeus serves Athens and the islands of the Aegean Sea.",
       "The White Tower of Thessaloniki stands on the waterfront. The city of Thessaloniki was founded in 315 BC.",
       "Patras is the third largest city in Greece. The port of Patras links Greece to Italy across the Ionian Sea.",
       "Heraklion is the largest city on Crete. The port of Heraklion is the main gate to the island of Crete.",
       "Larissa is the capital of Thessaly. The river Pineios flows through the city of Larissa in central Greece."]


@pytest.fixture(scope='module')
def blocks(tok): return build_blocks({'text': TOY}, tok, max_len=32, source='toy', progress=False)


def npm_cfg(d, **kw):
    return TrainConfig(**{**dict(objective='npm', model='tiny', corpora=('toy',), batch_size=2, steps=4, warmup=1,
                                 lr=1e-3, heldout=0.0, log_every=1, save_every=100, keep_last=2, out_dir=str(d)), **kw})


def npm_run(tok, blocks, d, **kw):
    return train(npm_cfg(d), model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False, **kw)


def npm_losses(d): return [r['loss'] for r in read_jsonl(Path(d)/'metrics.jsonl')]


@pytest.fixture(scope='module')
def npm_straight(tok, blocks, tmp_path_factory):
    d = tmp_path_factory.mktemp('npm')/'straight'
    return npm_run(tok, blocks, d), npm_losses(d)


def test_npm_interrupted_and_resumed_is_the_uninterrupted_run(tok, blocks, npm_straight, tmp_path):
    half = npm_run(tok, blocks, tmp_path, stop_after=2)
    assert half.name == 'checkpoint-2' and load_state(half/'trainer_state.pt')['step'] == 2
    fin = npm_run(tok, blocks, tmp_path)
    assert npm_losses(tmp_path) == npm_straight[1]
    from safetensors.torch import load_file
    a, b = load_file(fin/'model.safetensors'), load_file(npm_straight[0]/'model.safetensors')
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_npm_deadline_stops_with_a_checkpoint_and_resumes(tok, blocks, npm_straight, tmp_path):
    with pytest.raises(TrainingDeadline, match='step 1 of 4'): npm_run(tok, blocks, tmp_path, deadline=past())
    assert [p.name for p in list_checkpoints(tmp_path)] == ['checkpoint-1']
    npm_run(tok, blocks, tmp_path)
    assert npm_losses(tmp_path) == npm_straight[1]


# ---------------------------------------------------------------- REPLUG-LSR (`train_lsr`)
QUERIES = [('Lima is', ' the capital of Peru.'), ('Paris is', ' the capital of France.'),
           ('A banana is', ' a berry.'), ('The Pacific', ' coast of Peru.')]


@pytest.fixture(scope='module')
def lsr_data(tok):
    toy = [dict(id='fr', title='France', text='Paris is the capital and largest city of France. ' * 6),
           dict(id='pe', title='Peru', text='Lima is the capital of Peru. It lies on the Pacific coast.'),
           dict(id='ba', title='Banana', text='A banana is an elongated, edible fruit, botanically a berry.')]
    lm_tok = AutoTokenizer.from_pretrained(resolve_lm('smollm2'))
    lm = CausalLM(tiny_causal_lm(lm_tok), lm_tok, start_token='<|endoftext|>', batch_size=2)
    return passages(toy, tok, chunk_tokens=16), lm


def lsr_run(tok, lsr_data, d, **kw):
    "A 4-step run of a fresh tiny retriever (a new process's worth of state); the retriever and the result."
    ps, lm = lsr_data
    r = DenseRetriever(tiny_encoder(tok, hidden=32, seed=1), tok, max_len=32)
    cfg = LSRConfig(out_dir=str(d), steps=4, batch_size=2, k=3, lr=1e-3, reembed_every=2, save_every=100,
                    warmup_ratio=0.0)
    return r, train_lsr(cfg, r, lm, ps, QUERIES, progress=False, **kw)


@pytest.fixture(scope='module')
def lsr_straight(tok, lsr_data, tmp_path_factory):
    r, fin = lsr_run(tok, lsr_data, tmp_path_factory.mktemp('lsr')/'straight')
    return weights(r.encoder), lsr_state(fin)['log']


def test_lsr_interrupted_and_resumed_is_the_uninterrupted_run(tok, lsr_data, lsr_straight, tmp_path):
    _, half = lsr_run(tok, lsr_data, tmp_path, stop_after=2)
    assert half.name == 'checkpoint-2' and lsr_state(half)['step'] == 2
    r, fin = lsr_run(tok, lsr_data, tmp_path)
    assert fin == tmp_path/'final' and lsr_state(fin)['log'] == lsr_straight[1]
    assert same(weights(r.encoder), lsr_straight[0], eps=1e-6)


def test_lsr_deadline_stops_with_a_checkpoint_and_resumes(tok, lsr_data, lsr_straight, tmp_path):
    with pytest.raises(TrainingDeadline, match=r'step 1 of 4 \(replug_lsr\)'):
        lsr_run(tok, lsr_data, tmp_path, deadline=past())
    assert [p.name for p in list_checkpoints(tmp_path)] == ['checkpoint-1'] and not (tmp_path/'final').exists()
    r, fin = lsr_run(tok, lsr_data, tmp_path)
    assert lsr_state(fin)['log'] == lsr_straight[1] and same(weights(r.encoder), lsr_straight[0], eps=1e-6)


# ---------------------------------------------------------------- REALM (`train_realm`)
REALM_TOY = {'id': ['thessaloniki', 'athens', 'patras', 'crete', 'algeria', 'larissa'],
             'title': ['Thessaloniki', 'Athens', 'Patras', 'Crete', 'Algeria', 'Larissa'],
             'text': ["Thessaloniki is the second largest city in Greece. The White Tower was built by the Ottomans in "
                      "1535.",
                      "Athens is the capital of Greece. The Parthenon stands on the Acropolis of Athens. Athens hosted "
                      "the Olympic Games in 2004.",
                      "Patras is the third largest city in Greece. The port of Patras links Greece to Italy.",
                      "Heraklion is the largest city on Crete. The palace of Knossos lies south of Heraklion.",
                      "Background: Algeria won independence from France on 5 July 1962 after a bloody war.\nCapital: "
                      "name: Algiers.",
                      "Larissa is the capital of Thessaly. The river Pineios flows through Larissa to the Aegean Sea."]}


@pytest.fixture(scope='module')
def realm_data(tok):
    chunks = chunk_documents(REALM_TOY, tok, chunk_len=24)
    return realm_examples(chunks, tok, 6, tagger='regex'), chunks


def realm_run(tok, realm_data, d, **kw):
    "A 4-step run (the index re-embedded in the trainer every 2 steps) of a fresh tiny REALM."
    ex, chunks = realm_data
    torch.manual_seed(0)
    retriever = Retriever(tiny_encoder(tok, hidden=32, seed=2), scale=20.0)
    model = REALM(retriever, tiny_encoder(tok, masked_lm=True, hidden=32), tok)
    cfg = RealmConfig(steps=4, batch_size=2, k=2, lr=1e-3, warmup=1, refresh='sync', refresh_every=2, out_dir=str(d),
                      save_every=100, device='cpu')
    return train_realm(cfg, ex, chunks, model, progress=False, **kw)


def realm_log(d): return [(r['step'], r['loss'], r['index_age']) for r in read_jsonl(Path(d)/'metrics.jsonl')]


@pytest.fixture(scope='module')
def realm_straight(tok, realm_data, tmp_path_factory):
    d = tmp_path_factory.mktemp('realm')/'straight'
    fin = realm_run(tok, realm_data, d)
    return fin, realm_log(d)


def realm_same(a: Path, b: Path) -> bool:
    load = lambda p: weights(REALM.from_pretrained(p, device='cpu'))
    return same(load(a), load(b), eps=1e-6)


def test_realm_interrupted_and_resumed_is_the_uninterrupted_run(tok, realm_data, realm_straight, tmp_path):
    half = realm_run(tok, realm_data, tmp_path, stop_after=3)
    assert half.name == 'checkpoint-3' and load_state(half/'trainer_state.pt')['step'] == 3
    fin = realm_run(tok, realm_data, tmp_path)
    got, want = realm_log(tmp_path), realm_straight[1]
    assert [r[0] for r in got] == [1, 2, 3, 4] and [r[2] for r in got] == [r[2] for r in want]
    assert np.allclose([r[1] for r in got], [r[1] for r in want], atol=1e-5, rtol=0)
    assert realm_same(fin, realm_straight[0])


def test_realm_deadline_stops_with_a_checkpoint_and_resumes(tok, realm_data, realm_straight, tmp_path):
    with pytest.raises(TrainingDeadline, match=r'step 1 of 4 \(realm\)'):
        realm_run(tok, realm_data, tmp_path, deadline=past())
    assert [p.name for p in list_checkpoints(tmp_path)] == ['checkpoint-1'] and not (tmp_path/'final').exists()
    fin = realm_run(tok, realm_data, tmp_path)
    assert fin == tmp_path/'final' and realm_same(fin, realm_straight[0])
