"""The book: every chapter of `nbs/` executed in a real kernel, its outputs written into the notebook (`make book`).

    make book                                    # every chapter, `#| slow` cells included (the author's command, not CI's)
    make book CHAPTERS="07_masking 08_losses"    # some chapters
    python tests/book.py --stale                 # print the chapters whose code changed since their outputs were written

The runner (`run_all`) is the one `tests/test_notebooks.py` uses to test each chapter: a fresh kernel (nbclient, as
`jupyter nbconvert --execute`) started in `nbs/`, every cell top to bottom, as a reader's Run All. The book then makes
the outputs fit for committing:

- no progress-bar noise: the kernel runs with tqdm and the Hugging Face bars off and their loggers at `error`;
  ipywidgets outputs keep only their text fallback; a line redrawn with `\\r` keeps its last state; what still looks
  like a bar (`tqdm.auto` in a kernel draws a widget whatever TQDM_DISABLE says) is dropped;
- none of this machine's paths: the repository root becomes a relative path, the home folder `~`, a temporary folder
  `<tmp>` (with mkdtemp's random name), the Python installation `<python>` or `<site-packages>`, a cell's file in a
  warning `<cell>`;
- small: an image at most 150 KB, all chapters' outputs together at most 3 MiB; a chapter over a limit is not written
  and the message names the chapter and the cell;
- seeded: the chapters seed their own random generators; the kernel adds `PYTHONHASHSEED=0` (the order of a set of
  strings) and `SOURCE_DATE_EPOCH=0`. Timings still vary from run to run;
- in `nbdev_clean`'s form (settings.ini: `clear_all = False`), so `make sync-check` changes nothing.

With the outputs it records a hash of the chapter's code cells (`metadata.npm_nb.code_sha256`, a key settings.ini lets
`nbdev_clean` keep). `tests/test_book.py` compares it with the code as it is now, without executing anything: a
chapter whose code changed since its outputs were written, or that has none yet, fails and is named, with the command
that brings it up to date. A chapter with no code cell has nothing to execute and is left alone.

The book lives beside the notebook tests rather than in the package: it is a tool for the authors of the notebooks
(it needs a Jupyter kernel and nbdev), not something a user of `npm_nb` imports, and it shares its runner with the
test that executes every chapter in CI."""
from __future__ import annotations
import base64, difflib, hashlib, json, os, re, sys, sysconfig, tempfile, time
from pathlib import Path

import nbformat, nbclient

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT/'nbs'
CHAPTERS = sorted(p for p in NBS.glob('*.ipynb') if not p.name.startswith('_'))  # not nbs/experiments/
CELL_TIMEOUT = 1800  # seconds for one cell
META_KEY = 'npm_nb'  # notebook metadata key kept by nbdev_clean (settings.ini: allowed_metadata_keys)
MAX_IMAGE = 150_000  # bytes, one image
MAX_TOTAL = 3 * 2**20  # bytes, the outputs of every chapter together
TEST_ENV = {'IN_TEST': '1'}  # as nbdev_test sets it
BOOK_ENV = {  # a reader's Run All, with the progress bars off and hash order fixed
    'TQDM_DISABLE': '1', 'HF_DATASETS_DISABLE_PROGRESS_BARS': '1', 'HF_HUB_DISABLE_PROGRESS_BARS': '1',
    'TRANSFORMERS_VERBOSITY': 'error', 'TRANSFORMERS_NO_ADVISORY_WARNINGS': '1', 'DATASETS_VERBOSITY': 'error',
    'TOKENIZERS_PARALLELISM': 'false', 'PYTHONHASHSEED': '0', 'SOURCE_DATE_EPOCH': '0',
    'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1', 'HF_DATASETS_OFFLINE': '1'}
WIDGET_MIMES = ('application/vnd.jupyter.widget-view+json', 'application/vnd.jupyter.widget-state+json')
BAR_LIKE = re.compile(r'\d+%\|[^\n|]*\|')  # what a tqdm bar's text looks like


class BookError(Exception):
    "A chapter that cannot go into the book as it ran (a limit exceeded, a file edited meanwhile); the message says which and why."


# ---- running a chapter (shared with tests/test_notebooks.py) ----

def flags(source: str) -> set:
    "The `#| flag` lines of a cell (`#| slow`, `#| gpu`); `#| eval: false` is no flag here: Run All runs it."
    return {m for m in re.findall(r'^#\|\s*(\w+)\s*$', source, re.M)}


