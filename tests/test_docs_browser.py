"""The book's offline site (`make docs`, docs/site/build.py): built once here into a temporary folder from the committed
notebooks, then checked as files (works without a browser) and in headless Chromium (Debian's, driven by Playwright, as
tests/test_explorer_browser.py does): every page loads with no console error and no failed request, nothing is asked
of any host but the local server, every internal link and image resolves, no code block or output scrolls sideways, a
formula is rendered, search finds "co-occurrence". The browser tests are skipped, saying why, only when Chromium or
Playwright is missing."""
import ast, functools, http.server, importlib.util, json, os, re, sys, threading, time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit, unquote
import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location('site_build', ROOT/'docs'/'site'/'build.py')
site = importlib.util.module_from_spec(spec); spec.loader.exec_module(site)

from npm_nb.run.explorer import chromium_path, CHROMIUM_ARGS
CHROMIUM = chromium_path()
try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover
    sync_playwright = None
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium; "
                                                              "`make install` does it when run as root)")
needs_playwright = pytest.mark.skipif(sync_playwright is None, reason="the playwright package is missing (pip install playwright)")
def in_browser(test): return needs_chromium(needs_playwright(test))


@pytest.fixture(scope='module')
def html(tmp_path_factory):
    "The site, built from this checkout into a temporary folder (NPM_NB_SITE_HTML=folder checks a built one instead)."
    if os.environ.get('NPM_NB_SITE_HTML'): return Path(os.environ['NPM_NB_SITE_HTML'])
    t0 = time.perf_counter()
    out = site.build(tmp_path_factory.mktemp('site'))
    print(f'site built in {time.perf_counter() - t0:.0f} s')
    return out


def pages(html: Path) -> list[Path]: return sorted(p for p in html.rglob('*.html') if '_static' not in p.parts)


class Refs(HTMLParser):
    "What a page loads (script/img/iframe src, link href, source srcset) and what it links to (a href)."
    def __init__(self):
        super().__init__(); self.loads, self.links = [], []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ('script', 'img', 'iframe', 'embed', 'audio', 'video', 'source') and a.get('src'): self.loads.append(a['src'])
        if tag == 'link' and a.get('href') and a.get('rel') != 'canonical': self.loads.append(a['href'])
        if tag == 'a' and a.get('href'): self.links.append(a['href'])


def refs(page: Path) -> Refs:
    r = Refs(); r.feed(page.read_text()); return r


# ---------------------------------------------------------------- the build, as files (no browser needed)

def test_parts_name_every_chapter_once():
    "The site's table of contents is nbs/index.ipynb's list of parts: it must name every chapter, each once."
    names = [n for _, ns in site.parts() for n in ns]
    assert len(names) == len(set(names))
    assert sorted(names) == site.chapters(), f'nbs/index.ipynb does not list {set(site.chapters()) - set(names)}'


def test_parts_read_from_the_home_page(tmp_path):
    nb = {'cells': [{'cell_type': 'markdown', 'source': 'Start: [00_a](00_a.ipynb)\n\n**One** (`x`)\n\n| [01_b](01_b.ipynb) |\n'
                                                         '| [02_c](02_c.ipynb) |\n\n**Two**\n\n[03_d](03_d.ipynb), [01_b](01_b.ipynb)'}]}
    (tmp_path/'index.ipynb').write_text(json.dumps(nb))
    assert site.parts(tmp_path/'index.ipynb') == [('Start', ['00_a']), ('One', ['01_b', '02_c']), ('Two', ['03_d'])]


