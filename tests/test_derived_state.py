"""What is derived from a datastore (token table, exact searcher, normalised blocks, the explorer's id tables) follows
every `add` and `remove`, also when the store comes back to the same size (the reproduction of
shared/audits/AESTHETICS-2.md §4.6: remove one document, add another of the same length)."""
import gc
import numpy as np
import pytest
import torch
from npm_nb.models import load_tokenizer, tiny_encoder
from npm_nb.npm.inference import NPM, exact_search, exact_searcher, token_table
from npm_nb.npm.evaluation import normalized_blocks, block_texts, normalize_answer
from npm_nb.run.explorer import doc_meta

torch.set_num_threads(2)
DOCS = {'text': ['Red green blue.', 'Alpha beta gamma delta.', 'One two three.'], 'id': ['a', 'b', 'c']}

@pytest.fixture(scope='module')
def model():
    tok = load_tokenizer('minilm')
    return NPM(tiny_encoder(tok, seed=0), tok)

@pytest.fixture
def same_size_again(model, tmp_path):
    "A store whose derived data was made, then `remove(['b'])` and an `add` that bring it back to its first size."
    ds = model.build_datastore(DOCS, tmp_path/'s', max_len=32, progress=False)
    n0, before = len(ds.vectors), (token_table(ds), exact_searcher(ds), normalized_blocks(ds), doc_meta(ds))
    ds.remove(['b'], progress=False)
    ds.add({'text': ['Cyan magenta.'], 'id': ['d']}, progress=False)
    assert len(ds.vectors) == n0, 'the reproduction needs a store of the same size after remove + add'
    return ds, before

def brute_force_top1(vectors, q):
    return int(np.argmax(np.asarray(vectors, np.float32) @ np.asarray(q, np.float32).T, axis=0)[0])

def test_exact_search_after_remove_then_add_same_size(same_size_again):
    ds, (_, old_searcher, _, _) = same_size_again
    assert exact_searcher(ds) is not old_searcher
    q = np.asarray(ds.vectors[-1:], np.float32)
    assert int(exact_search(ds, q, 1)[1][0, 0]) == brute_force_top1(ds.vectors, q) == len(ds.vectors) - 1

def test_token_table_after_remove_then_add_same_size(same_size_again):
    ds, (old_table, _, _, _) = same_size_again
    tt = token_table(ds)
    assert tt is not old_table
    assert len(tt.offsets) == len(ds.blocks) + 1
    want = tt.offsets[np.asarray(ds.vec_block, np.int64)] + np.asarray(ds.vec_pos, np.int64)
    np.testing.assert_array_equal(tt.token, want)
    assert set(tt.doc[tt.row >= 0]) <= set(range(len(ds.doc_ids)))

def test_normalized_blocks_and_doc_ids_after_remove_then_add(same_size_again):
    ds, (_, _, old_norm, old_meta) = same_size_again
    assert normalized_blocks(ds) == [f' {normalize_answer(x)} ' for x in block_texts(ds)] != old_norm
    assert doc_meta(ds)[0] == ['a', 'c', 'd'] != old_meta[0]

def test_derived_is_made_once_per_version(model, tmp_path):
    ds = model.build_datastore(DOCS, tmp_path/'v', max_len=32, progress=False)
    calls = []
    make = lambda: calls.append(1) or len(calls)
    assert ds.derived('x', make) == ds.derived('x', make) == 1
    v = ds.version
    ds.remove(['a'], progress=False)
    assert ds.version > v and ds.derived('x', make) == 2

def test_fingerprints_are_cached_without_touching_the_model_or_tokenizer():
    "The fingerprint caches are the modules' own: no attribute appears on the encoder or the tokenizer."
    from npm_nb.models import encoder_fingerprint, _FINGERPRINTS
    from npm_nb.npm.datastore import tokenizer_fingerprint, _TOKENIZER_FINGERPRINTS
    tok = load_tokenizer('minilm')
    enc = tiny_encoder(tok, seed=0)
    enc_attrs, tok_attrs = set(vars(enc)), set(vars(tok))
    fe, ft = encoder_fingerprint(enc), tokenizer_fingerprint(tok)
    assert set(vars(enc)) == enc_attrs and set(vars(tok)) == tok_attrs
    assert _FINGERPRINTS[enc][1] == fe and _TOKENIZER_FINGERPRINTS[tok][1] == ft  # cached
    assert encoder_fingerprint(enc) == fe and tokenizer_fingerprint(tok) == ft
    with torch.no_grad(): next(enc.parameters()).add_(1.0)  # in place: torch's version counter moves
    fe2 = encoder_fingerprint(enc)
    assert fe2 != fe and encoder_fingerprint(enc, cached=False) == fe2
    enc.config.hidden_act = 'relu'  # an output-changing config field, the weights as they were
    assert encoder_fingerprint(enc) not in (fe, fe2)
    assert set(vars(enc)) == enc_attrs
    tok.add_tokens(['zzqx'])  # a new token changes the vocabulary
    assert tokenizer_fingerprint(tok) != ft and _TOKENIZER_FINGERPRINTS[tok][1] == tokenizer_fingerprint(tok)
    assert not [k for k in vars(tok) if 'fingerprint' in k]
    n = len(_FINGERPRINTS)
    del enc
    gc.collect()
    assert len(_FINGERPRINTS) < n  # the entry goes with the encoder
