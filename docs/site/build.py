"""`make docs`: the book as a static site that works offline, built by Sphinx + myst-nb from the committed notebooks.

The notebooks are never executed here: a page shows the outputs committed with its notebook (`make book` writes them).
`python docs/site/build.py [OUT]` (default `_site/`) stages a copy of `nbs/` under `OUT/src/` the way nbdev's renderer
would show it (`#|` directive lines dropped, `#| hide` cells removed), adds the table of contents taken from
`nbs/index.ipynb` (its parts and chapters, in its order: the one list of the chapters) and an API page per module of
`npm_nb/_modidx.py` (autodoc, parameters from the docments), then runs Sphinx into `OUT/html/`. Open
`OUT/html/index.html`, or serve it: `python -m http.server -d OUT/html`. `nbdev_docs` (Quarto) is untouched: it still
builds `_docs/` from `nbs/` for whoever has Quarto.
"""
from __future__ import annotations
import ast, hashlib, json, re, shutil, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NBS, CONF = ROOT/'nbs', Path(__file__).resolve().parent
EXPERIMENTS = 'experiments'
STAGED: set[Path] = set()  # the page sources of this build


def parts(index: Path = NBS/'index.ipynb') -> list[tuple[str, list[str]]]:
    """The book's parts in order, each `(caption, [chapter, ...])`, read from the home page's markdown: a chapter is a
    link `[name](name.ipynb)`; a bold line `**Part** (...)` opens a part; chapters before the first part form 'Start'."""
    text = '\n'.join(''.join(c['source']) for c in json.loads(index.read_text())['cells'] if c['cell_type'] == 'markdown')
    out, seen = [('Start', [])], set()
    for line in text.splitlines():
        if m := re.match(r'\*\*(.+?)\*\*', line.strip()): out.append((m[1].strip(), []))
        for name in re.findall(r'\]\(([^)/]+)\.ipynb\)', line):
            if name not in seen: seen.add(name); out[-1][1].append(name)
    return [(cap, names) for cap, names in out if names]


def chapters() -> list[str]:
    "Every chapter notebook of `nbs/` (the home page and the experiments aside)."
    return sorted(p.stem for p in NBS.glob('*.ipynb') if p.stem != 'index')


def modules() -> list[str]:
    "Every module nbdev exports names into (`npm_nb/_modidx.py`), in the order of the chapters that export them."
    src = (ROOT/'npm_nb'/'_modidx.py').read_text()
    mods = set(ast.literal_eval(src[src.index('{'):])['syms'])
    order = {module_name(default_exp(NBS/f'{c}.ipynb')): i for i, c in enumerate(chapters())}
    return sorted(mods, key=lambda m: (order.get(m, len(order)), m))


def module_name(exp: str | None) -> str | None:
    "The module a `#| default_exp` names: `npm.losses` is `npm_nb.npm.losses`, `__init__` the package itself."
    return None if exp is None else 'npm_nb' if exp == '__init__' else f'npm_nb.{exp}'


def default_exp(nb: Path) -> str | None:
    for c in json.loads(nb.read_text())['cells']:
        if c['cell_type'] == 'code' and (m := re.search(r'^#\|\s*default_exp\s+(\S+)', ''.join(c['source']), re.M)):
            return m[1]
    return None


def directives(src: str) -> tuple[dict, str]:
    "nbdev's `#| name value` lines at the top of a code cell, and the code without them."
    lines, found = src.splitlines(), {}
    while lines and (m := re.match(r'#\|\s*([\w-]+):?\s*(.*)', lines[0])): found[m[1]] = m[2].strip(); lines.pop(0)
    return found, '\n'.join(lines)


def show_as_nbdev(nb: dict) -> dict:
    "The notebook as nbdev's renderer shows it: `#|` lines dropped, `hide` and directive-only cells removed, echo/output."
    cells = []
    for c in nb['cells']:
        if c['cell_type'] == 'code':
            d, src = directives(''.join(c['source']))
            if 'hide' in d or not src.strip(): continue
            tags = list(c.get('metadata', {}).get('tags', []))
            if d.get('echo') == 'false': tags.append('remove-input')
            if d.get('output') == 'false': tags.append('remove-output')
            c = {**c, 'source': src, 'metadata': {**c.get('metadata', {}), 'tags': tags}}
        cells.append(c)
    return {**nb, 'cells': cells}


def md_cell(text: str) -> dict:
    return {'id': 'site-' + hashlib.sha1(text.encode()).hexdigest()[:8], 'cell_type': 'markdown', 'metadata': {}, 'source': text}


def toctree(caption: str | None, entries: list[str], hidden=True, glob=False) -> str:
    opts = (':hidden:\n' if hidden else '') + (f':caption: {caption}\n' if caption else '') + (':glob:\n' if glob else '')
    return '```{toctree}\n:maxdepth: 1\n' + opts + '\n' + '\n'.join(entries) + '\n```\n'