def test_nbdev_directives_are_shown_as_nbdev_shows_them():
    nb = {'cells': [{'cell_type': 'code', 'metadata': {}, 'source': '#| default_exp npm.x'},
                    {'cell_type': 'code', 'metadata': {}, 'source': '#| hide\nimport secret'},
                    {'cell_type': 'code', 'metadata': {}, 'source': '#| export\ndef f(): pass'},
                    {'cell_type': 'code', 'metadata': {}, 'source': '#| echo: false\nshow()'},
                    {'cell_type': 'markdown', 'metadata': {}, 'source': '#| not a directive in markdown'}]}
    cells = site.show_as_nbdev(nb)['cells']
    assert [c['source'] for c in cells] == ['def f(): pass', 'show()', '#| not a directive in markdown']
    assert cells[1]['metadata']['tags'] == ['remove-input']


def test_every_chapter_has_a_page_in_the_part_order(html):
    for c in site.chapters() + ['index']: assert (html/f'{c}.html').exists(), c
    sidebar = re.findall(r'href="(\d\d[a-z]?_\w+)\.html"', (html/'index.html').read_text().split('bd-sidebar-primary', 1)[1])
    order = [n for _, ns in site.parts() for n in ns]
    assert list(dict.fromkeys(s for s in sidebar if s in order)) == order


def test_every_exported_name_has_an_api_entry(html):
    "Each name of each module's `__all__` has an autodoc entry (an element with the id `module.name`)."
    import importlib
    missing = []
    for m in site.modules():
        names = getattr(importlib.import_module(m), '__all__', [])
        page = (html/'api'/f'{m}.html').read_text()
        missing += [f'{m}.{n}' for n in names if f'id="{m}.{n}"' not in page]
    assert not missing, f'no API entry for {missing}'
    src = (ROOT/'npm_nb'/'_modidx.py').read_text()
    assert set(site.modules()) == set(ast.literal_eval(src[src.index('{'):])['syms'])  # every exported module, once


def test_api_entries_show_docstring_and_parameters(html):
    page = (html/'api'/'npm_nb.npm.losses.html').read_text()
    entry = page.split('id="npm_nb.npm.losses.candidate_mask"', 1)[1].split('</dl>', 1)[0]
    assert 'seq_offset' in entry and 'Parameters' in entry
    assert 'the query’s sequence' in entry or "the query's sequence" in entry  # the docment of span_seq


def test_no_page_shows_a_path_of_the_machine_that_built_it(html):
    "RELIABILITY-4 N35: the API page of npm_nb.data.fetch showed MANIFEST_PATH as Path('<checkout>/data/sources.json')."
    where = [p.relative_to(html) for p in pages(html) if str(ROOT) in p.read_text() or str(ROOT.resolve()) in p.read_text()]
    assert not where, f'these pages name the checkout {ROOT}: {where}'
    assert "Path('data/sources.json')" in (html/'api'/'npm_nb.data.fetch.html').read_text()


def test_math_is_in_the_losses_page(html):
    assert re.search(r'class="math[^"]*"', (html/'08_losses.html').read_text())


def test_nothing_is_loaded_from_another_host(html):
    "No page, style sheet or script of the site loads anything from a URL off the site (no CDN: it must work offline)."
    off = []
    for p in pages(html):
        off += [(p.name, u) for u in refs(p).loads if urlsplit(u).scheme or u.startswith('//')]
    for css in html.rglob('*.css'):
        off += [(css.name, u) for u in re.findall(r'''url\(\s*['"]?((?:https?:)?//[^'")]+)''', css.read_text(errors='replace'))]
    for p in pages(html):  # the MathJax the page loads is the site's own
        assert 'cdn.jsdelivr' not in p.read_text() and 'unpkg.com' not in p.read_text(), p
    assert not off, off
    assert (html/'_static'/'mathjax'/'tex-chtml.js').exists()


def test_internal_links_and_images_resolve_as_files(html):
    broken = []
    for p in pages(html):
        r = refs(p)
        for u in r.links + r.loads:
            s = urlsplit(u)
            if s.scheme or u.startswith(('//', '#', 'mailto:')) or not s.path: continue
            target = (p.parent/unquote(s.path)).resolve()
            if not target.exists(): broken.append((str(p.relative_to(html)), u))
    assert not broken, broken[:20]