def run_all(path: Path, skip: set = frozenset({'slow'}), timeout: int = CELL_TIMEOUT, env: dict = TEST_ENV):
    """Execute the notebook at `path` in a fresh kernel from its folder, as Run All does, and return it with its outputs;
    cells with a flag in `skip` print why they skip. `env` is added to the kernel's environment for this run."""
    nb = nbformat.read(path, as_version=4)
    for c in nb.cells:
        if c.cell_type == 'code' and (f := flags(c.source) & set(skip)):
            c.source = f"print('skipped: a #| {sorted(f)[0]} cell (NPM_NB_TEST_FLAGS={sorted(f)[0]} runs it)')"
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits the environment
    try:
        client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name='python3', allow_errors=False,
                                         store_widget_state=False, resources={'metadata': {'path': str(path.parent)}})
        client.execute()
    finally:
        for k, v in before.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v
    return nb


# ---- the code hash ----

def code_cells(nb) -> list[str]:
    "The normalized source of each non-empty code cell: trailing spaces and blank first/last lines dropped."
    out = []
    for c in nb['cells']:
        if c['cell_type'] != 'code': continue
        src = c['source'] if isinstance(c['source'], str) else ''.join(c['source'])
        src = '\n'.join(l.rstrip() for l in src.splitlines()).strip('\n')
        if src.strip(): out.append(src)
    return out


def code_hash(nb) -> str | None:
    "sha256 of the chapter's code cells (normalized), or None for a chapter without code."
    cells = code_cells(nb)
    return hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode()).hexdigest() if cells else None


def recorded_hash(nb) -> str | None:
    "The code hash stored with the outputs by the last `make book` of this chapter."
    return (nb.get('metadata', {}).get(META_KEY) or {}).get('code_sha256')


def staleness(path: Path) -> str | None:
    "Why the chapter at `path` needs `make book` (no outputs recorded, or code changed since), or None when it is up to date."
    nb = json.loads(Path(path).read_text(encoding='utf-8'))
    now, then = code_hash(nb), recorded_hash(nb)
    if now is None: return None
    if then is None: return 'has no outputs written by `make book` yet (no code hash in its metadata)'
    if then != now: return 'has code that changed since its outputs were written'
    return None


def stale_chapters(chapters=None) -> dict:
    "{stem: reason} for every chapter that needs `make book`."
    return {p.stem: why for p in (chapters or CHAPTERS) if (why := staleness(p))}


def stale_message(stale: dict) -> str:
    "What to tell the author about the chapters in `stale` ({stem: reason}): each one, and the command."
    lines = [f'{name} {why}: run `make book CHAPTERS={name}`' for name, why in stale.items()]
    if len(stale) > 1: lines.append(f'all of them: make book CHAPTERS="{" ".join(stale)}"')
    return '\n'.join(lines)


# ---- making outputs fit for committing ----

def path_rewrites(root: Path = ROOT) -> list[tuple[re.Pattern, str]]:
    "(pattern, replacement) for this machine's paths, the longest first: repository root, its symlinked folders, Python, home, tmp."
    pairs = {}
    def add(p, new):
        p = str(p).rstrip('/')
        if len(p) > 1 and p not in pairs: pairs[p] = new
    for link in [root/'.venv', *(root/'data').glob('*')]:  # folders that are links elsewhere (a shared venv, a data disk)
        if link.is_symlink(): add(link.resolve(), str(link.relative_to(root)))
    add(root, '.'); add(root.resolve(), '.')
    for name in ('purelib', 'platlib'): add(sysconfig.get_paths()[name], '<site-packages>')
    add(sysconfig.get_paths()['stdlib'], '<stdlib>')
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}: add(p, '<python>')
    add(Path.home(), '~')
    out = []
    for old in sorted(pairs, key=len, reverse=True):
        new = pairs[old]
        # `./x` reads badly in a sentence: the root followed by a path becomes the relative path itself
        if new == '.': out.append((re.compile(r'(?<![\w./-])' + re.escape(old) + r'/(?=[\w.-])'), ''))
        out.append((re.compile(r'(?<![\w./-])' + re.escape(old) + r'(?![\w.-])'), new))
    # any Python's packages (the kernel's may be another path to the same venv, or another venv)
    out.append((re.compile(r'(?<![\w./-])/[^\s\'"]*?/lib/python3\.\d+/site-packages(?![\w.-])'), '<site-packages>'))
    tmp = re.escape(tempfile.gettempdir().rstrip('/'))
    out.append((re.compile(r'(?<![\w./-])' + tmp + r'/ipykernel_\d+/\d+\.py(?![\w.-])'), '<cell>'))  # a cell, in a warning
    # mkdtemp's names: a prefix (`tmp` by default) and 8 random characters; `<tmp>` stands for the whole folder
    out.append((re.compile(r'(?<![\w./-])' + tmp + r'/(?:tmp|[\w.-]*[_-])[a-z0-9_]{8}(?![\w.-])'), '<tmp>'))
    out.append((re.compile(r'(?<![\w./-])' + tmp + r'(?![\w.-])'), '<tmp>'))
    return out