def write_if_changed(path: Path, text: str):
    "Write only when the text differs, so that Sphinx rebuilds only the pages that changed."
    STAGED.add(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text: path.write_text(text)


def api_page(m: str) -> str:
    """A module's API page: autodoc of its functions and classes, then its other exported names (constants), which
    `automodule` leaves out when they carry no `#:` comment, one `autodata` entry each."""
    import importlib, inspect
    mod = importlib.import_module(m)
    own = lambda o: callable(o) and getattr(o, '__module__', None) == m  # functions (wrapped too) and classes
    rest = [n for n in getattr(mod, '__all__', []) if not own(getattr(mod, n, None))]
    kind = lambda n: 'autofunction' if callable(getattr(mod, n, None)) and not inspect.isclass(getattr(mod, n)) else 'autodata'
    return (f'``{m}``\n{"=" * (len(m) + 4)}\n\n.. automodule:: {m}\n   :members:\n\n'
            + ''.join(f'.. {kind(n)}:: {m}.{n}\n' + ('   :no-value:\n' if kind(n) == 'autodata' else '') + '\n' for n in rest))


def stage(src: Path, nbs: Path = NBS) -> list[str]:
    "Fill `src` with the pages: the notebooks as nbdev shows them, the table of contents, the API pages. Returns the pages."
    mods, pages = modules(), []
    nbs = Path(nbs); STAGED.clear()
    exp_of = {c: default_exp(nbs/f'{c}.ipynb') for c in chapters()}
    for p in sorted(nbs.rglob('*')):
        rel = p.relative_to(nbs)
        if p.is_dir() or any(part.startswith(('.', '_')) for part in rel.parts): continue
        dst = src/rel
        if p.suffix == '.ipynb':
            nb = show_as_nbdev(json.loads(p.read_text()))
            if rel == Path('index.ipynb'):  # the table of contents, from the home page's own list of parts
                tocs = [toctree(cap, names) for cap, names in parts(nbs/'index.ipynb')]
                tocs += [toctree('More', [f'{EXPERIMENTS}/README', 'api/index'])]
                nb['cells'].append(md_cell('\n'.join(tocs)))  # hidden toctrees: the sidebar, nothing on the page
            elif (mod := module_name(exp_of.get(p.stem))) in mods:
                nb['cells'].append(md_cell(f'The API of this chapter: [`{mod}`](api/{mod}.rst).'))
            write_if_changed(dst, json.dumps(nb, indent=1, ensure_ascii=False))
            pages.append(str(rel.with_suffix('')))
        elif rel == Path(EXPERIMENTS)/'README.md':
            write_if_changed(dst, p.read_text() + '\n' + toctree(None, ['*'], glob=True))
            pages.append(str(rel.with_suffix('')))
        elif not dst.exists() or dst.stat().st_mtime < p.stat().st_mtime:
            dst.parent.mkdir(parents=True, exist_ok=True); shutil.copy2(p, dst)
    write_if_changed(src/'api'/'index.md', '# API\n\nEvery module of `npm_nb` and the names it exports (its `__all__`), '
                     'with signatures, docstrings and parameters, in the order of the chapters.\n\n'
                     + toctree(None, mods, hidden=False))
    for m in mods: write_if_changed(src/'api'/f'{m}.rst', api_page(m))
    pages += ['api/index'] + [f'api/{m}' for m in mods]
    for old in [*src.rglob('*.ipynb'), *src.rglob('*.md'), *src.rglob('*.rst')]:  # a chapter or module that left leaves the site
        if old not in STAGED: old.unlink()
    return pages


def build(out: Path = ROOT/'_site', quiet=True, nbs: Path = NBS) -> Path:
    "Stage the pages into `out/src` and build the site into `out/html`; returns the html folder."
    from sphinx.cmd.build import build_main
    out = Path(out).resolve(); src, html = out/'src', out/'html'
    t0 = time.perf_counter()
    stage(src, nbs)
    args = ['-b', 'html', '-c', str(CONF), '-j', '1', *(['-q'] if quiet else []), str(src), str(html), '-d', str(out/'doctrees')]
    if rc := build_main(args): raise SystemExit(f'sphinx-build failed ({rc})')
    print(f'site built in {time.perf_counter() - t0:.0f} s: {html}/index.html (serve it: python -m http.server -d {html})')
    return html


if __name__ == '__main__':
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('out', nargs='?', default=ROOT/'_site', type=Path, help='the site goes to OUT/html (default _site)')
    ap.add_argument('--nbs', default=NBS, type=Path, help='the notebooks (default nbs/; e.g. an executed copy)')
    a = ap.parse_args()
    build(a.out, nbs=a.nbs)
