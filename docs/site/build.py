"""`make docs`: the book as a static site that works offline, built by Sphinx + myst-nb from the committed notebooks.

The notebooks are never executed here: a page shows the outputs committed with its notebook (`make book` writes them).
`python docs/site/build.py [OUT]` (default `_site/`) stages a copy of `nbs/` under `OUT/src/` the way nbdev's renderer
would show it (`#|` directive lines dropped, `#| hide` cells removed), adds the table of contents taken from
`nbs/index.ipynb` (its parts and chapters, in its order: the one list of the chapters) and an API page per module of
`npm_nb/_modidx.py` (autodoc, parameters from the docments, a link to the chapter that explains it), the docs
(`docs/*.md`, `README.md`) and the results (`results/README.md`, the findings, every published table and figure, the
notes of the runs they cite) as pages, then runs Sphinx into `OUT/html/`. On the staged copy only (the notebooks are not
edited): chapter titles get their number, "chapter NN", `NN_name`, cited docs and backticked exported names become
links, each experiment page ends with the tables and figures of its committed run, each figure gets an alt text from
the sentence after it, and a glossary word's chapter comes first in the search. Open
`OUT/html/index.html`, or serve it: `python -m http.server -d OUT/html`. `nbdev_docs` (Quarto) is untouched: it still
builds `_docs/` from `nbs/` for whoever has Quarto.

`OUT/src/` is the builder's own: it lists what it wrote there in `OUT/src/.staged.json` and removes only files of
that list (a chapter that left the book leaves the site); a file it did not write stays. It refuses an `OUT/src/` that
holds files it would not write and has no such list (another folder's files, given as OUT by mistake).
"""
from __future__ import annotations
import ast, hashlib, json, re, shutil, sys, time
from pathlib import Path
from urllib.parse import urlsplit, unquote

ROOT = Path(__file__).resolve().parents[2]
NBS, CONF = ROOT/'nbs', Path(__file__).resolve().parent
EXPERIMENTS = 'experiments'
STAGED: set[Path] = set()  # the page sources of this build
# Search terms whose defining chapter comes first in the site's search (an index entry scores above any word of the
# text and any API name): the terms of the glossary, at the chapter that explains them.
KEYWORDS = {'07_masking': ['co-occurrence', 'co-occurrence span masking', 'span masking', 'masking'],
            '08_losses': ['contrastive loss', 'in-batch negatives', 'NPM-single'],
            '09_training': ['DDP', 'training'], '06_blocks': ['blocks'], '10_datastore': ['datastore', 'fp16 memmap'],
            '11_search': ['exact search', 'kNN'], '12_index': ['HNSW', 'IVF-PQ', 'FAISS'],
            '13_inference': ['BM25', 'phrase score', 'start/end neighbours', 'inference'],
            '14_evaluation': ['macro EM', 'EM', 'exact match', 'fuzzy verbalizer', 'verbalizer', 'AUC'],
            '16_replug': ['LSR', 'REPLUG'], '18_realm': ['REALM'], '19_realm_pretraining': ['salient-span masking'],
            '21_batch': ['papermill', 'profile']}
# The part of docs/equations.md ("NPM in equations") a method chapter implements: pointed at under its title.
EQUATIONS = {'07_masking': 'training', '08_losses': 'training', '09_training': 'training', '13_inference': 'inference',
             '14_evaluation': 'metrics'}
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


def first_sentence(md: str, limit: int = 300) -> str:
    "A markdown text's first sentence as plain text (no markup, links as their text), at most `limit` characters."
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', re.sub(r'^#+\s.*$', '', md, flags=re.M))
    text = ' '.join(re.sub(r'[*_`$]|\{[\w:]+\}', '', text).split())
    m = re.match(r'(.+?[.!?:])(\s|$)', text)
    text = m[1] if m else text
    return text if len(text) <= limit else text[:limit - 1].rsplit(' ', 1)[0] + '…'


