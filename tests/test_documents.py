"""Any text corpus goes in (issue 53): files without a suffix, gzipped files, the same name in sibling folders; and
the datastore's open reliability cases of audit round four (E2, E20, E6, B15, A12, N53, N66). Tiny real inputs, the
tiny random-init encoder: each test takes seconds."""
import errno, gzip, json, os, subprocess, sys, warnings
from pathlib import Path
import numpy as np
import pytest
from npm_nb.models import load_tokenizer, tiny_encoder
from npm_nb.data.blocks import build_blocks
from npm_nb.npm import datastore as dsm
from npm_nb.npm.datastore import Datastore, DocumentError, read_documents
from conftest import raises

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope='module')
def tok(): return load_tokenizer('minilm')

@pytest.fixture(scope='module')
def model(tok): return tiny_encoder(tok)

@pytest.fixture
def unix(tmp_path):
    "A folder of Unix documentation as it comes: README without a suffix, README.txt twice, a .gz, a binary."
    u = tmp_path/'unix'; (u/'a').mkdir(parents=True); (u/'b').mkdir()
    (u/'README').write_text('tmux is a terminal multiplexer.\n')
    (u/'a'/'README.txt').write_text('tar saves many files together into a single archive.\n')
    (u/'b'/'README.txt').write_text('tree lists the contents of directories in a tree-like format.\n')
    (u/'x.txt.gz').write_bytes(gzip.compress(b'Gzip reduces the size of the named files.\n'))
    (u/'b'/'logo.png').write_bytes(b'\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR')
    return u


# ---------------------------------------------------------------- NEWCOMER-3 problem 3: ordinary text goes in as it is
def test_a_folder_of_unix_docs_gives_one_document_a_text_file(unix):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always'); d = read_documents(unix)
    assert d['id'] == ['README', 'a/README.txt', 'b/README.txt', 'x.txt.gz']
    assert d['text'][3] == 'Gzip reduces the size of the named files.\n' and d['title'][3] == 'x'
    assert any('left out 1 files that are not text (.png: 1)' in str(x.message) for x in w)

def test_a_text_file_in_another_encoding_in_a_folder_is_named_when_left_out(unix):
    (unix/'NEWS').write_bytes('Un café à Montréal.\n'.encode('latin-1'))  # no NUL byte: text, but not UTF-8
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always'); d = read_documents(unix)
    assert 'NEWS' not in d['id']
    said = ' '.join(str(x.message) for x in w)
    assert 'not valid utf-8' in said and 'NEWS' in said and '--encoding latin-1' in said, said
    d = read_documents(unix, encoding='latin-1'); assert d['text'][d['id'].index('NEWS')] == 'Un café à Montréal.\n'

def test_a_file_without_a_suffix_is_read_when_named(unix):
    assert read_documents(unix/'README')['id'] == ['README']  # was: "not a document file (use .txt, ...)"
    (unix/'copyright').write_text('Copyright 2024 the authors.\n')
    assert read_documents([unix/'copyright', unix/'README'])['id'] == ['copyright', 'README']

def test_a_binary_file_named_is_refused_with_a_sentence(unix):
    raises(lambda: read_documents(unix/'b'/'logo.png'), 'logo.png: not a text file', 'skip-bad', exc=DocumentError)

def test_same_named_files_in_sibling_folders_keep_their_folders(unix):
    # was: "b/README.txt: document id 'README.txt' is also in a/README.txt; ids must be unique (rename one)"
    assert read_documents([unix/'a', unix/'b'])['id'] == ['a/README.txt', 'b/README.txt']
    assert read_documents([unix/'a'/'README.txt', unix/'b'/'README.txt'])['id'] == ['a/README.txt', 'b/README.txt']
    assert read_documents(unix/'a'/'README.txt')['id'] == ['README.txt']  # one file: its name, as before
    assert read_documents([unix/'a'/'README.txt', unix/'a'/'README.txt'])['id'] == ['README.txt']  # named twice, read once

