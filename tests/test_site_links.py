"""The book's links, checked on the staged pages of the site (docs/site/build.py stages them; no Sphinx run, about 20 s):
every relative link and image of every page (chapters, experiments, docs, results) names a file the site holds; chapter
mentions, chapter and experiment names, cited docs and backticked exported names are links; each experiment with
committed results shows them; the API pages link back to their chapter; no page points at a document the repository
lacks. tests/test_docs_browser.py checks the built HTML the same way, in files and in Chromium."""
import importlib.util, json, re
from pathlib import Path
from urllib.parse import urlsplit, unquote
import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location('site_build', ROOT/'docs'/'site'/'build.py')
site = importlib.util.module_from_spec(spec); spec.loader.exec_module(site)

LINK = re.compile(r'!?\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]\(([^)\s]*)\)')
ROLE = re.compile(r'\{py:(?:obj|mod)\}`[^`<]*<([\w.]+)>`')
PRIVATE = re.compile(r'SCIENCE audit|\bissue #\d+|\bissues #\d+')


@pytest.fixture(scope='module')
def src(tmp_path_factory):
    src = tmp_path_factory.mktemp('site')/'src'
    site.stage(src)
    return src


def markdown_of(p: Path) -> str:
    "The markdown a staged page holds (a notebook's markdown cells, a .md page whole; code fences left out)."
    text = ('\n'.join(c['source'] for c in json.loads(p.read_text())['cells'] if c['cell_type'] == 'markdown')
            if p.suffix == '.ipynb' else p.read_text())
    return re.sub(r'^(`{3,}|~{3,}).*?^\1', '', text, flags=re.M | re.S)


def staged_pages(src: Path) -> list[Path]:
    return sorted(p for p in src.rglob('*') if p.suffix in ('.ipynb', '.md') and p.is_file())


def test_every_link_and_image_of_every_page_resolves(src):
    "BOOK-3 #2: docs/reference.md, results/README.md and README.md were named but were not pages of the site."
    broken, exported = [], {f for fs in site.exported_names(site.modules()).values() for f in fs}
    for p in staged_pages(src):
        text = markdown_of(p)
        for url in LINK.findall(text):
            s = urlsplit(url)
            if s.scheme or url.startswith(('#', 'mailto:')) or not s.path: continue
            if not (p.parent/unquote(s.path)).exists(): broken.append(f'{p.relative_to(src)}: {url}')
        broken += [f'{p.relative_to(src)}: API name {t}' for t in ROLE.findall(text)
                   if t not in exported and t not in site.modules()]
    assert not broken, broken[:20]


def test_the_docs_and_the_results_are_pages(src):
    for page in ['docs/reference.md', 'results/README.md', 'results/findings.md', 'results/tables/05_open_set.md', 'README.md']:
        assert (src/page).is_file(), page
    assert (src/'results'/'figures'/'train_loss.png').is_file()
    toc = json.loads((src/'index.ipynb').read_text())['cells'][-1]['source']
    assert 'results/README' in toc and 'docs/reference' in toc and 'docs/references' in toc


def test_an_experiment_page_shows_its_committed_table_and_figure(src):
    "BOOK-3 shot1: 05_open_set's 'Table 8 / Figure 6 at our scale' section was code with no table."
    text = markdown_of(src/'experiments'/'05_open_set.ipynb')
    assert '## Results of the committed run' in text and '(#results-of-the-committed-run)' in text
    assert '### Table: Open-set tasks' in text and '| NPM (BM25 top-3 blocks) |' in text
    assert '](../results/figures/05_open_set.png)' in text and '](../results/tables/05_open_set.md)' in text


def test_chapter_mentions_names_and_docs_become_links(src):
    link = site.Linker(ROOT/'nbs', {'docs/reference.md', 'results/README.md'}, {'span_mask': ['npm_nb.npm.masking.span_mask']},
                       ['npm_nb.npm.losses'])
    out = link.markdown('chapter 10 and chapters 12-13; experiment 05 and `07_masking.collate_npm`; `span_mask(batch)`, '
                        '`npm_nb.npm.losses`; see docs/reference.md §3\n```\nchapter 10 `span_mask`\n```\n## chapter 10',
                        'experiments/x.ipynb')
    assert '[chapter 10](../10_datastore.ipynb)' in out and 'chapters [12](../12_index.ipynb)-[13](../13_inference.ipynb)' in out
    assert '[experiment 05](05_open_set.ipynb)' in out and '[`07_masking.collate_npm`](../07_masking.ipynb)' in out
    assert '{py:obj}`span_mask(batch) <npm_nb.npm.masking.span_mask>`' in out and '{py:mod}`npm_nb.npm.losses <npm_nb.npm.losses>`' in out
    assert '[docs/reference.md](../docs/reference.md) §3' in out
    assert out.endswith('```\nchapter 10 `span_mask`\n```\n## chapter 10')  # code and headings as they were
    # a doc page's link to a file the site does not hold becomes text naming it
    out = link.markdown('[the run](runs/x/) and [`README.md`](README.md)', 'results/README.md', src_repo='results/README.md')
    assert out == 'the run (`results/runs/x`) and [`README.md`](README.md)'


def test_chapters_are_numbered_and_their_api_pages_link_back(src):
    "BOOK-3 #6: the sidebar showed titles without numbers; API pages did not link to their chapter."
    first = json.loads((src/'08_losses.ipynb').read_text())['cells'][0]['source']
    assert first.startswith('# 8. Losses')
    assert ':doc:`chapter 8, Losses </08_losses>`' in (src/'api'/'npm_nb.npm.losses.rst').read_text()
    text = markdown_of(src/'09_training.ipynb')
    assert '[chapter 08](08_losses.ipynb)' in text
    assert '(docs/equations.md#training)' in markdown_of(src/'08_losses.ipynb')  # BOOK-3 #5: the equations, reused


def test_no_chapter_or_doc_points_at_a_private_document(src):
    """BOOK-3 #2: 'SCIENCE audit §1' and 'issue #34' named documents and a tracker the reader does not have (the
    chapters, the home page and the docs; the results pages are written by the runs)."""
    bad = [(str(p.relative_to(src)), m[0]) for p in staged_pages(src)
           if not str(p.relative_to(src)).startswith(('results/', 'experiments/')) for m in PRIVATE.finditer(markdown_of(p))]
    assert not bad, bad


def test_the_equations_page_is_used_by_four_chapters_or_more(src):
    "BOOK-3 #5: one numbered 'NPM in equations' page, reused by the method chapters instead of each writing its own."
    users = sorted(p.stem for p in src.glob('[0-9]*.ipynb') if 'docs/equations.md' in markdown_of(p))
    assert len(users) >= 4, users
