"""`make docs`: the book as a static site that works offline, built by Sphinx + myst-nb from the committed notebooks.

The notebooks are never executed here: a page shows the outputs committed with its notebook (`make book` writes them).
`python docs/site/build.py [OUT]` (default `_site/`) stages a copy of `nbs/` under `OUT/src/` the way nbdev's renderer
would show it (`#|` directive lines dropped, `#| hide` cells removed), adds the table of contents taken from
`nbs/index.ipynb` (its parts and chapters, in its order: the one list of the chapters) and an API page per module of
`npm_nb/_modidx.py` (autodoc, parameters from the docments), then runs Sphinx into `OUT/html/`. Open
`OUT/html/index.html`, or serve it: `python -m http.server -d OUT/html`. `nbdev_docs` (Quarto) is untouched: it still
builds `_docs/` from `nbs/` for whoever has Quarto.

`OUT/src/` is the builder's own: it lists what it wrote there in `OUT/src/.staged.json` and removes only files of
that list (a chapter that left the book leaves the site); a file it did not write stays. It refuses an `OUT/src/` that
holds files it would not write and has no such list (another folder's files, given as OUT by mistake).
"""
from __future__ import annotations
import ast, hashlib, json, re, shutil, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NBS, CONF = ROOT/'nbs', Path(__file__).resolve().parent
EXPERIMENTS = 'experiments'
STAGED: set[Path] = set()  # the page sources of this build
MANIFEST = '.staged.json'  # in OUT/src: the files the builder wrote there, the only ones it ever removes


class SiteError(Exception):
    "A wrong input of the builder (a folder, a notebook): the message says what is wrong and how to fix it."


def read_nb(p: Path) -> dict:
    "A notebook's JSON, or a sentence naming the file when it is not one."
    fix = f'fix it, or restore the committed one (`git checkout -- {p}`)'
    try: nb = json.loads(Path(p).read_text(encoding='utf-8'))
    except FileNotFoundError: raise SiteError(f'{p} is missing: {fix}') from None
    except (OSError, UnicodeDecodeError, ValueError) as e: raise SiteError(f'{p} is not a readable notebook ({e}): {fix}') from None
    if not (isinstance(nb, dict) and isinstance(nb.get('cells'), list)
            and all(isinstance(c, dict) and 'cell_type' in c and 'source' in c for c in nb['cells'])):
        raise SiteError(f'{p} is not a notebook (it needs a list of `cells`, each with a `cell_type` and a `source`): {fix}')
    return nb


def check_nbs(nbs: Path) -> Path:
    "The notebooks' folder, when it is one the site can be built from: a folder with its home page `index.ipynb`."
    nbs, fix = Path(nbs), 'pass --nbs the folder of the chapters (nbs/, or an executed copy of it)'
    if not nbs.is_dir(): raise SiteError(f'{nbs} is not a folder of notebooks: {fix}')
    if not (nbs/'index.ipynb').is_file():
        raise SiteError(f'{nbs} has no index.ipynb (the home page, whose list of chapters is the site\'s table of contents): {fix}')
    listed = [n for _, names in parts(nbs/'index.ipynb') for n in names]
    if lost := [n for n in listed if not (nbs/f'{n}.ipynb').is_file()]:
        raise SiteError(f"{nbs/'index.ipynb'} lists chapters that {nbs} does not hold ({', '.join(lost[:5])}"
                        f"{f' and {len(lost) - 5} more' if len(lost) > 5 else ''}): {fix}")
    return nbs


def parts(index: Path = NBS/'index.ipynb') -> list[tuple[str, list[str]]]:
    """The book's parts in order, each `(caption, [chapter, ...])`, read from the home page's markdown: a chapter is a
    link `[name](name.ipynb)`; a bold line `**Part** (...)` opens a part; chapters before the first part form 'Start'."""
    text = '\n'.join(''.join(c['source']) for c in read_nb(index)['cells'] if c['cell_type'] == 'markdown')
    out, seen = [('Start', [])], set()
    for line in text.splitlines():
        if m := re.match(r'\*\*(.+?)\*\*', line.strip()): out.append((m[1].strip(), []))
        for name in re.findall(r'\]\(([^)/]+)\.ipynb\)', line):
            if name not in seen: seen.add(name); out[-1][1].append(name)
    return [(cap, names) for cap, names in out if names]


def chapters(nbs: Path = NBS) -> list[str]:
    "Every chapter notebook of `nbs` (the home page and the experiments aside)."
    return sorted(p.stem for p in Path(nbs).glob('*.ipynb') if p.stem != 'index')


def modules(nbs: Path = NBS) -> list[str]:
    "Every module nbdev exports names into (`npm_nb/_modidx.py`), in the order of the chapters that export them."
    src = (ROOT/'npm_nb'/'_modidx.py').read_text()
    mods = set(ast.literal_eval(src[src.index('{'):])['syms'])
    order = {module_name(default_exp(Path(nbs)/f'{c}.ipynb')): i for i, c in enumerate(chapters(nbs))}
    return sorted(mods, key=lambda m: (order.get(m, len(order)), m))


def module_name(exp: str | None) -> str | None:
    "The module a `#| default_exp` names: `npm.losses` is `npm_nb.npm.losses`, `__init__` the package itself."
    return None if exp is None else 'npm_nb' if exp == '__init__' else f'npm_nb.{exp}'


