"""Answers without junk, checkpoints that copy, and model checks that see every change (issue 53).

Each test replays a case of the audits: NEWCOMER-3 (its numbered problems) or RELIABILITY-4 (case ids), named in a
comment above it. Tiny real inputs: the MiniLM tokenizer, a random tiny encoder, a handful of documents.
"""
import json, os, shutil, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
from npm_nb.models import load_tokenizer, tiny_encoder, load_encoder, write_model_checksums, encoder_fingerprint
from npm_nb.npm.datastore import Datastore, STOPWORDS, check_model
from npm_nb.npm.inference import NPM, BM25Retriever, is_marks, check_search_args
from npm_nb.npm.training import TrainConfig, train, list_checkpoints, is_published, link_final

# README and copyright text of the kind that produced '=', '==', '$', '`', '>' and 'for' as answers
DOCS = {'id': ['tmux-README', 'tar-copyright', 'shell.md', 'kenya.txt'],
        'text': ['tmux is a terminal multiplexer. It uses libevent and ncurses. Set TERM=screen for colours; '
                 'a == b and `tmux ls` > out.txt lists sessions for $USER.',
                 'Copyright (C) 1990-2023 Free Software Foundation, Inc. License: GPL-3+ . This program is free '
                 'software; you can redistribute it for any purpose = see the GNU General Public License.',
                 'Run `make` then `make install`; set PREFIX=$HOME/.local and PATH=$PREFIX/bin:$PATH >> ~/.profile.',
                 'Nairobi is the capital of Kenya. The currency of Kenya is the Kenyan shilling ($1 = 129 KES).'],
        'title': ['tmux', 'tar', 'shell', 'Kenya']}
QUERIES = ['tmux is a terminal [MASK].', 'The capital of Kenya is [MASK].', 'Set TERM to [MASK] for colours.']


def junk(text: str) -> bool:
    "An answer made only of stopwords, punctuation or symbols (written out here, independently of the package)."
    return all(not any(c.isalnum() for c in w) or w.lower() in STOPWORDS for w in text.split())


@pytest.fixture(scope='module')
def tok(): return load_tokenizer('minilm')

@pytest.fixture(scope='module')
def npm(tok): return NPM(tiny_encoder(tok, seed=0), tok)

@pytest.fixture(scope='module')
def store(npm, tmp_path_factory):  # as `npm-nb build` makes it: stopwords and punctuation left out, symbols kept
    return Datastore.build(DOCS, npm.encoder, npm.tok, tmp_path_factory.mktemp('ans')/'s', max_len=32,
                           remove_stopwords=True, progress=False)

# NEWCOMER-3 problem 5: with --bm25 3, 3 of the top 10 answers were '=', '=' and '`'
@pytest.mark.parametrize('bm25', [False, True])
def test_no_answer_is_made_only_of_stopwords_punctuation_or_symbols(npm, store, bm25):
    kw = dict(k=len(store), topn=10_000, bm25=BM25Retriever(store) if bm25 else None, restrict_k=2)
    for preds in npm.predict_batch(QUERIES, store, **kw):
        assert preds and not [p.text for p in preds if junk(p.text)]
    before = [p.text for ps in npm.predict_batch(QUERIES, store, span_rule='any', **kw) for p in ps]
    assert {'=', '$', '>'} & set(before), 'the replay: without the rule the symbols come back'

# NEWCOMER-3 problem 5: `for` was missing from STOPWORDS
def test_stopwords_hold_lucenes_english_list_and_for():
    from bm25s.stopwords import STOPWORDS_EN  # Lucene's English stop set, the BM25 analyser's 'en'
    assert 'for' in STOPWORDS and set(STOPWORDS_EN) <= set(STOPWORDS)
    assert [is_marks(s) for s in ('=', '==', '$', '`', '>', '>>', '.', 'a', 'x=1')] == [True] * 7 + [False] * 2

# the reference code's valid_func: no stopword or punctuation anywhere inside a phrase (an option here)
def test_span_rule_reference_drops_phrases_with_a_stopword_inside(npm, store):
    kw = dict(k=len(store), topn=10_000)
    content = [p.text for p in npm.predict('The capital of Kenya is [MASK].', store, **kw)]
    reference = [p.text for p in npm.predict('The capital of Kenya is [MASK].', store, span_rule='reference', **kw)]
    assert any(w in t.lower().split() for t in content for w in ('of', 'the', 'is'))
    assert reference and not [t for t in reference if any(w.lower() in STOPWORDS or is_marks(w) for w in t.split())]
    with pytest.raises(ValueError, match="span_rule='none'"): npm.predict('a [MASK]', store, span_rule='none')

