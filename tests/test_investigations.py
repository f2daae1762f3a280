"""The investigation notebooks (nbs/experiments/15-22), each run by papermill on its smoke defaults into a temp results
folder, as the batch runs an experiment: from the repository root, offline. They replace the scripts that used to live in
results/runs/ (whose READMEs cite them), so each is run by a test and each test reads what it wrote."""
import json, os
from pathlib import Path
import pandas as pd, pytest
from npm_nb.core import project_root

ROOT = project_root()
OFFLINE = dict(HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1', HF_DATASETS_OFFLINE='1', TOKENIZERS_PARALLELISM='false')
needs_data = pytest.mark.skipif(not (ROOT/'data'/'processed').exists(), reason='data/processed missing: run `make data` first')

def run(name: str, tmp_path: Path, monkeypatch, **params) -> Path:
    "Execute nbs/experiments/<name>.ipynb with `params` (profile smoke), results into tmp_path; the results folder."
    import papermill
    for k, v in {**OFFLINE, 'NPM_NB_RESULTS': str(tmp_path/'results')}.items(): monkeypatch.setenv(k, v)
    papermill.execute_notebook(str(ROOT/'nbs'/'experiments'/f'{name}.ipynb'), str(tmp_path/f'{name}.ipynb'),
                               parameters={'profile': 'smoke', **params}, cwd=str(ROOT), kernel_name='python3', progress_bar=False)
    return tmp_path/'results'

def table(results: Path, name: str) -> pd.DataFrame: return pd.read_csv(results/'tables'/f'{name}.csv')

@pytest.fixture(scope='module')
def smoke_models(tmp_path_factory):
    "The smoke profile's 01_train models: a smoke batch leaves them; trained here (about 40 s on 2 cores) when it has not."
    from npm_nb.run.reference import trained_path
    try: return [trained_path('smoke', o) for o in ('npm', 'mlm')]
    except FileNotFoundError: pass
    import papermill
    tmp = tmp_path_factory.mktemp('train')
    old = {k: os.environ.get(k) for k in [*OFFLINE, 'NPM_NB_RESULTS']}
    os.environ.update({**OFFLINE, 'NPM_NB_RESULTS': str(tmp/'results')})
    try: papermill.execute_notebook(str(ROOT/'nbs'/'experiments'/'01_train.ipynb'), str(tmp/'01_train.ipynb'),
                                    parameters={'profile': 'smoke'}, cwd=str(ROOT), kernel_name='python3', progress_bar=False)
    finally:
        for k, v in old.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v
    return [trained_path('smoke', o) for o in ('npm', 'mlm')]

def test_compare_runs_finds_what_bf16_stores_change_against_fp32(tmp_path, monkeypatch):
    "The committed cpu runs, bf16 stores against fp32 stores: what vs_fp32.md records (it needs no data or model)."
    res = run('19_compare_runs', tmp_path, monkeypatch)
    report = (res/'tables'/'19_compare_runs.md').read_text()
    identical = report.split('Identical (')[1].split('\n')[0]
    assert '`05_open_set`' in identical and '`06_temporal`' in identical and '`04_closed_set`' not in identical
    cells = table(res, '19_compare_runs_cells')
    got = cells[(cells.table == '04_closed_set') & (cells.column == 'Avg')]
    assert got[['against', 'run']].astype(float).values.tolist() == [[14.8, 14.9]]   # the init's closed-set average
    assert not cells[cells.table == '10_speed'].timing.eq(False).any()               # 10_speed differs in timings only
    head = table(res, '19_compare_runs_headline').set_index('measure')
    assert head.loc['05 open-set NPM lama_geo (macro EM)'].iloc[:2].astype(float).tolist() == [13.8, 13.8]

@needs_data
def test_closed_set_ceiling_reports_aucs_for_mr_cr_and_amazon(tmp_path, monkeypatch, smoke_models):
    res = run('18_closed_set_ceiling', tmp_path, monkeypatch)
    d = table(res, '18_closed_set_ceiling').set_index('task')
    assert list(d.index) == ['mr', 'cr', 'amazon'] and (d['n'] > 0).all()
    aucs = d.filter(like='AUC').to_numpy().ravel()
    assert ((aucs[~pd.isna(aucs)] >= 0) & (aucs[~pd.isna(aucs)] <= 1)).all()

@needs_data
def test_translation_reading_tables_init_mlm_and_npm_with_a_figure(tmp_path, monkeypatch, smoke_models):
    res = run('17_translation_reading', tmp_path, monkeypatch)
    d = table(res, '17_translation_reading').set_index('model')
    assert list(d.index) == ['MiniLM init', 'smoke profile: MLM, NPM scoring', 'smoke profile: NPM']
    assert d['total steps'].tolist()[0] == 0 and d['n'].nunique() == 1 and d['asked name first (%)'].between(0, 100).all()
    assert (res/'figures'/'17_translation_reading.png').exists()

@needs_data
def test_probe_gap_compares_both_samples_and_writes_its_tables(tmp_path, monkeypatch, smoke_models):
    res = run('16_probe_gap', tmp_path, monkeypatch)
    d = table(res, '16_probe_gap')
    assert {"05's sample", "the probe's sample"} <= set(d.examples) and "09's probe (GeoProbe)" in set(d.pipeline)
    assert (res/'tables'/'16_probe_gap_field_line.md').exists() and (res/'tables'/'16_probe_gap_both_retrieved.md').exists()

@needs_data
def test_targets_vs_steps_compares_init_and_smoke_npm_on_open_set_and_temporal(tmp_path, monkeypatch, smoke_models):
    "The init and the smoke NPM through 05 and 06 (their runs are kept in data/cache/targets_vs_steps/smoke and reused)."
    res = run('15_targets_vs_steps', tmp_path, monkeypatch)
    d = table(res, '15_targets_vs_steps').set_index('checkpoint')
    assert list(d.index) == ['MiniLM (0 steps)', 'smoke profile'] and d.loc['MiniLM (0 steps)', 'NPM steps'] == 0
    assert {'lama_geo EM', 'temporal changed gain'} <= set(d.columns) and 'closed-set avg' not in d.columns
    pairs = table(res, '15_targets_vs_steps_pairs')
    assert len(pairs) == 2 and set(pairs.examples) == {'lama_geo', '4 open-set tasks'}
    meta = json.loads((res/'figures'/'15_targets_vs_steps.meta.json').read_text())
    assert meta['profile'] == 'smoke' and 'lama_geo EM' in meta['reading']

@needs_data
def test_leaders_measures_each_cause_of_zero_and_scores_every_fix(tmp_path, monkeypatch, smoke_models):
    "Each cause of the leaders' 0% is measured (casing cannot be one: uncased tokens, case-folding metric) and every fix scored."
    res = run('20_leaders', tmp_path, monkeypatch)
    diag = table(res, '20_leaders_diagnosis').set_index('cause: measure (% of facts)')
    assert diag.loc['casing: tokens differ from the lower-cased name'].eq(0).all()
    assert diag.loc['casing: the metric misses the lower-cased name'].eq(0).all()
    assert diag.loc['corpus: a gold alias in the subject document'].eq(100).all()
    assert {'reader (NPM): EM', 'reader (NPM): gold among the top 50 answers'} <= set(diag.index)
    fixes = table(res, '20_leaders_fixes')
    assert set(fixes.setting) >= {'the task template, original documents (before)', 'verbalizer "... is named [MASK]."'}
    assert fixes.EM.between(0, 100).all()

@needs_data
def test_scoring_grid_and_span_rules_on_dev_then_test_for_the_chosen_settings_only(tmp_path, monkeypatch, smoke_models):
    "The scoring grid on dev (the paper's setting first, paired differences against it), its figure; the span rules at the chosen scoring, paired against the defaults with the temporal guard; then test for the chosen settings only."
    res = run('21_scoring', tmp_path, monkeypatch, agg_sweep='sum,max', temperature_sweep='1,0.25', w_start_sweep='0.5,1.0')
    dev = table(res, '21_scoring_dev')
    assert len(dev) == 2 * 2 * 2 and tuple(dev.loc[0, ['agg', 'T', 'w_start']]) == ('sum', 1, 0.5)
    assert dev.loc[0, 'vs paper (paired)'] == 0 and dev.criterion.between(0, 100).all()
    assert (res/'figures'/'21_scoring_dev.png').exists() and (res/'figures'/'21_scoring_rules.png').exists()
    meta = json.loads((res/'tables'/'21_scoring_dev.meta.json').read_text())
    assert meta['scale']['split'] == 'dev' and 'Chosen by the criterion' in meta['reading']
    rules = table(res, '21_scoring_rules')
    assert [tuple(r) for r in rules[['span_rule', 'query_rule']].values] == [
        ('content', 'keep'), ('content', 'drop'), ('reference', 'keep'), ('reference', 'drop')]
    assert rules.loc[0, 'vs default (paired)'] == 0 and rules['open-set criterion'].between(0, 100).all()
    test = table(res, '21_scoring_test')
    assert 1 <= len(test) <= 3 and test.setting.iloc[0].startswith("paper's")
    rules_test = res/'tables'/'21_scoring_rules_test.csv'   # only when the dev choice left the default rules
    assert rules_test.exists() == ('/' in test.setting.iloc[-1])   # a rule pair is named span_rule/query_rule

@needs_data
def test_replug_prompts_chooses_each_systems_question_prompt_on_dev_then_reads_test(tmp_path, monkeypatch):
    "The LM alone and REPLUG under every question form and label on dev (12b's setting first, paired against it), its figure, the choice, then test for 12b's setting and the chosen one only."
    res = run('23_replug_prompts', tmp_path, monkeypatch)
    dev = table(res, '23_replug_prompts_dev')
    assert list(dev.system.unique()) == ['LM alone', 'REPLUG (k=3)'] and len(dev) == 2 * 3 * 2   # systems, forms, labels
    first = dev.groupby('system').head(1)
    assert (first.question_form == 'answer-is').all() and (first.label == 'keep').all() and (first['vs 12b (paired)'] == 0).all()
    assert dev['macro EM'].between(0, 100).all() and dev['empty (%)'].between(0, 100).all()
    assert (res/'figures'/'23_replug_prompts_dev.png').exists()
    test = table(res, '23_replug_prompts_test')
    assert set(test.system) == set(dev.system) and all(1 <= n <= 2 for n in test.groupby('system').size())

@needs_data
def test_replug_retrieval_chooses_k_and_passage_length_on_dev_then_reads_test(tmp_path, monkeypatch):
    "REPLUG at every (k, passage length) on dev, 12b's first and paired against it, the choice, then test for 12b's and the chosen."
    res = run('24_replug_retrieval', tmp_path, monkeypatch, ks='1,3', chunk_sizes='64,32')
    dev = table(res, '24_replug_retrieval_dev')
    assert list(zip(dev.k, dev.chunk_tokens)) == [(1, 64), (1, 32), (3, 64), (3, 32)] and dev['vs 12b (paired)'].iloc[0] == 0
    assert dev.criterion.between(0, 100).all() and (dev['s / example'] > 0).all() and (dev.n == dev.n.iloc[0]).all()
    assert (res/'figures'/'24_replug_retrieval_dev.png').exists()
    test = table(res, '24_replug_retrieval_test')
    assert 1 <= len(test) <= 2 and (test.k.iloc[0], test.chunk_tokens.iloc[0]) == (1, 64)

@needs_data
def test_replug_answers_chooses_each_systems_cloze_prompt_and_answer_rule_on_dev_then_reads_test(tmp_path, monkeypatch):
    "The LM alone and REPLUG under every cloze form and answer rule on dev (12b's first, paired against it), the figure, then test for 12b's and the chosen only."
    from npm_nb.baselines.replug_evaluation import ANSWER_RULES
    res = run('25_replug_answers', tmp_path, monkeypatch)
    dev = table(res, '25_replug_answers_dev')
    assert list(dev.system.unique()) == ['LM alone', 'REPLUG (k=3)'] and len(dev) == 2 * 2 * len(ANSWER_RULES)
    first = dev.groupby('system').head(1)
    assert (first.cloze_form == 'prefix').all() and (first.answer_rule == 'stop').all() and (first['vs 12b (paired)'] == 0).all()
    assert dev.criterion.between(0, 100).all() and dev['over 5 words (%)'].between(0, 100).all() and (dev.n == dev.n.iloc[0]).all()
    # a rule only cuts the answer: no rule leaves more long answers than the whole answer does
    for _, d in dev.groupby(['system', 'cloze_form']):
        assert (d['over 5 words (%)'] <= d['over 5 words (%)'].iloc[0] + 1e-9).all()
    assert (res/'figures'/'25_replug_answers_dev.png').exists()
    test = table(res, '25_replug_answers_test')
    assert set(test.system) == set(dev.system) and all(1 <= n <= 2 for n in test.groupby('system').size())
    assert (test.groupby('system').head(1).answer_rule == 'stop').all()

@needs_data
def test_leader_templates_chooses_each_systems_template_on_dev_then_reads_the_swap_on_test(tmp_path, monkeypatch, smoke_models):
    "NPM, the LM alone and REPLUG under four templates each on dev (the task's first, paired against it), titles stripped, the figure, then the swap on test and the GPU NPM's answers re-scored."
    res = run('26_leader_templates', tmp_path, monkeypatch)
    dev = table(res, '26_leader_templates_dev')
    assert list(dev.system.unique()) == ['NPM', 'LM alone', 'REPLUG (k=3)'] and (dev.groupby('system').size() == 4).all()
    first = dev.groupby('system').head(1)
    assert (first.template == 'task').all() and (first['vs task (paired)'] == 0).all()
    assert 'mask-first' in set(dev[dev.system == 'NPM'].template) and 'question' in set(dev[dev.system == 'LM alone'].template)
    assert dev.criterion.between(0, 100).all() and dev['EM, titles kept'].between(0, 100).all() and (dev.n == 2 * dev.facts).all()
    assert (res/'figures'/'26_leader_templates_dev.png').exists()
    test = table(res, '26_leader_templates_test')
    assert set(test.system) == set(dev.system) and all(1 <= n <= 2 for n in test.groupby('system').size())
    assert (test.groupby('system').head(1).template == 'task').all()
    lm = test[test.system == 'LM alone']   # it reads no documents: the same answers with either edition
    assert (lm['changed, new holder: 2015 corpus'] == lm['changed, new holder: 2025 corpus']).all()
    gpu = table(res, '26_leader_templates_gpu')   # the committed GPU run's answers (its 80 test countries)
    assert set(gpu.facts) == {'changed', 'unchanged'} and (gpu.n > 0).all()
    assert gpu['EM, titles stripped'].between(0, 100).all() and gpu['EM, titles kept'].between(0, 100).all()

@needs_data
def test_realm_reading_chooses_k_and_answer_length_on_dev_then_reads_test(tmp_path, monkeypatch, smoke_models):
    "REALM (the untrained init: smoke has no 13_realm run here) under every (k, answer length) on dev, 13's first and paired against it, the grid checked against eval_open_set_realm, the figure, then 13's and the chosen setting on test."
    res = run('27_realm_reading', tmp_path, monkeypatch, realm='init', eval_ks='2,3', max_masks='1,2')
    dev = table(res, '27_realm_reading_dev')
    assert dev[['k', 'max_masks']].values.tolist() == [[2, 1], [2, 2], [3, 1], [3, 2]]
    assert dev['vs 13 (paired)'].iloc[0] == 0 and dev.criterion.between(0, 100).all() and (dev.n > 0).all()
    assert (dev[dev.max_masks == 1]['answer wordpieces'] == 1).all() and (dev['answer wordpieces'] <= dev.max_masks).all()
    assert (res/'figures'/'27_realm_reading_dev.png').exists()
    test = table(res, '27_realm_reading_test')
    assert test[['k', 'max_masks']].values.tolist()[0] == [2, 1] and 1 <= len(test) <= 2 and (test.n > 0).all()

@needs_data
def test_realm_span_reader_trains_chooses_steps_and_k_on_dev_then_reads_test(tmp_path, monkeypatch, smoke_models):
    "A REALM pre-trained here (ICT warm start, then salient spans) and the span reader trained a few steps on it (on noun phrases too) (smoke has no 13_realm run here: the untrained REALM is the paired baseline, as in the cpu profile): every (steps, k) on dev against the baseline's one mask, the figure, then the readers on test, on the store and on NPM's blocks."
    res = run('28_realm_span_reader', tmp_path, monkeypatch, realm='init', pretrain_steps=2, ict_steps=2, ict_batch=4,
              pretrain_chunks=0, pretrain_sentences=8, pretrain_batch=2, refresh_every=1, tagger='spacy',
              reader_spans='salient+nouns')   # pre-training on salient spans, the span reader on noun phrases too
    here = 'REALM pre-trained here (one mask)'
    dev = table(res, '28_realm_span_reader_dev')
    base = 'the untrained REALM (one mask)'
    assert dev[['reader', 'steps', 'k']].values.tolist() == [[base, 0, 3], [here, 0, 3],
                                                           ['span reader', 2, 3], ['span reader', 2, 5],
                                                           ['span reader', 4, 3], ['span reader', 4, 5]]
    assert dev['vs baseline (paired)'].iloc[0] == 0 and dev.criterion.between(0, 100).all() and (dev.n > 0).all()
    assert (dev[dev.reader == 'span reader']['empty (%)'] == 0).all()
    assert (res/'figures'/'28_realm_span_reader_dev.png').exists()
    test = table(res, '28_realm_span_reader_test')
    assert test.reader.tolist() == [base, here, 'span reader', here + ", NPM's blocks",
                                    "span reader, NPM's blocks"]
    assert test['vs baseline (paired)'].iloc[0] == 0 and (test.n == test.n.iloc[0]).all() and test.n.iloc[0] > 0
    ex = pd.read_csv(res/'tables'/'28_realm_span_reader.examples.csv')   # 14's rows: one a system and test example
    assert set(ex.system) == {'REALM (span reader, dev-chosen)', "REALM span reader on NPM's BM25 top-3 blocks", here}
    assert (ex.groupby('system').size() == test.n.iloc[0]).all() and not ex.duplicated(['task', 'system', 'key']).any()
    meta = json.loads((res/'tables'/'28_realm_span_reader_dev.meta.json').read_text())
    assert 'ICT' in meta['scale']['REALM'] and 'pre-training' in meta['scale']['training']
    assert 'salient+nouns-span sentences' in meta['scale']['training']

@needs_data
def test_recipe_sweep_keeps_rows_stops_an_incomplete_grid_and_reuses_rows(tmp_path, monkeypatch):
    "The sweep at one step a recipe: rows kept per recipe, an incomplete grid stops before test, a later run reads the rows and reads test."
    from dataclasses import fields
    from npm_nb.npm.training import TrainConfig
    (tmp_path/'a').mkdir(); (tmp_path/'b').mkdir()
    res = run('22_recipe_sweep', tmp_path/'a', monkeypatch, recipes='C1k,B1k,X8', compute='C1k,X8', steps_scale=0.001)
    rows = res/'sweep'/'smoke'
    dev = table(res, '22_recipe_sweep_dev')
    has_x8 = 'extra_blocks' in {f.name for f in fields(TrainConfig)}
    assert list(dev.recipe) == ['C1k'] + ['X8'] * has_x8 and dev.criterion.between(0, 100).all() and (dev['train minutes'] > 0).all()
    reading = json.loads((res/'tables'/'22_recipe_sweep_dev.meta.json').read_text())['reading']
    assert 'Incomplete' in reading and 'B1k' in reading and (has_x8 or 'has no field extra_blocks' in reading)
    assert not (res/'tables'/'22_recipe_sweep_test.csv').exists()               # incomplete: no test
    c1k = json.loads((rows/'C1k.json').read_text())
    assert c1k['key']['split'] == 'dev' and c1k['train_config']['steps'] == 1 and sum(c1k['n'].values()) == len(''.join(e['hit'] for e in c1k['examples'].values()))
    stamp = (rows/'C1k.json').stat().st_mtime_ns
    # the same rows folder, the grid without X8: C1k's row is read (not evaluated again), B1k is trained and evaluated, then test
    res2 = run('22_recipe_sweep', tmp_path/'b', monkeypatch, recipes='C1k,B1k', steps_scale=0.001, rows_dir=str(rows))
    assert (rows/'C1k.json').stat().st_mtime_ns == stamp and (rows/'B1k.json').exists()
    dev2 = table(res2, '22_recipe_sweep_dev').set_index('recipe')
    assert list(dev2.index) == ['C1k', 'B1k'] and dev2.loc['B1k', 'vs B1k (paired)'] == 0
    assert dev2.loc['B1k', 'train minutes'] > json.loads((rows/'B1k.json').read_text())['minutes']['own_wall']   # its MLM's minutes included
    assert (res2/'figures'/'22_recipe_sweep_dev.png').exists()
    test = table(res2, '22_recipe_sweep_test')
    assert 1 <= len(test) <= 2 and test.recipe.iloc[0].startswith('the cpu profile before the sweep: B1k') and test.criterion.between(0, 100).all()
    # a second training seed (#49 item 5): its rows beside the first's, the first's untouched, test not read again, and
    # the seeds table per recipe and seed with the spread between seeds
    (tmp_path/'c').mkdir()
    first = {r: (rows/f'{r}.json').read_bytes() for r in ('C1k', 'B1k')}
    res3 = run('22_recipe_sweep', tmp_path/'c', monkeypatch, recipes='C1k,B1k', steps_scale=0.001, rows_dir=str(rows),
               train_seed=1)
    assert {r: (rows/f'{r}.json').read_bytes() for r in first} == first
    s1 = json.loads((rows/'C1k.seed1.json').read_text())
    assert s1['key']['train']['seed'] == 1 and s1['key']['evaluation'] == c1k['key']['evaluation']
    assert not (res3/'tables'/'22_recipe_sweep_test.csv').exists()
    seeds = table(res3, '22_recipe_sweep_seeds')
    assert set(zip(seeds.recipe, seeds['training seed'].astype(str))) == {(r, s) for r in ('C1k', 'B1k') for s in ('0', '1', 'mean of 2')}
    assert seeds['open-set criterion'].between(0, 100).all() and seeds['SD between seeds (open set)'].notna().sum() == 2
    pairs = table(res3, '22_recipe_sweep_seed_pairs')
    assert list(pairs.difference) == ['B1k - C1k'] and {'seed 0 (open set)', 'seed 1 (open set)'} <= set(pairs.columns)
    assert (res3/'figures'/'22_recipe_sweep_seeds.png').exists()
