"""The site builder's inputs (docs/site/build.py): an OUT that holds someone's files, a notebooks folder that is empty or
holds a broken notebook, an OUT that is a file; and the paths of the machine that builds it, kept off its pages.
Staging only (no Sphinx run): a few seconds each."""
import importlib.util, json, re, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location('site_build', ROOT/'docs'/'site'/'build.py')
site = importlib.util.module_from_spec(spec); spec.loader.exec_module(site)


def _nb(*md: str) -> str:
    return json.dumps({'cells': [{'cell_type': 'markdown', 'metadata': {}, 'source': m} for m in md], 'metadata': {},
                       'nbformat': 4, 'nbformat_minor': 5})


@pytest.fixture
def tiny_nbs(tmp_path):
    "A book of one chapter: its home page lists it."
    d = tmp_path/'nbs'; d.mkdir()
    (d/'index.ipynb').write_text(_nb('# Home\n\n[first](01_first.ipynb)'))
    (d/'01_first.ipynb').write_text(_nb('# First\n\nA chapter.'))
    return d


def _cli(*args):
    return subprocess.run([sys.executable, str(ROOT/'docs'/'site'/'build.py'), *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def test_staging_refuses_an_out_holding_files_it_did_not_write(tmp_path, tiny_nbs):
    # RELIABILITY-4 N36: `build.py OUT` deleted notes.md, mine/thesis.rst, mine/analysis.ipynb and index.md under OUT/src
    src = tmp_path/'out'/'src'
    mine = {'notes.md': 'my notes', 'mine/thesis.rst': 'thesis', 'mine/analysis.ipynb': '{}', 'index.md': 'home', 'data.csv': '1,2'}
    for rel, text in mine.items(): (src/rel).parent.mkdir(parents=True, exist_ok=True); (src/rel).write_text(text)
    with pytest.raises(site.SiteError, match=r'holds files this builder did not write \(data.csv, index.md, mine/analysis.ipynb, '
                                             r'mine/thesis.rst, notes.md\) and no .staged.json.*nothing was changed'):
        site.stage(src, tiny_nbs)
    assert {str(p.relative_to(src)) for p in src.rglob('*') if p.is_file()} == set(mine)
    assert all((src/rel).read_text() == text for rel, text in mine.items())
    p = _cli(tmp_path/'out', '--nbs', tiny_nbs)
    assert p.returncode == 2 and 'Traceback' not in p.stderr and 'did not write' in p.stderr, p.stderr
    assert all((src/rel).read_text() == text for rel, text in mine.items())


def test_staging_removes_only_what_an_earlier_build_wrote(tmp_path, tiny_nbs):
    # RELIABILITY-4 N36: a chapter that left the book leaves the site; a file added to OUT/src by hand stays
    src = tmp_path/'out'/'src'
    (tiny_nbs/'02_second.ipynb').write_text(_nb('# Second'))
    site.stage(src, tiny_nbs)
    listed = json.loads((src/site.MANIFEST).read_text())
    assert {'index.ipynb', '01_first.ipynb', '02_second.ipynb', 'api/index.md'} <= set(listed)
    (src/'notes.md').write_text('my notes'); (src/'mine').mkdir(); (src/'mine'/'thesis.rst').write_text('thesis')
    (tiny_nbs/'02_second.ipynb').unlink()
    site.stage(src, tiny_nbs)
    assert not (src/'02_second.ipynb').exists() and (src/'01_first.ipynb').exists()
    assert (src/'notes.md').read_text() == 'my notes' and (src/'mine'/'thesis.rst').read_text() == 'thesis'
    assert '02_second.ipynb' not in json.loads((src/site.MANIFEST).read_text())


def test_staging_refuses_a_list_that_climbs_out_of_src(tmp_path, tiny_nbs):
    # RELIABILITY-4 N36: only files inside OUT/src are ever removed, whatever .staged.json says
    victim = tmp_path/'victim.md'; victim.write_text('keep me')
    src = tmp_path/'out'/'src'; src.mkdir(parents=True); (src/site.MANIFEST).write_text(json.dumps(['../../victim.md']))
    with pytest.raises(site.SiteError, match='lists paths outside'): site.stage(src, tiny_nbs)
    (src/site.MANIFEST).write_text('{not json')
    with pytest.raises(site.SiteError, match=r'\.staged\.json is damaged'): site.stage(src, tiny_nbs)
    assert victim.read_text() == 'keep me'


def test_builder_says_what_is_wrong_with_the_notebooks_folder_or_out(tmp_path, tiny_nbs):
    # RELIABILITY-4 N37: --nbs an empty folder (FileNotFoundError of the repo's 00_tour.ipynb), a malformed notebook
    # (JSONDecodeError naming no file), OUT an existing file (NotADirectoryError): sentences, exit 2
    empty = tmp_path/'emptynbs'; empty.mkdir()
    (tiny_nbs/'01_first.ipynb').write_text('{"cells": [')
    (tmp_path/'afile').write_text('x')
    nofolder = tmp_path/'missing'
    for args, says in [((tmp_path/'o1', '--nbs', empty), f'{empty} has no index.ipynb'),
                       ((tmp_path/'o2', '--nbs', nofolder), f'{nofolder} is not a folder of notebooks'),
                       ((tmp_path/'o3', '--nbs', tiny_nbs), f"{tiny_nbs/'01_first.ipynb'} is not a readable notebook"),
                       ((tmp_path/'afile',), f"{tmp_path/'afile'} is a file: pass a folder as OUT")]:
        p = _cli(*args)
        assert p.returncode == 2 and says in p.stderr and 'Traceback' not in p.stderr, (args, p.stderr)
    (tiny_nbs/'01_first.ipynb').unlink()
    with pytest.raises(site.SiteError, match=r'index.ipynb lists chapters that .* does not hold \(01_first\)'):
        site.stage(tmp_path/'o4'/'src', tiny_nbs)
    assert site.chapters(empty) == [] and site.chapters(tiny_nbs) == []   # the chapter list is --nbs's own


def test_site_pages_show_no_path_of_the_builder():
    # RELIABILITY-4 N35: the API page of npm_nb.data.fetch showed MANIFEST_PATH as Path('<checkout>/data/sources.json')
    spec = importlib.util.spec_from_file_location('site_conf', ROOT/'docs'/'site'/'conf.py')
    conf = importlib.util.module_from_spec(spec); spec.loader.exec_module(conf)
    from npm_nb.data.fetch import MANIFEST_PATH
    lines = []
    conf.docments_params(None, 'data', 'npm_nb.data.fetch.MANIFEST_PATH', MANIFEST_PATH, {}, lines)
    assert len(lines) == 1 and re.fullmatch(r"``(Posix)?Path\('data/sources.json'\)``", lines[0]), lines
    assert conf.machine_paths(f'{ROOT} {ROOT}/nbs/x.ipynb {Path.home()}/y') == f'. nbs/x.ipynb ~/y'
    sig = conf.scrub_signature(None, 'function', 'f', None, {}, f"(index: Path = PosixPath('{ROOT}/nbs/index.ipynb'))", None)
    assert sig == ("(index: Path = PosixPath('nbs/index.ipynb'))", None)