def scrub(text: str, rewrites) -> str:
    "`text` without this machine's paths."
    for pat, new in rewrites: text = pat.sub(new, text)
    return text


def last_state(text: str) -> str:
    "A stream's text as a terminal leaves it: of a line redrawn with `\\r`, only the last state."
    return '\n'.join(l.rstrip('\r').rsplit('\r', 1)[-1] for l in text.split('\n'))


def _text(v): return v if isinstance(v, str) else ''.join(v)


def no_bars(text: str) -> str:
    "A stream's text without the lines of a progress bar."
    return ''.join(l for l in text.splitlines(keepends=True) if not BAR_LIKE.search(l))


def tidy_outputs(nb, rewrites) -> list[str]:
    """Clean every code cell's outputs in place: widgets keep their text fallback (a tqdm bar's fallback, a bar at 0%,
    goes: tqdm.auto ignores TQDM_DISABLE in a kernel), `\\r` redraws keep their last state, bar lines and this machine's
    paths go. Return warnings about outputs that still look like progress bars."""
    warnings = []
    for i, c in enumerate(nb.cells):
        if c.cell_type != 'code': continue
        keep = []
        for o in c.get('outputs', []):
            if o.output_type == 'stream':
                o.text = scrub(no_bars(last_state(_text(o.text))), rewrites)
                if not o.text: continue
            elif o.output_type in ('display_data', 'execute_result'):
                widget = any(m in o.data for m in WIDGET_MIMES)
                for m in WIDGET_MIMES: o.data.pop(m, None)
                if not o.data: continue  # a widget with no text fallback
                if widget and BAR_LIKE.search(_text(o.data.get('text/plain', ''))): continue  # a progress bar widget
                for m, v in o.data.items():
                    if m.startswith('text/') or m == 'image/svg+xml': o.data[m] = scrub(_text(v), rewrites)
                    elif m.endswith('json'): o.data[m] = json.loads(scrub(json.dumps(v), rewrites))
            elif o.output_type == 'error':
                o.traceback = [scrub(t, rewrites) for t in o.traceback]; o.evalue = scrub(o.evalue, rewrites)
            keep.append(o)
            if BAR_LIKE.search(_text(o.get('data', {}).get('text/plain', ''))):
                warnings.append(f'cell {i} shows what looks like a progress bar (pass progress=False?)')
        c.outputs = keep
    nb.metadata.pop('widgets', None)
    return warnings


def image_bytes(mime: str, value) -> int | None:
    "Size in bytes of an image output (base64 decoded), or None when `mime` is no image."
    if not mime.startswith('image/'): return None
    v = _text(value)
    return len(v.encode()) if mime == 'image/svg+xml' else len(base64.b64decode(v))


def output_sizes(nb) -> list[tuple[int, int]]:
    "(cell index, bytes of its outputs as stored) for every code cell that has outputs."
    return [(i, len(json.dumps(c['outputs'], indent=1, ensure_ascii=False).encode()))
            for i, c in enumerate(nb['cells']) if c['cell_type'] == 'code' and c.get('outputs')]


def cell_head(nb, i: int) -> str:
    "The first line of cell `i` that is not a `#|` directive, to name the cell in a message."
    src = _text(nb['cells'][i]['source'])
    lines = [l for l in src.splitlines() if l.strip() and not l.startswith('#|')]
    return (lines[0][:70] if lines else '').strip()


def check_sizes(nb, name: str, others_total: int = 0):
    "Raise `BookError` when an image is over 150 KB, or all outputs (this chapter's plus `others_total`) over 3 MiB."
    for i, c in enumerate(nb['cells']):
        for o in c.get('outputs', []) if c['cell_type'] == 'code' else []:
            for m, v in o.get('data', {}).items():
                if (n := image_bytes(m, v)) is not None and n > MAX_IMAGE:
                    raise BookError(f'{name}, cell {i} ({cell_head(nb, i)!r}): an image of {n/1000:.0f} KB ({m}); the limit is '
                                    f'{MAX_IMAGE/1000:.0f} KB. Make the figure smaller (figsize about (8, 3.5), default dpi) or simpler.')
    sizes = output_sizes(nb)
    total = others_total + sum(n for _, n in sizes)
    if total > MAX_TOTAL:
        big = ', '.join(f'cell {i} ({cell_head(nb, i)!r}) {n/1024:.0f} KiB' for i, n in sorted(sizes, key=lambda x: -x[1])[:3])
        raise BookError(f'{name}: with its outputs ({sum(n for _, n in sizes)/1024:.0f} KiB; largest: {big}) the book\'s '
                        f'outputs come to {total/2**20:.2f} MiB; the limit is {MAX_TOTAL/2**20:.0f} MiB. Print less in its cells.')


