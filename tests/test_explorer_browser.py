"""The explorer web app in headless Chromium (Debian's, driven by Playwright): type a query, see the highlighted answer.

Runs the real app (`npm_nb.run.explorer.create_app`) on a free localhost port with the real MiniLM encoder and the
`figure1` corpus (built in a second), so it needs no trained checkpoint and no cached datastore. It is skipped, saying
why, only when Chromium or Playwright is missing (`make install` installs both)."""
import os, time
import pytest

os.environ.setdefault('HF_HUB_OFFLINE', '1'); os.environ.setdefault('TRANSFORMERS_OFFLINE', '1')
from npm_nb.run.explorer import (Explorer, create_app, serve_in_thread, free_port, chromium_path, CHROMIUM_ARGS,
                             FIGURE1_DOCS)

CHROMIUM = chromium_path()
try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover
    sync_playwright = None

pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium; "
                                                         "`make install` does it when run as root)"),
              pytest.mark.skipif(sync_playwright is None, reason="the playwright package is missing (pip install playwright)")]


@pytest.fixture(scope='module')
def server():
    ex = Explorer(profile='smoke', progress=False, fuzzy=False)
    ex.resources('init', 'figure1')  # the start-up work: model loaded, store built, caches filled
    port = free_port()
    srv = serve_in_thread(create_app(ex, model='init', corpus='figure1'), port)
    yield f'http://127.0.0.1:{port}/'
    srv.shutdown()


@pytest.fixture(scope='module')
def page(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = browser.new_page()
        pg.set_default_timeout(60_000)
        pg.goto(server)
        yield pg
        browser.close()


def ask(page, query, **fields):
    "Type a query (and fields), press Enter, wait for the answer or the message."
    for k, v in fields.items():
        if k == 'bm25': page.set_checked('#bm25', v)
        elif page.eval_on_selector(f'#{k}', 'e => e.tagName') == 'SELECT': page.select_option(f'#{k}', v)
        else: page.fill(f'#{k}', str(v))
    page.evaluate("document.getElementById('result').innerHTML = ''")
    page.fill('#query', query)
    page.press('#query', 'Enter')
    page.wait_for_selector('#result mark, #result .npm-error')


def test_types_a_query_and_sees_the_highlighted_answer(page):
    t0 = time.perf_counter()
    ask(page, 'The Banpo Bridge crosses the [MASK] in Seoul.', bm25=False, k=64)
    marks = page.locator('#result mark').all_inner_texts()
    assert marks, page.inner_text('#result')
    docs = dict(zip(FIGURE1_DOCS['title'], FIGURE1_DOCS['text']))
    first = page.locator('#result li.npm-answer').first
    title, snippet = first.locator('.npm-title').inner_text(), first.locator('.npm-snippet').inner_text()
    assert title in docs and marks[0] in docs[title], (title, marks[0])  # the phrase is cut from the document named
    assert marks[0] == first.locator('.npm-phrase').inner_text() and marks[0] in snippet
    assert page.locator('#result svg.npm-bars').count() == 2  # start and end neighbour distributions
    assert 'Answered in' in page.inner_text('#status')
    print(f'answer {marks[0]!r} from {title!r}; {time.perf_counter() - t0:.2f} s in the browser')


def test_closed_set_template_shows_labels(page):
    ask(page, 'The plot was dull and the acting was wooden. It was [MASK].', k=64)
    assert page.locator('#result svg.npm-bars').count() == 3
    assert 'terrible' in page.inner_html('#result svg.npm-bars >> nth=2')


@pytest.mark.parametrize('query, fields, says', [
    ('Thessaloniki is a city in Greece.', {}, 'has no [MASK]'),
    ('[MASK] is a city in [MASK].', {}, '2 [MASK]s'),
    ('A [MASK] city.', {'corpus': 'pasted', 'corpus_text': ''}, 'corpus is empty'),
    ('word ' * 2000 + '[MASK].', {'corpus': 'figure1'}, 'characters long'),
])
def test_bad_input_gets_a_friendly_message(page, query, fields, says):
    ask(page, query, **fields)
    text = page.inner_text('#result .npm-error')
    assert says in text and 'Traceback' not in page.content(), text


def test_pasted_corpus(page):
    ask(page, 'The Banpo Bridge crosses the [MASK].', corpus='pasted',
        corpus_text='# Banpo\nThe Banpo Bridge crosses the Han River in Seoul.')
    assert page.locator('#result .npm-title').first.inner_text() == 'Banpo'
    page.select_option('#corpus', 'figure1')


def test_korean_is_drawn_with_glyphs_not_boxes(page):
    """NEWCOMER-3: without a CJK font Debian's Chromium drew the Banpo Bridge's 반포대교 as empty boxes, all alike. Two
    different Hangul syllables, drawn in the page's own font, must look different."""
    page.evaluate("""() => { const d = document.createElement('div'); d.id = 'glyphs';
        d.style.cssText = 'position:fixed;top:0;left:0;background:#fff;color:#000;font-size:48px;line-height:1.2;z-index:9';
        for (const [id, t] of [['ban', '반'], ['gyo', '교']]) {
            const s = document.createElement('span'); s.id = id; s.textContent = t; d.appendChild(s); }
        document.body.appendChild(d); }""")
    try: ban, gyo = page.locator('#ban').screenshot(), page.locator('#gyo').screenshot()
    finally: page.evaluate("document.getElementById('glyphs').remove()")
    assert ban != gyo, ("Korean is drawn as empty boxes: this machine has no CJK font. Install one (Debian: apt-get install "
                        "fonts-wqy-microhei, as root; `make install` does it when run as root).")


def test_a_paste_the_server_refuses_unread_gets_the_app_advice(page):
    "A body over the server's limit is refused by waitress itself (a bare 413, no JSON): the page says what the app would."
    ask(page, 'Seoul is a [MASK].', corpus='pasted', corpus_text='Seoul is big. ' * 100_000)  # 1.4 MB
    text = page.inner_text('#result .npm-error')
    assert 'paste at most 20,000 characters' in text and 'did not answer' not in text, text
    page.select_option('#corpus', 'figure1')
