"""Every file a chapter, an experiment notebook, a doc or the package cites is in the repository (issue 37: chapters
cited notes that were not), and every `docs/reference.md §x.y` names a section that page has."""
import json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GONE = re.compile(r'\bREFERENCE_NOTES\b|(?<![\w_])RESOURCES(?:\.md\b|:)')  # notes that were never in the repository
CITED = re.compile(r'(?<![\w/.-])((?:[\w-]+/)*[A-Za-z][\w-]*\.(?:md|ipynb))\b')
SECTION = re.compile(r'docs/reference\.md[^§\n]{0,3}((?:§[0-9R][\w.]*(?:-[\d.]+)?(?:, )?)+)')


def repo_files() -> set:
    "Every file of the repository (tracked or new), relative to the root; data and the venv left out."
    skip = ('.git/', '.venv/', 'data/', '_proc/', '_docs/')
    return {f for p in ROOT.rglob('*') if p.is_file() and not (f := str(p.relative_to(ROOT))).startswith(skip)}


def texts(files):
    "(path, prose, code) of every notebook (markdown cells; code cells), doc (.md) and package module (all code)."
    for f in sorted(files):
        p = ROOT/f
        if f.startswith('results/'): continue  # written by runs (each records the text of its time), not edited
        if p.suffix == '.ipynb' and f.startswith('nbs/'):
            cells = json.loads(p.read_text())['cells']
            yield (f, '\n'.join(''.join(c['source']) for c in cells if c['cell_type'] == 'markdown'),
                   '\n'.join(''.join(c['source']) for c in cells if c['cell_type'] == 'code'))
        elif p.suffix == '.md': yield f, p.read_text(), ''
        elif p.suffix == '.py' and f.startswith('npm_nb/'): yield f, '', p.read_text()


def missing_citations(name: str, text: str, files: set, code: str = '') -> list:
    "The file names prose `text` (of file `name`) cites that are not in `files` (a path, or a file name anywhere); in `code`, the old notes only."
    base = {Path(f).name for f in files}
    bad = [m.group(0) for m in GONE.finditer(text + '\n' + code)]
    for m in CITED.finditer(text):
        c = m.group(1)
        if re.fullmatch(r'[A-Z_]+', Path(c).stem): continue  # a placeholder (`nbs/experiments/NN.ipynb`, `OUT.ipynb`), not a file
        if c in files or str((Path(name).parent/c)) in files or f'nbs/{c}' in files or Path(c).name in base: continue
        bad.append(c)
    return bad


def test_citing_nothing_missing():
    files = repo_files()
    bad = {f: b for f, t, code in texts(files) if (b := missing_citations(f, t, files, code))}
    assert not bad, f'files cited but not in the repository: {bad}'


def test_reference_sections_exist():
    ref = (ROOT/'docs'/'reference.md').read_text()
    have = set(re.findall(r'^#+ (R|\d+(?:\.\d+)?)[. ]', ref, re.M)) | set(re.findall(r'^- (R\.\d+|§?\d+\.\d+) ', ref, re.M))
    have |= {h.lstrip('§') for h in re.findall(r'§(\d+\.\d+|R\.\d+)', ref)}
    bad = []
    for f, t, code in texts(repo_files()):
        for m in SECTION.finditer(t + '\n' + code):
            for s in re.findall(r'§([0-9R][\w.]*\d)', m.group(1)):
                if s not in have: bad.append(f'{f}: §{s}')
    assert not bad, f'docs/reference.md has no such section: {bad}'


def test_the_check_catches_a_missing_file():
    files = {'docs/reference.md', 'nbs/07_masking.ipynb'}
    assert missing_citations('nbs/x.ipynb', 'as REFERENCE_NOTES §2.4 says', files) == ['REFERENCE_NOTES']
    assert 'RESOURCES.md' in missing_citations('nbs/x.ipynb', '(RESOURCES.md: lr)', files)
    assert missing_citations('nbs/x.ipynb', 'see docs/missing.md and 07_masking.ipynb', files) == ['docs/missing.md']
    assert missing_citations('nbs/x.ipynb', '_GPU_RESOURCES = {}; docs/reference.md §2.4', files) == []
    assert missing_citations('nbs/x.ipynb', 'papermill nbs/experiments/NN.ipynb OUT.ipynb', files) == []  # placeholders