def nbdev_form(nb) -> str:
    "The notebook as `nbdev_clean` writes it (with this project's settings.ini)."
    from execnb.nbio import dict2nb, nb2str
    from nbdev.clean import clean_nb
    from nbdev.config import get_config
    cfg = get_config(path=ROOT)
    d = dict2nb(json.loads(nbformat.writes(nb)))
    clean_nb(d, cfg.clear_all, cfg.get('allowed_metadata_keys').split(), cfg.get('allowed_cell_metadata_keys').split(),
             cfg.clean_ids)
    return nb2str(d)


def book_total(skip: Path | None = None) -> int:
    "Bytes of the outputs of every chapter as written now, leaving out the chapter `skip`."
    return sum(n for p in CHAPTERS if p != skip for _, n in output_sizes(json.loads(p.read_text(encoding='utf-8'))))


# ---- the book ----

def write_chapter(path: Path, run=run_all) -> dict:
    "Execute the chapter at `path` (slow cells too) and write it back with its outputs and code hash; return what it took."
    path = Path(path)
    text = path.read_text(encoding='utf-8')
    t0 = time.time()
    nb = run(path, skip=set(), env=BOOK_ENV)
    seconds = time.time() - t0
    warnings = tidy_outputs(nb, path_rewrites())
    nb.metadata[META_KEY] = {'code_sha256': code_hash(json.loads(text))}  # the code as it ran
    out = nbdev_form(nb)
    new = json.loads(out)
    check_sizes(new, path.stem, book_total(skip=path))
    if path.read_text(encoding='utf-8') != text:
        raise BookError(f'{path.stem}: nbs/{path.name} was edited while it ran; its outputs were not written. Run it again.')
    path.write_text(out, encoding='utf-8')
    images = sum(1 for c in new['cells'] for o in c.get('outputs', []) for m in o.get('data', {}) if m.startswith('image/'))
    return {'seconds': seconds, 'bytes': sum(n for _, n in output_sizes(new)), 'images': images, 'warnings': warnings}


def find_chapter(name: str) -> Path:
    "The chapter notebook named `name` (`07_masking`, `07_masking.ipynb` or `nbs/07_masking.ipynb`)."
    stem = Path(name).name.removesuffix('.ipynb')
    for p in CHAPTERS:
        if p.stem == stem: return p
    near = difflib.get_close_matches(stem, [p.stem for p in CHAPTERS], n=3)
    raise BookError(f'no chapter {stem!r} in nbs/' + (f'; did you mean {" or ".join(map(repr, near))}?' if near else ''))


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog='make book', description='Execute chapters of nbs/ and write their outputs into them.')
    ap.add_argument('chapters', nargs='*', help='chapter names (07_masking ...); default: every chapter')
    ap.add_argument('--stale', action='store_true', help='print the chapters that need `make book` and run nothing')
    a = ap.parse_args(argv)
    if a.stale:
        print(' '.join(stale_chapters())); return 0
    try: todo = [find_chapter(c) for c in a.chapters] if a.chapters else CHAPTERS
    except BookError as e: print(e, file=sys.stderr); return 2
    todo = [p for p in todo if code_hash(json.loads(p.read_text(encoding='utf-8')))]
    failed, t_all = [], time.time()
    for k, p in enumerate(todo, 1):
        print(f'[{k}/{len(todo)}] {p.stem} ...', flush=True)  # the kernel may print a line of its own
        t0 = time.time()
        try: r = write_chapter(p)
        except nbclient.exceptions.CellExecutionError as e:
            failed.append(p.stem); print(f'  {p.stem}: FAILED after {time.time() - t0:.0f} s, not written:\n{str(e)[-3000:]}', flush=True); continue
        except BookError as e:
            failed.append(p.stem); print(f'  {p.stem}: NOT WRITTEN after {time.time() - t0:.0f} s: {e}', flush=True); continue
        print(f"  {p.stem}: {r['seconds']:.0f} s, outputs {r['bytes']/1024:.1f} KiB, {r['images']} image(s)", flush=True)
        for w in r['warnings']: print(f'    warning: {p.stem}, {w}', flush=True)
    total = book_total()
    print(f'{len(todo) - len(failed)} of {len(todo)} chapters written in {(time.time() - t_all)/60:.1f} min; the book\'s outputs: '
          f'{total/2**20:.2f} MiB (limit {MAX_TOTAL/2**20:.0f} MiB)')
    if failed: print(f'not written: {" ".join(failed)}  (make book CHAPTERS="{" ".join(failed)}" after the fix)')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