def alt_texts(nb: dict) -> dict:
    """Each figure of a notebook gets an alt text that says what it shows: the first sentence of the markdown cell right
    after it (the chapters follow a figure with a sentence saying what it shows), else of the one before it."""
    cells = nb['cells']
    for i, c in enumerate(cells):
        if c['cell_type'] != 'code' or not any('image/png' in o.get('data', {}) or 'image/svg+xml' in o.get('data', {})
                                               for o in c.get('outputs', [])):
            continue
        near = [cells[j] for j in (i + 1, i - 1) if 0 <= j < len(cells) and cells[j]['cell_type'] == 'markdown']
        if near and (alt := first_sentence(''.join(near[0]['source']))):
            meta = c.setdefault('metadata', {}).setdefault('mystnb', {})
            meta.setdefault('image', {})['alt'] = 'Figure: ' + alt
    return nb


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


def api_page(m: str, chapter: tuple[str, str] | None = None) -> str:
    """A module's API page: a link to the chapter that explains it (`chapter`: its name and title), autodoc of its
    functions and classes, then its other exported names (constants), which `automodule` leaves out when they carry no
    `#:` comment, one `autodata` entry each."""
    import importlib, inspect
    mod = importlib.import_module(m)
    own = lambda o: callable(o) and getattr(o, '__module__', None) == m  # functions (wrapped too) and classes
    rest = [n for n in getattr(mod, '__all__', []) if not own(getattr(mod, n, None))]
    kind = lambda n: 'autofunction' if callable(getattr(mod, n, None)) and not inspect.isclass(getattr(mod, n)) else 'autodata'
    told = f'Explained, with examples and tests, in :doc:`{chapter[1]} </{chapter[0]}>`.\n\n' if chapter else ''
    return (f'``{m}``\n{"=" * (len(m) + 4)}\n\n{told}.. automodule:: {m}\n   :members:\n\n'
            + ''.join(f'.. {kind(n)}:: {m}.{n}\n' + ('   :no-value:\n' if kind(n) == 'autodata' else '') + '\n' for n in rest))


# ---------------------------------------------------------------- pages beyond the notebooks, and links between pages

# Markdown files of the repository that are pages of the site, at the same path under OUT/src as in the repository
# (nbs/ is the site's root): the docs, the README, the results page with its findings, tables, benchmarks and the
# notes of the runs it cites. Figures of the results are copied beside their tables.
DOC_PAGES = ['README.md', 'docs/*.md', 'results/README.md', 'results/findings.md', 'results/history.md',
             'results/tables/*.md',
             'results/benchmarks/*.md', 'results/runs/README.md', 'results/runs/*/*/README.md', 'results/runs/*/*/NOTE.md']
DOC_FILES = ['results/figures/*.png']


def doc_sources() -> tuple[list[Path], list[Path]]:
    "The repository's markdown pages of the site and the other files they show (figures), as paths under ROOT."
    pick = lambda pats: sorted({p for pat in pats for p in ROOT.glob(pat) if p.is_file() and not p.is_symlink()})
    return pick(DOC_PAGES), pick(DOC_FILES)


def site_path(repo_rel: str) -> str:
    "Where a repository file is in OUT/src: a file of nbs/ at its path inside it, any other at its own path."
    p = Path(repo_rel)
    return str(Path(*p.parts[1:])) if p.parts[:1] == ('nbs',) and len(p.parts) > 1 else str(p)


def _rel(target: str, page: str) -> str:
    "The relative link from the page `page` (a path under OUT/src) to `target` (another)."
    import os.path
    return os.path.relpath(target, os.path.dirname(page) or '.')