def test_the_searched_word_is_in_a_chapter():
    "The word the browser test searches for is in a chapter (the home page aside)."
    text = [p.name for p in (ROOT/'nbs').glob('[0-9]*.ipynb') if 'co-occurrence' in p.read_text()]
    assert text, 'no chapter says co-occurrence'


# ---------------------------------------------------------------- in the browser

@pytest.fixture(scope='module')
def server(html):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
    handler = functools.partial(Quiet, directory=str(html))
    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):  # a load the browser cut short (next page): no traceback
            if not isinstance(sys.exc_info()[1], ConnectionError): super().handle_error(request, client_address)
    srv = Server(('127.0.0.1', 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f'http://127.0.0.1:{srv.server_address[1]}/'
    srv.shutdown()


@pytest.fixture(scope='module')
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    "A page that records console errors, failed requests and any request to another host (refused)."
    ctx = browser.new_context()
    pg = ctx.new_page(); pg.set_default_timeout(60_000)
    pg.errors, pg.off_site = [], []
    pg.on('console', lambda m: m.type == 'error' and pg.errors.append(m.text))
    pg.on('pageerror', lambda e: pg.errors.append(str(e)))
    # a load cut short by the next navigation (the favicon, say) is ERR_ABORTED; any other failure counts
    pg.on('requestfailed', lambda r: 'ERR_ABORTED' not in (r.failure or '') and pg.errors.append(f'failed {r.url}: {r.failure}'))
    pg.on('response', lambda r: r.status >= 400 and pg.errors.append(f'{r.status} {r.url}'))
    def route(r):
        if r.request.url.startswith(server): r.continue_()
        else: pg.off_site.append(r.request.url); r.abort()
    ctx.route('**/*', route)
    yield pg
    ctx.close()


# What may not be wider than its box at the default width (Playwright's 1280 x 720; BOOK-3: 75 of 78 code blocks of
# the training chapter scrolled sideways): code blocks, printed outputs, output tables and images, and the page itself.
WIDE = ('div.highlight pre, div.cell_output pre, div.cell_output table, div.cell_output img, div.cell_output .output',
        'es => es.filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.tagName + ": " + e.textContent.slice(0, 60))')


@in_browser
def test_every_page_loads_cleanly_with_links_images_and_no_sideways_scroll(html, server, page):
    """Each page once: it loads without a console error, a failed request or a request to another host; every image on
    it is decoded (naturalWidth > 0); every internal link answers 200; no code block, output or image is wider than
    its box, and the page is no wider than the window (nothing scrolls sideways)."""
    seen, checked = set(), 0
    for p in pages(html):
        url = urljoin(server, str(p.relative_to(html)))
        page.goto(url, wait_until='load')
        assert not page.errors, (url, page.errors)
        bad = page.eval_on_selector_all('img', 'is => is.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)')
        assert not bad, (p.name, bad)
        wide = page.eval_on_selector_all(*WIDE)
        assert not wide, (p.name, len(wide), wide[:5])
        checked += page.eval_on_selector_all(WIDE[0], 'es => es.length')
        assert page.evaluate('document.documentElement.scrollWidth <= window.innerWidth'), (p.name, 'the page scrolls sideways')
        for href in page.eval_on_selector_all('a[href]', 'as => as.map(a => a.href)'):
            u = href.split('#')[0]
            if u.startswith(server) and u not in seen:
                seen.add(u)
                assert page.request.get(u).status == 200, (p.name, href)
    assert not page.off_site, page.off_site
    assert len(seen) > len(site.chapters()) and checked > 1000  # the selectors found the code blocks and outputs


@in_browser
def test_a_formula_is_rendered(server, page):
    page.goto(urljoin(server, '08_losses.html'))
    page.wait_for_selector('mjx-container', state='attached')  # MathJax's output element, typeset in the page
    assert page.locator('mjx-container').count() >= 1 and page.locator('mjx-container mjx-mfrac').count() >= 1
    assert not page.errors and not page.off_site, (page.errors, page.off_site)


@in_browser
def test_search_finds_co_occurrence(server, page):
    page.goto(urljoin(server, 'search.html?q=co-occurrence'))
    page.wait_for_function("document.querySelector('#search-results')?.innerText.includes('Search finished')")
    hits = page.eval_on_selector_all('#search-results ul.search li a', 'as => as.map(a => a.getAttribute("href"))')
    said = {f'{p.stem}.html' for p in (ROOT/'nbs').glob('[0-9]*.ipynb') if 'co-occurrence' in p.read_text()}
    assert said and said <= {h.split('?')[0].split('#')[0] for h in hits}, (said, hits)  # every chapter that says it
    assert hits[0].startswith('07_masking.html'), hits[:5]  # BOOK-3: the defining chapter was 13th
    assert not page.errors and not page.off_site, (page.errors, page.off_site)


@in_browser
def test_search_ranks_the_defining_chapter_first(server, page):
    "BOOK-3: BM25's first hits were API attributes (NPMResources.bm25), the chapter that defines BM25 search 4th."
    for word, chapter in [('BM25', '13_inference'), ('HNSW', '12_index'), ('macro EM', '14_evaluation')]:
        page.goto(urljoin(server, f'search.html?q={word}'))
        page.wait_for_function("document.querySelector('#search-results')?.innerText.includes('Search finished')")
        hits = page.eval_on_selector_all('#search-results ul.search li a', 'as => as.map(a => a.getAttribute("href"))')
        assert hits and hits[0].startswith(f'{chapter}.html'), (word, hits[:5])


def test_site_has_the_results_and_the_scaffolding(html):
    "BOOK-3 #1, #8, #9: the results, a glossary, the equations and the references are pages; the landing page draws the pipeline."
    for page in ['results/README.html', 'results/tables/05_open_set.html', 'docs/glossary.html', 'docs/equations.html',
                 'docs/references.html', 'docs/reference.html']:
        assert (html/page).is_file(), page
    exp = (html/'experiments'/'05_open_set.html').read_text()
    assert 'Results of the committed run' in exp and '../_images/05_open_set.png' in exp or '05_open_set.png' in exp
    assert len(re.findall(r'class="math[^"]*"', (html/'docs'/'equations.html').read_text())) >= 10
    assert 'Three ways to read this book' in (html/'index.html').read_text()
    assert re.search(r'<img alt="Figure: [^"]{20,}"', (html/'index.html').read_text())  # the pipeline, with an alt text
    assert (html/'_sources'/'07_masking.ipynb').read_bytes() == (ROOT/'nbs'/'07_masking.ipynb').read_bytes()  # the download


# A trained NPM's output named by what made it: a checkpoint folder (`best_trained_npm`'s label) or a committed run.
TRAINED_LABEL = re.compile(r'checkpoints/\w+/npm/final|run \w+/\d{8}-\d{6}: NPM trained [\d,]+ steps')


def test_method_chapters_show_a_trained_npm_and_end_with_summary_and_exercises(html):
    """BOOK-3 #1 and #5: the tour and chapters 08-14 show a trained NPM's output with what made it (a `make book` run
    without a trained checkpoint prints how to train one instead, and fails here); 07-14 end with a summary and
    exercises."""
    for stem in ['00_tour'] + [f'{n:02d}' for n in range(7, 15)]:
        page = next(html.glob(f'{stem}*.html')).read_text()
        if stem != '07':
            assert TRAINED_LABEL.search(page), f'{stem}: no output of a trained NPM with its checkpoint or run'
            assert '<img' in page, stem
        if stem != '00_tour':
            assert 'id="summary"' in page and 'id="exercises"' in page, f'{stem}: no Summary / Exercises section'