def test_gzipped_records_and_a_broken_gz(tmp_path):
    (tmp_path/'rows.jsonl.gz').write_bytes(gzip.compress(b'{"id": "k", "text": "Mombasa is in Kenya."}\n{"text": "Nairobi."}\n'))
    d = read_documents(tmp_path/'rows.jsonl.gz')
    assert d['id'] == ['k', 'rows.jsonl.gz:2'] and d['text'] == ['Mombasa is in Kenya.', 'Nairobi.']
    (tmp_path/'broken.txt.gz').write_bytes(b'not gzip')
    raises(lambda: read_documents(tmp_path/'broken.txt.gz'), 'broken.txt.gz: not a readable gzip file', exc=DocumentError)

def test_build_and_add_of_the_same_folders_adds_nothing(unix, model, tok, tmp_path):
    "`add` computes ids as `build` did: the same inputs again add nothing; one of the folders alone (shorter ids) neither."
    ds = Datastore.build([unix/'a', unix/'b'], model, tok, tmp_path/'s', max_len=32, progress=False)
    assert ds.doc_ids == ['a/README.txt', 'b/README.txt']
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        ds.add([unix/'a', unix/'b'], progress=False); ds.add(unix/'a', progress=False)
    assert ds.doc_ids == ['a/README.txt', 'b/README.txt'], ds.doc_ids
    said = ' '.join(str(x.message) for x in w)
    assert 'already added' in said and "'README.txt' is stored as 'a/README.txt'" in said, said