# NEWCOMER-3 problem 12: a BM25 block spans documents; the answer names the document of its own phrase
def test_an_answer_cites_the_document_its_phrase_comes_from(npm, store):
    for ps in npm.predict_batch(QUERIES, store, k=len(store), topn=50, bm25=BM25Retriever(store), restrict_k=1):
        for p in ps:
            d = store.doc_ids.index(p.doc_id)
            assert store.texts[d][p.char_start:p.char_end] == p.text

# RELIABILITY-4 B10: alpha=1e308 gave every score inf with only a numpy warning
@pytest.mark.parametrize('alpha', [1e308, 1e3, -1e3, float('inf'), float('nan')])
def test_an_alpha_that_overflows_is_refused_with_a_sentence(npm, store, alpha):
    with pytest.raises(ValueError, match='use a number from -10 to 10'): npm.predict('a [MASK]', store, alpha=alpha)
    check_search_args(alpha=3.0)

# NEWCOMER-3 problem 6: `final` was a relative symlink, and `cp -r …/final dest` copied a dangling link
def test_final_is_a_folder_that_cp_r_copies_whole(tok, tmp_path):
    from npm_nb.data.blocks import build_blocks
    blocks = build_blocks({'text': DOCS['text'] * 4}, tok, max_len=32, progress=False)
    cfg = TrainConfig(objective='npm', model='tiny', corpora=('toy',), batch_size=2, steps=2, warmup=1, lr=1e-3,
                      heldout=0.0, log_every=1, save_every=1, keep_last=1, out_dir=str(tmp_path/'run'))
    fin = train(cfg, model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False)
    assert fin == tmp_path/'run'/'final' and fin.is_dir() and not fin.is_symlink()
    assert is_published(fin, list_checkpoints(tmp_path/'run')[-1])
    subprocess.run(['cp', '-r', str(fin), str(tmp_path/'copy')], check=True)
    assert encoder_fingerprint(load_encoder(str(tmp_path/'copy'), device='cpu')) == \
        encoder_fingerprint(load_encoder(str(fin), device='cpu'))
    # an old-style symlink `final` still loads, and publishing again turns it into a folder
    ck = list_checkpoints(tmp_path/'run')[-1]
    shutil.rmtree(fin)
    fin.symlink_to(ck.name, target_is_directory=True)
    load_encoder(str(fin), device='cpu')
    assert train(cfg, model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False) == fin and not fin.is_symlink()

# RELIABILITY-4 A24: 64 bytes of model.safetensors overwritten, the mtime set back: the same process loaded it silently
def test_a_model_changed_with_its_mtime_set_back_is_seen_in_the_same_process(tok, tmp_path):
    d = tmp_path/'m'
    tiny_encoder(tok).save_pretrained(d)
    tok.save_pretrained(d)
    write_model_checksums(d)
    load_encoder(str(d), device='cpu')
    w = d/'model.safetensors'
    st = w.stat()
    with open(w, 'r+b') as f:
        f.seek(st.st_size // 2)
        f.write(b'\x00' * 64)
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ValueError, match=r'model.safetensors \(content changed\)'): load_encoder(str(d), device='cpu')

# RELIABILITY-4 N65: layer_norm_eps 1e-12 -> 1e-3 in config.json moved every score and no check saw it
def test_a_config_only_encoder_change_is_an_encoder_mismatch(tok, tmp_path):
    d = tmp_path/'m'
    tiny_encoder(tok).save_pretrained(d)
    tok.save_pretrained(d)
    enc = load_encoder(str(d), device='cpu')
    ds = Datastore.build(DOCS, enc, tok, tmp_path/'s', max_len=32, progress=False)
    cfg = json.loads((d/'config.json').read_text())
    cfg['layer_norm_eps'] = 1e-3
    (d/'config.json').write_text(json.dumps(cfg))
    changed = load_encoder(str(d), device='cpu')
    assert encoder_fingerprint(changed) != encoder_fingerprint(enc)
    with pytest.raises(ValueError, match='encoder mismatch'): check_model(ds, changed, tok)
    check_model(ds, enc, tok)  # the unchanged encoder still opens the store

# NEWCOMER-3 problem 12: each CLI call cost 14-18 s, mostly imports; --help and info need neither torch nor transformers
def test_help_and_info_import_neither_torch_nor_transformers(store):
    code = ("import sys, contextlib, io\nfrom npm_nb.run.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['--help']) == 0 and main(['info', {str(store.path)!r}]) == 0\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == '[]', (r.stdout, r.stderr[-2000:])
