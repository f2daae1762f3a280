"""Sphinx configuration of the book's offline site (`make docs`; docs/site/build.py stages the pages and runs Sphinx).

Nothing here reaches the network, at build or at view time: the notebooks are not executed (their committed outputs are
shown), MathJax is served from the site (the sphinx-mathjax-offline package bundles it), the theme's fonts and icons
are its own files, and no widget or CDN script is added."""
import inspect, re, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout's npm_nb, for autodoc
import npm_nb

project = 'npm-nb'
author = 'npm-nb developers'
copyright = '2026 onwards, npm-nb developers'
release = version = npm_nb.__version__

extensions = ['myst_nb', 'sphinx.ext.autodoc', 'sphinx.ext.mathjax', 'sphinx-mathjax-offline']
root_doc = 'index'
exclude_patterns = ['**/.ipynb_checkpoints']
suppress_warnings = ['myst.header', 'mystnb.unknown_mime_type', 'misc.highlighting_failure']

# notebooks: shown with their committed outputs, never executed here
nb_execution_mode = 'off'
nb_merge_streams = True
nb_ipywidgets_js = {}  # no require.js / widget manager from a CDN
myst_enable_extensions = ['dollarmath', 'amsmath', 'deflist']
myst_heading_anchors = 3

# math: MathJax 3 from the site's own _static/mathjax (copied there by sphinx-mathjax-offline)
mathjax_path = 'mathjax/tex-chtml.js'

# API: autodoc over every module; nbdev's single backticks are code, its parameter comments (docments) are parameters
autodoc_member_order = 'bysource'
autodoc_default_options = {'members': True, 'undoc-members': True, 'show-inheritance': True}
autodoc_typehints = 'signature'
default_role = 'literal'

html_theme = 'sphinx_book_theme'
html_title = 'npm-nb'
html_static_path = ['static']  # npm_nb.css: code and outputs wrap to the column instead of scrolling sideways
html_css_files = ['npm_nb.css']
html_theme_options = {
    'use_download_button': True, 'use_fullscreen_button': False, 'use_repository_button': False,
    'navigation_with_keys': False, 'show_toc_level': 2, 'launch_buttons': {},
}
html_context = {'default_mode': 'light'}  # no stored mode yet: the theme would log an error before it picks one
html_favicon = 'favicon.svg'  # a page without one makes the browser ask for /favicon.ico (a 404)
html_show_sourcelink = False
# the download button: a chapter's notebook as committed (build.py puts nbs/'s file there, not the staged copy), the
# markdown of a doc page, or the page printed to PDF
html_copy_source = True
html_sourcelink_suffix = ''


def _path_rewrites() -> list:
    "(pattern, replacement) for the builder's own paths, the longest first: the checkout, its Python, home, tmp (as the book's outputs)."
    pairs = {}
    for p, new in [(ROOT, '.'), (ROOT.resolve(), '.'), (sys.prefix, '<python>'), (sys.base_prefix, '<python>'), (Path.home(), '~'),
                   (tempfile.gettempdir(), '<tmp>')]:
        if len(p := str(p).rstrip('/')) > 1: pairs.setdefault(p, new)
    out = []
    for old in sorted(pairs, key=len, reverse=True):
        if pairs[old] == '.': out.append((re.compile(r'(?<![\w./-])' + re.escape(old) + r'/(?=[\w.-])'), ''))  # `<root>/data` is `data`
        out.append((re.compile(r'(?<![\w./-])' + re.escape(old) + r'(?![\w.-])'), pairs[old]))
    return out

PATH_REWRITES = _path_rewrites()


def machine_paths(text: str) -> str:
    "`text` without the paths of the machine that builds the site (a constant's value, a default in a signature)."
    for pat, new in PATH_REWRITES: text = pat.sub(new, text)
    return text


def docments_params(app, what, name, obj, options, lines):
    """Add nbdev's inline parameter comments (fastcore docments) as `:param:` fields, as nbdev's show_doc shows them;
    escape `|` (nbdev's docstrings are markdown, where `|x|` is no substitution)."""
    lines[:] = [machine_paths(l).replace('|', r'\|') for l in lines]
    if what in ('data', 'attribute'):  # a constant: not its type's docstring; its value, when short (a page template is not)
        tdoc = (type(obj).__doc__ or '').strip().splitlines()
        if tdoc and lines and lines[0].strip() == tdoc[0].strip(): lines.clear()
        if not lines and len(v := machine_paths(repr(obj))) <= 160: lines.append('``' + v.replace('`', "'") + '``')
        return
    if what not in ('function', 'method', 'class') or any(l.lstrip().startswith(':param') for l in lines): return
    try:
        from fastcore.docments import docments
        target = obj.__init__ if what == 'class' and '__init__' in vars(obj) else obj
        if not callable(target) or not inspect.signature(target).parameters: return
        docs = docments(target, full=True)
    except Exception: return
    extra = [f':param {k}: ' + v['docment'].replace('|', r'\|') for k, v in docs.items() if k not in ('return', 'self') and v.get('docment')]
    if extra: lines.extend([''] + extra)


def scrub_signature(app, what, name, obj, options, signature, return_annotation):
    "A signature's defaults without the builder's paths (a default `Path` is shown by its value)."
    return tuple(None if s is None else machine_paths(s) for s in (signature, return_annotation))


def setup(app):
    app.connect('autodoc-process-docstring', docments_params)
    app.connect('autodoc-process-signature', scrub_signature)