def test_the_cli_builds_four_documents_from_the_unix_folder(unix, tok, tmp_path):
    "The issue's case through `npm-nb build` (a subprocess of the checkout's package, the tiny encoder)."
    tiny = tmp_path/'tiny'; tiny_encoder(tok).save_pretrained(tiny); tok.save_pretrained(tiny)
    env = dict(os.environ, HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1', HF_DATASETS_OFFLINE='1', PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, '-m', 'npm_nb', 'build', tmp_path/'store', unix, '--model', tiny, '--max-len', '32'],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0 and '4 documents' in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------- RELIABILITY-4: the datastore's open cases
def test_build_refuses_a_store_path_that_is_a_file(tmp_path, model, tok):
    # E2: `npm-nb build good/greece.txt good/korea.txt` said "[Errno 17] File exists: '…/greece.txt'"
    f = tmp_path/'greece.txt'; f.write_text('Thessaloniki is in Greece.')
    raises(lambda: Datastore.build({'text': ['x y z']}, model, tok, f, progress=False), 'greece.txt is a file, not a folder',
           'STORE FILES', exc=ValueError)
    raises(lambda: Datastore.build({'text': ['x y z']}, model, tok, f/'store', progress=False), 'inside', 'greece.txt', exc=ValueError)
    raises(lambda: Datastore.load(f), 'greece.txt is a file, not a folder', exc=ValueError)
    assert f.read_text() == 'Thessaloniki is in Greece.'

def test_add_refuses_a_pending_folder_that_is_a_link(tmp_path, model, tok):
    # E20: `pending/` a symbolic link to an outside folder: "[Errno 17] File exists: '…/s20/pending'"
    ds = Datastore.build({'text': ['Athens is in Greece.']}, model, tok, tmp_path/'s20', max_len=32, progress=False)
    outside = tmp_path/'outside'; outside.mkdir(); (outside/'keep.txt').write_text('keep')
    (tmp_path/'s20'/'pending').symlink_to(outside)
    raises(lambda: ds.add({'text': ['Seoul is in Korea.']}, progress=False), 'pending is a symbolic link', 'rm ', exc=ValueError)
    raises(lambda: ds.remove(ds.doc_ids[0], progress=False), 'pending is a symbolic link', exc=ValueError)
    assert sorted(p.name for p in outside.iterdir()) == ['keep.txt']
    (tmp_path/'s20'/'pending').unlink()
    assert len(ds.add({'text': ['Seoul is in Korea.']}, progress=False).doc_ids) == 2

def test_a_generator_column_is_read_once(model, tok, tmp_path):
    # B15: {'text': <generator>} said "corpus 'corpus' has no text: all 0 documents are empty"
    ds = Datastore.build({'text': (t for t in ['Athens is in Greece.', 'Seoul is in Korea.'])}, model, tok, tmp_path/'g',
                         max_len=32, progress=False)
    assert ds.texts == ['Athens is in Greece.', 'Seoul is in Korea.']

def test_a_full_disk_during_add_names_the_file_and_the_disk(model, tok, tmp_path, monkeypatch):
    # N53: `npm-nb add` onto a full tmpfs said "[Errno 28] No space left on device" (no file, disk or fix)
    ds = Datastore.build({'text': ['Athens is in Greece.']}, model, tok, tmp_path/'full', max_len=32, progress=False)
    def full(*a, **k): raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(dsm.np, 'savez', full)
    raises(lambda: ds.add({'text': ['Seoul is in Korea.']}, progress=False), 'full' + os.sep + 'pending failed',
           'is full', 'free some space', exc=OSError)
    monkeypatch.undo()
    assert not (tmp_path/'full'/'pending').exists()  # the half-written stage is gone: its room is free again
    assert Datastore.load(tmp_path/'full').texts == ['Athens is in Greece.']  # the store is intact
    assert len(ds.add({'text': ['Seoul is in Korea.']}, progress=False).doc_ids) == 2

def test_a_file_size_limit_during_build_names_the_file_and_the_fix(tmp_path, tok):
    # A12: `ulimit -f 2048; npm-nb build …` said "[Errno 27] File too large" (the file, the limit and the fix now)
    (tmp_path/'enc').mkdir(); tiny_encoder(tok).save_pretrained(tmp_path/'enc'); tok.save_pretrained(tmp_path/'enc')
    code = (f"import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.RLIM_INFINITY))\n"
            f"from npm_nb.models import load_encoder, load_tokenizer\nfrom npm_nb.npm.datastore import Datastore\n"
            f"m, t = load_encoder({str(tmp_path/'enc')!r}), load_tokenizer({str(tmp_path/'enc')!r})\n"
            f"Datastore.build({{'text': ['Athens is the capital of Greece number %d.' % i for i in range(600)]}}, m, t, "
            f"{str(tmp_path/'a12')!r}, max_len=32, progress=False)\n")
    env = dict(os.environ, HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1', HF_DATASETS_OFFLINE='1', PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert 'a12' in last and 'file size limit' in last and 'ulimit -f unlimited' in last, r.stderr[-2000:]

def test_a_manifest_whose_parts_lost_their_checksums_warns(model, tok, tmp_path):
    # N66: parts' xxh3 removed (meta_checksums kept) opened silently, even with a flipped bit in the vectors
    p = tmp_path/'n66'; Datastore.build({'text': ['Athens is in Greece.', 'Seoul is in Korea.']}, model, tok, p,
                                        max_len=32, progress=False)
    m = json.loads((p/'manifest.json').read_text())
    for part in m['parts']: del part['xxh3']
    (p/'manifest.json').write_text(json.dumps(m))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always'); Datastore.load(p, verify=True)
    assert any('records no checksum of its vectors' in str(x.message) and 'rebuild' in str(x.message) for x in w)


# ---------------------------------------------------------------- E6: a huge one-line document, memory bounded
def test_a_long_document_gives_the_blocks_of_its_windows(tok, monkeypatch):
    "A document longer than LONG_TEXT is tokenized window by window: the same blocks as the whole text at once."
    import npm_nb.data.blocks as bl
    text = ' '.join(f'word{i % 97} Thessaloniki, Greece.' for i in range(400))
    whole = build_blocks({'text': [text, 'Seoul is in Korea.']}, tok, max_len=32, progress=False)
    monkeypatch.setattr(bl, 'LONG_TEXT', 500); monkeypatch.setattr(bl, 'BLOCKS_PER_TABLE', 7)  # Arrow tables of 7 blocks
    cut = build_blocks({'text': [text, 'Seoul is in Korea.']}, tok, max_len=32, progress=False)
    assert len(whole) > 20 and cut.to_dict() == whole.to_dict() and cut.features == whole.features