def default_exp(nb: Path) -> str | None:
    for c in read_nb(nb)['cells']:
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


def staged_before(src: Path, plan: set[Path]) -> set[Path]:
    """The files an earlier build wrote into `src` (its `.staged.json`), the only ones this build may remove. Without
    that list, `src` may hold only files this build writes (`plan`): another file is someone's, and the build stops."""
    man = src/MANIFEST
    if src.exists() and not src.is_dir(): raise SiteError(f'{src} is a file, not the folder of the staged pages: remove it, or pass another OUT')
    if man.exists():
        try:
            listed = json.loads(man.read_text(encoding='utf-8'))
            if not isinstance(listed, list) or not all(isinstance(r, str) for r in listed): raise ValueError('not a list of paths')
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise SiteError(f'{man} is damaged ({e}): delete it and the files of an earlier build beside it, then build again') from None
        inside = [src/r for r in listed if not Path(r).is_absolute() and '..' not in Path(r).parts]
        if len(inside) < len(listed):
            raise SiteError(f'{man} lists paths outside {src}: it was not written by this builder; delete it and build again')
        return set(inside)
    foreign = sorted(p for p in src.rglob('*') if (p.is_file() or p.is_symlink()) and p not in plan) if src.is_dir() else []
    if foreign:
        names = ', '.join(str(p.relative_to(src)) for p in foreign[:5]) + (f' and {len(foreign) - 5} more' if len(foreign) > 5 else '')
        raise SiteError(f'{src} holds files this builder did not write ({names}) and no {MANIFEST}, its list of what it wrote '
                        f'there: nothing was changed. Build into an empty or new OUT (the site takes OUT/src, OUT/html and '
                        f'OUT/doctrees), or move those files out of {src}')
    return set()


def stage(src: Path, nbs: Path = NBS) -> list[str]:
    """Fill `src` with the pages: the notebooks as nbdev shows them, the table of contents, the API pages; remove the
    pages of an earlier build that left (only files listed in `src/.staged.json`). Returns the pages."""
    nbs, src = check_nbs(nbs), Path(src)
    mods, pages = modules(nbs), []
    STAGED.clear()
    exp_of = {c: default_exp(nbs/f'{c}.ipynb') for c in chapters(nbs)}
    sources = [p for p in sorted(nbs.rglob('*'))
               if not p.is_dir() and not any(part.startswith(('.', '_')) for part in p.relative_to(nbs).parts)]
    plan = {src/p.relative_to(nbs) for p in sources} | {src/'api'/'index.md'} | {src/'api'/f'{m}.rst' for m in mods}
    before = staged_before(src, plan)
    record = lambda files: (src.mkdir(parents=True, exist_ok=True),
                            (src/MANIFEST).write_text(json.dumps(sorted(str(f.relative_to(src)) for f in files), indent=0) + '\n'))
    record(before | plan)  # listed before written: a build stopped halfway still knows what it wrote
    for p in sources:
        rel = p.relative_to(nbs)
        dst = src/rel
        if p.suffix == '.ipynb':
            nb = show_as_nbdev(read_nb(p))
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
        else:
            STAGED.add(dst)
            if not dst.exists() or dst.stat().st_mtime < p.stat().st_mtime: dst.parent.mkdir(parents=True, exist_ok=True); shutil.copy2(p, dst)
    write_if_changed(src/'api'/'index.md', '# API\n\nEvery module of `npm_nb` and the names it exports (its `__all__`), '
                     'with signatures, docstrings and parameters, in the order of the chapters.\n\n'
                     + toctree(None, mods, hidden=False))
    for m in mods: write_if_changed(src/'api'/f'{m}.rst', api_page(m))
    pages += ['api/index'] + [f'api/{m}' for m in mods]
    for old in sorted(before - STAGED):  # a chapter or module that left leaves the site; what this builder did not write stays
        if old.is_file() or old.is_symlink(): old.unlink()
    record(STAGED)
    return pages


def build(out: Path = ROOT/'_site', quiet=True, nbs: Path = NBS) -> Path:
    "Stage the pages into `out/src` and build the site into `out/html`; returns the html folder."
    from sphinx.cmd.build import build_main
    out = Path(out).resolve(); src, html = out/'src', out/'html'
    for d in (out, html, out/'doctrees'):
        if d.exists() and not d.is_dir(): raise SiteError(f'{d} is a file: pass a folder as OUT (the site takes OUT/src, OUT/html and OUT/doctrees)')
    t0 = time.perf_counter()
    stage(src, nbs)
    args = ['-b', 'html', '-c', str(CONF), '-j', '1', *(['-q'] if quiet else []), str(src), str(html), '-d', str(out/'doctrees')]
    if rc := build_main(args): raise SystemExit(f'sphinx-build failed ({rc})')
    print(f'site built in {time.perf_counter() - t0:.0f} s: {html}/index.html (serve it: python -m http.server -d {html})')
    return html


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('out', nargs='?', default=ROOT/'_site', type=Path, help='the site goes to OUT/html (default _site)')
    ap.add_argument('--nbs', default=NBS, type=Path, help='the notebooks (default nbs/; e.g. an executed copy)')
    a = ap.parse_args(argv)
    try: build(a.out, nbs=a.nbs)
    except SiteError as e: print(f'error: {e}', file=sys.stderr); return 2
    return 0


if __name__ == '__main__': sys.exit(main())