class Linker:
    """Turns mentions into links, on the staged copy only: "chapter 10" and "chapters 10-13", "experiment 05",
    `NN_name` (a chapter or an experiment), a cited doc (`docs/reference.md`, `results/README.md`) and a backticked
    exported name (`span_mask`, `NPM.predict`, `npm_nb.npm.losses`, from npm_nb/_modidx.py) become links; a relative
    link of a doc page is pointed at the staged file, or becomes plain text naming the repository path when the site
    does not hold it."""
    def __init__(self, nbs: Path, files: set[str], exported: dict[str, list[str]], modules: list[str]):
        self.nbs, self.files, self.exported, self.modules = Path(nbs), files, exported, set(modules)
        self.chapter = {c: f'{c}.ipynb' for c in chapters(nbs)}
        self.number = {}
        for c in chapters(nbs): self.number.setdefault(str(int(c[:2])), c)
        exps = sorted(p.stem for p in (Path(nbs)/EXPERIMENTS).glob('*.ipynb'))
        self.chapter.update({e: f'{EXPERIMENTS}/{e}.ipynb' for e in exps})
        self.experiment = {}
        for e in exps: self.experiment.setdefault(e.split('_')[0], e); self.experiment.setdefault(str(int(e[:2])), e)

    TOKEN = re.compile(r'(?P<code>(?P<tick>`+)(?P<c>.+?)(?P=tick))|(?P<link>!?\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]\((?P<url>[^)\s]*)(?:\s+"[^"]*")?\))'
                       r'|(?P<html><[^>\n]+>)|(?P<math>\$\$?[^$\n]+\$\$?)|(?P<bare>https?://\S+)|(?P<role>\{[\w:]+\}`[^`]*`)')
    CHAPTERS = re.compile(r'\b(?P<word>[Cc]hapters?|[Ee]xperiments?)\s+(?P<nums>\d{1,2}[a-z]?(?:\s*(?:-|–|,|and|or|to)\s*\d{1,2}[a-z]?)*)(?!\d|\.\d|[\w-])')
    STEM = re.compile(r'(?<![\w/.-])(\d\d[a-z]?_[a-z][a-z0-9_]*?)(?![\w-]|\.(?:ipynb|md|py|csv|png|json)\b)')
    DOC = re.compile(r'(?<![\w/.-])((?:docs|results)/[\w./-]+\.md|README\.md)(?![\w/-])')

    def page_link(self, text: str, target: str, page: str) -> str:
        return f'[{text}]({_rel(target, page)})'

    def chapter_target(self, num: str, experiment: bool) -> str | None:
        n = num.lstrip('0') or '0'
        if experiment: return self.chapter.get(self.experiment.get(num) or self.experiment.get(n) or '')
        return self.chapter.get(self.number.get(n, ''))

    def prose(self, s: str, page: str) -> str:
        "Links in a stretch of prose (no code, link, HTML or math in it)."
        def chap(m):
            exp = m['word'].lower().startswith('experiment')
            nums = re.split(r'(\d{1,2}[a-z]?)', m['nums'])
            targets = [self.chapter_target(x, exp) for x in nums[1::2]]
            if not all(targets): return m[0]
            if len(targets) == 1: return self.page_link(m[0], targets[0], page)
            out = m['word'] + m[0][len(m['word']):m[0].index(m['nums'])]
            for i, piece in enumerate(nums): out += self.page_link(piece, targets[i // 2], page) if i % 2 else piece
            return out
        s = self.CHAPTERS.sub(chap, s)
        parts = re.split(r'(\[[^\]]*\]\([^)]*\))', s)  # the links just made stay as they are
        for i in range(0, len(parts), 2):
            parts[i] = self.STEM.sub(lambda m: self.page_link(m[1], self.chapter[m[1]], page) if m[1] in self.chapter else m[0], parts[i])
            parts[i] = self.DOC.sub(lambda m: self.page_link(m[1], m[1], page) if m[1] in self.files else m[0], parts[i])
        return ''.join(parts)

    def code(self, tick: str, c: str, page: str, mod: str | None) -> str:
        "A backticked name: a link to its chapter, its doc page or its API entry, when it is one."
        whole = f'{tick}{c}{tick}'
        if '<' in c or '>' in c or '`' in c: return whole
        if c in self.files and c.endswith('.md'): return f'[{whole}]({_rel(c, page)})'
        m = re.fullmatch(r'(?P<name>\w[\w.]*?)(?P<call>\(.*\))?', c)
        if not m: return whole
        name = m['name']
        head = name.split('.')[0]
        if head in self.chapter: return f'[{whole}]({_rel(self.chapter[head], page)})'
        if name in self.modules: return '{py:mod}' + f'`{c} <{name}>`'
        full = self.exported.get(name, [])
        if len(full) > 1 and mod: full = [f for f in full if f.startswith(mod + '.')] or full
        if len(full) == 1 and (name.startswith('npm_nb.') or '_' in name or name[:1].isupper() or len(name) > 7):
            return '{py:obj}' + f'`{c} <{full[0]}>`'
        return whole

    def doc_link(self, m: re.Match, src_repo: str, page: str) -> str:
        "A relative link of a doc page, pointed at the staged file; plain text naming the repository path if the site lacks it."
        link, url = m['link'], m['url']
        s = urlsplit(url)
        if s.scheme or url.startswith(('#', '/', 'mailto:')) or not s.path: return link
        import os.path
        repo = os.path.normpath(os.path.join(os.path.dirname(src_repo), unquote(s.path)))
        staged = site_path(repo)
        if staged in self.files: return link.replace(f']({url}', f']({_rel(staged, page)}' + (f'#{s.fragment}' if s.fragment else ''), 1)
        text = link[link.index('[') + 1:link.index('](')]
        if link.startswith('!'): return f'*({text}: `{repo}`)*'
        return text if repo.rstrip('/') in text else f'{text} (`{repo}`)'

    def markdown(self, text: str, page: str, src_repo: str | None = None, mod: str | None = None) -> str:
        """A markdown text of the page `page` with its mentions linked; `src_repo`: its repository path, for a doc page's
        links. A table right under a line of text gets the blank line MyST needs to see it as a table."""
        out, fence = [], None
        for line in text.split('\n'):
            if (not fence and line.startswith('|') and out and out[-1].strip() and not out[-1].lstrip().startswith('|')
                    and not re.match(r'\s*(`{3,}|~{3,})', out[-1])): out.append('')
            f = re.match(r'\s*(`{3,}|~{3,})', line)
            if fence:
                if f and f[1][0] == fence[0] and len(f[1]) >= len(fence): fence = None
                out.append(line); continue
            if f: fence = f[1]; out.append(line); continue
            if re.match(r'\s*#{1,6}\s', line) or line.startswith('    ') and not line.strip().startswith(('-', '|', '*')):
                out.append(line); continue
            pieces, at = [], 0
            for m in self.TOKEN.finditer(line):
                pieces.append(self.prose(line[at:m.start()], page)); at = m.end()
                if m['code']: pieces.append(self.code(m['tick'], m['c'], page, mod))
                elif m['link'] and src_repo is not None: pieces.append(self.doc_link(m, src_repo, page))
                else: pieces.append(m[0])
            pieces.append(self.prose(line[at:], page))
            out.append(''.join(pieces))
        return '\n'.join(out)


def exported_names(mods: list[str]) -> dict[str, list[str]]:
    """Each exported name of `npm_nb/_modidx.py` that has an API entry (its module's `__all__`, or a method of such a
    class), under its short name (`span_mask`, `NPM.predict`) and its full name, mapped to its full names."""
    import importlib
    src = (ROOT/'npm_nb'/'_modidx.py').read_text()
    syms = ast.literal_eval(src[src.index('{'):])['syms']
    out: dict[str, list[str]] = {}
    for m in mods:
        try: public = set(getattr(importlib.import_module(m), '__all__', []))
        except Exception: continue
        for full in syms.get(m, {}):
            short = full[len(m) + 1:]
            if short.split('.')[0] not in public or any(p.startswith('_') for p in short.split('.')): continue
            for key in (short, full): out.setdefault(key, []).append(full)
    return out


def title_of(nb: dict) -> str | None:
    "The `# Title` a notebook opens with."
    for c in nb['cells']:
        if c['cell_type'] == 'markdown' and (m := re.search(r'^#\s+(.+)$', ''.join(c['source']), re.M)): return m[1].strip()
    return None


def numbered(nb: dict, chapter: str) -> dict:
    "The chapter with its number in its title (`# 8. Losses`), so the sidebar, the page and search show it."
    n, cells, done = str(int(chapter[:2])), [], False
    for c in nb['cells']:
        if not done and c['cell_type'] == 'markdown' and re.search(r'^#\s', ''.join(c['source']), re.M):
            c = {**c, 'source': re.sub(r'^#\s+(.+)$', lambda m: f'# {n}. {m[1]}', ''.join(c['source']), count=1, flags=re.M)}
            done = True
        cells.append(c)
    return {**nb, 'cells': cells}


def _meta(p: Path) -> dict:
    try: return json.loads(p.with_name(p.name[:-len(p.suffix)] + '.meta.json').read_text(encoding='utf-8'))
    except (OSError, ValueError): return {}


def results_of(exp: str, exps: list[str]) -> tuple[list[Path], list[Path]]:
    """The committed tables (`results/tables/*.md`) and figures (`results/figures/*.png`) an experiment wrote: the
    `step` of their `.meta.json`, else the experiment whose number their name starts with."""
    def step(p: Path) -> str | None:
        if s := _meta(p).get('step'): return s
        num = p.name.split('_')[0]
        return next((e for e in exps if e.split('_')[0] == num), None)
    pick = lambda d, ext: sorted(p for p in (ROOT/'results'/d).glob(f'*.{ext}') if '.' not in p.stem and step(p) == exp)
    return pick('tables', 'md'), pick('figures', 'png')


EMBED_MAX = 12_000  # a table longer than this (characters) is linked, not shown in the experiment's page


def results_section(exp: str, page: str, exps: list[str]) -> str | None:
    """The section "Results of the committed run" of an experiment's page: its figures (captioned, with alt texts
    from their records) and its tables (shown, or linked when long), from the results published under `results/`."""
    tables, figures = results_of(exp, exps)
    if not tables and not figures: return None
    runs = sorted({m['run'] for p in tables + figures if (m := _meta(p)).get('run')})
    out = ['## Results of the committed run\n',
           'The notebook above is shown as committed, without outputs. These are the tables and figures it wrote in '
           + (f"the run{'s' if len(runs) > 1 else ''} {', '.join(f'`{r}`' for r in runs)} " if runs else 'the runs ')
           + f"published under `results/`; [the results page]({_rel('results/README.md', page)}) puts them beside the paper's numbers.\n"]
    for f in figures:
        m = _meta(f)
        title = m.get('title') or f.stem.replace('_', ' ')
        caption = ' '.join(x for x in [m.get('caption', ''), f"(run `{m['run']}`)" if m.get('run') else ''] if x)
        alt = re.sub(r'[\[\]\n]', ' ', f'Figure: {title}. {m.get("caption", "")}').strip()
        out.append(f'### Figure: {title}\n\n![{alt}]({_rel(f"results/figures/{f.name}", page)})\n\n*{title}.* {caption}\n')
    for t in tables:
        text = t.read_text(encoding='utf-8')
        head, _, body = text.partition('\n')
        title = head.lstrip('# ').strip() if head.startswith('#') else t.stem
        link = _rel(f'results/tables/{t.name}', page)
        if len(text) > EMBED_MAX:
            out.append(f'### Table: {title}\n\nA long table ({len(text.splitlines())} lines): [on its own page]({link}).\n')
        else:
            body = re.sub(r'^(#+)\s', lambda m: '###' + m[1] + ' ', body, flags=re.M)
            out.append(f'### Table: {title}\n\n{body.strip()}\n\n([the table on its own page]({link}))\n')
    return '\n'.join(out)


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
    """Fill `src` with the pages: the notebooks as nbdev shows them (chapters numbered, mentions linked, each
    experiment with the results of its committed run), the docs and the results as pages, the table of contents, the
    API pages; remove the pages of an earlier build that left (only files listed in `src/.staged.json`). Returns the pages."""
    nbs, src = check_nbs(nbs), Path(src)
    mods, pages = modules(nbs), []
    STAGED.clear()
    exp_of = {c: default_exp(nbs/f'{c}.ipynb') for c in chapters(nbs)}
    chapter_of = {module_name(e): c for c, e in exp_of.items() if e}
    sources = [p for p in sorted(nbs.rglob('*'))
               if not p.is_dir() and not any(part.startswith(('.', '_')) for part in p.relative_to(nbs).parts)]
    doc_pages, doc_files = doc_sources()
    doc_rel = lambda p: str(p.relative_to(ROOT))
    plan = ({src/p.relative_to(nbs) for p in sources} | {src/'api'/'index.md'} | {src/'api'/f'{m}.rst' for m in mods}
            | {src/doc_rel(p) for p in doc_pages + doc_files})
    before = staged_before(src, plan)
    record = lambda files: (src.mkdir(parents=True, exist_ok=True),
                            (src/MANIFEST).write_text(json.dumps(sorted(str(f.relative_to(src)) for f in files), indent=0) + '\n'))
    record(before | plan)  # listed before written: a build stopped halfway still knows what it wrote
    files = {str(f.relative_to(src)) for f in plan}
    link = Linker(nbs, files, exported_names(mods), mods)
    exps = sorted(p.stem for p in (nbs/EXPERIMENTS).glob('*.ipynb'))
    titles = {c: title_of(read_nb(nbs/f'{c}.ipynb')) or c for c in chapters(nbs)}
    more = [d for d in ['results/README', 'docs/equations', 'docs/glossary', 'docs/references', 'docs/reference',
                        'docs/python', 'docs/gpu', 'docs/development', 'README'] if f'{d}.md' in files]
    for p in sources:
        rel = p.relative_to(nbs)
        dst, page = src/rel, str(rel)
        if p.suffix == '.ipynb':
            nb = alt_texts(show_as_nbdev(read_nb(p)))
            mod = module_name(exp_of.get(p.stem)) if rel.parent == Path('.') else None
            for c in nb['cells']:
                if c['cell_type'] == 'markdown': c['source'] = link.markdown(''.join(c['source']), page, f'nbs/{rel}', mod)
            if rel == Path('index.ipynb'):  # the table of contents, from the home page's own list of parts
                tocs = [toctree(cap, [f'{n}' for n in names]) for cap, names in parts(nbs/'index.ipynb')]
                tocs += [toctree('More', [f'{EXPERIMENTS}/README', *more, 'api/index'])]
                nb['cells'].append(md_cell('\n'.join(tocs)))  # hidden toctrees: the sidebar, nothing on the page
            elif rel.parent == Path('.'):
                nb = numbered(nb, p.stem)
                if (part := EQUATIONS.get(p.stem)) and 'docs/equations.md' in files:
                    nb['cells'].insert(1, md_cell(f'*In equations:* the {part} part of [NPM in equations]'
                                                  f'(docs/equations.md#{part}), numbered, with where our code differs from the paper.'))
                if words := KEYWORDS.get(p.stem):  # right under the title: the search's index entries
                    nb['cells'].insert(1, md_cell('```{index} ' + ', '.join(f'!{w}' for w in words) + '\n```\n'))
                if mod in mods: nb['cells'].append(md_cell(f'The API of this chapter: [`{mod}`](api/{mod}.rst).'))
            elif rel.parent == Path(EXPERIMENTS) and (section := results_section(p.stem, page, exps)):
                first = next((i for i, c in enumerate(nb['cells']) if c['cell_type'] == 'markdown'), -1) + 1
                nb['cells'].insert(first, md_cell('**Results.** The tables and figures of the committed run are at the '
                                                  '[end of this page](#results-of-the-committed-run).'))
                nb['cells'].append(md_cell(link.markdown(section, page)))
            write_if_changed(dst, json.dumps(nb, indent=1, ensure_ascii=False))
            pages.append(str(rel.with_suffix('')))
        elif rel == Path(EXPERIMENTS)/'README.md':
            text = link.markdown(p.read_text(), page, src_repo=f'nbs/{rel}')
            write_if_changed(dst, text + '\n' + toctree(None, ['*'], glob=True))
            pages.append(str(rel.with_suffix('')))
        else:
            STAGED.add(dst)
            if not dst.exists() or dst.stat().st_mtime < p.stat().st_mtime: dst.parent.mkdir(parents=True, exist_ok=True); shutil.copy2(p, dst)
    for p in doc_pages:  # the docs and the results, their links pointed at the staged pages
        rel = doc_rel(p)
        text = link.markdown(p.read_text(encoding='utf-8', errors='replace'), rel, src_repo=rel)
        for root in {str(ROOT), str(ROOT.resolve())}: text = text.replace(root + '/', '').replace(root, '.')  # a run's note names its checkout
        if rel == 'results/README.md':
            text += '\n' + toctree(None, ['/' + e[:-3] for e in sorted(files) if e.startswith('results/') and e.endswith('.md')
                                          and e != rel])
        write_if_changed(src/rel, text)
        pages.append(rel[:-3])
    for p in doc_files:
        dst = src/doc_rel(p); STAGED.add(dst)
        if not dst.exists() or dst.stat().st_mtime < p.stat().st_mtime: dst.parent.mkdir(parents=True, exist_ok=True); shutil.copy2(p, dst)
    write_if_changed(src/'api'/'index.md', '# API\n\nEvery module of `npm_nb` and the names it exports (its `__all__`), '
                     'with signatures, docstrings and parameters, in the order of the chapters.\n\n'
                     + toctree(None, mods, hidden=False))
    for m in mods:
        c = chapter_of.get(m)
        write_if_changed(src/'api'/f'{m}.rst', api_page(m, (c, f'chapter {int(c[:2])}, {titles[c]}') if c else None))
    pages += ['api/index'] + [f'api/{m}' for m in mods]
    for old in sorted(before - STAGED):  # a chapter or module that left leaves the site; what this builder did not write stays
        if old.is_file() or old.is_symlink(): old.unlink()
    record(STAGED)
    return pages


def search_scorer(path: Path) -> Path:
    """Sphinx's search scorer (its default weights) with one change: a query that is one of `KEYWORDS` puts the chapter
    that defines it first. (The `{index}` entries under a chapter's title do the same on a fresh build, but an
    incremental Sphinx build drops the index entries of the pages it did not rewrite from the search index.)"""
    words = {w.lower(): c for c, ws in KEYWORDS.items() for w in ws}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("// written by docs/site/build.py: Sphinx's default search weights; a glossary word's chapter first\n"
                    "var Scorer = {\n"
                    "  objNameMatch: 11, objPartialMatch: 6, objPrio: {0: 15, 1: 5, 2: -5}, objPrioDefault: 0,\n"
                    "  title: 15, partialTitle: 7, term: 5, partialTerm: 2,\n"
                    f"  defining: {json.dumps(words, sort_keys=True)},\n"
                    "  score: result => {\n"
                    "    const [docname, title, anchor, descr, score] = result;\n"
                    "    const q = (new URLSearchParams(window.location.search).get('q') || '').toLowerCase().trim();\n"
                    "    return Scorer.defining[q] === docname && !anchor ? score + 1000 : score;\n"
                    "  },\n"
                    "};\n")
    return path

def build(out: Path = ROOT/'_site', quiet=True, nbs: Path = NBS) -> Path:
    "Stage the pages into `out/src` and build the site into `out/html`; returns the html folder."
    from sphinx.cmd.build import build_main
    out = Path(out).resolve(); src, html = out/'src', out/'html'
    for d in (out, html, out/'doctrees'):
        if d.exists() and not d.is_dir(): raise SiteError(f'{d} is a file: pass a folder as OUT (the site takes OUT/src, OUT/html and OUT/doctrees)')
    t0 = time.perf_counter()
    stage(src, nbs)
    args = ['-b', 'html', '-c', str(CONF), '-j', '1', *(['-q'] if quiet else []), str(src), str(html), '-d', str(out/'doctrees'),
            '-D', f"html_search_scorer={search_scorer(out/'search_scorer.js')}"]
    if rc := build_main(args): raise SystemExit(f'sphinx-build failed ({rc})')
    for nb in Path(nbs).rglob('*.ipynb'):  # the download button hands out the notebook as committed, to run it
        if (dst := html/'_sources'/nb.relative_to(nbs)).parent.is_dir() and not any(p.startswith(('.', '_')) for p in nb.relative_to(nbs).parts):
            shutil.copyfile(nb, dst)
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
