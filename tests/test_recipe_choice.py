"""The dev criterion and the recipe sweep's rules (npm_nb.run.reference): the criterion and the paired difference against
a slow, obvious computation; which finished runs are reused; the run's training minutes; the choice between recipes."""
import dataclasses, json, math, random
from pathlib import Path
import numpy as np, pytest
from npm_nb.npm.training import TrainConfig
from npm_nb.run.reference import (criterion, paired_difference, task_scores, stratum_weights, finished_run, training_fields,
                                  training_minutes, choose_recipe)

def slow_criterion(hits, strata):
    "Mean over tasks of the mean over the task's buckets; SE² = Σ over strata of weight² × sample variance / n."
    tasks = []
    for t, _ in strata:
        if t not in tasks: tasks.append(t)
    mean, var = 0.0, 0.0
    for t in tasks:
        buckets = sorted({b for tt, b in strata if tt == t})
        for b in buckets:
            xs = [h for h, s in zip(hits, strata) if s == (t, b)]
            w = 1 / (len(tasks) * len(buckets))
            mu = sum(xs) / len(xs)
            s2 = sum((x - mu) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0
            mean += w * mu; var += w * w * s2 / len(xs)
    return mean, math.sqrt(var)

def tiny(seed):
    rng = random.Random(seed)
    strata = [(t, b) for t, bs in [('geo', [1, 2, 3]), ('wn', [1, 4]), ('temporal unchanged', [0])] for b in bs for _ in range(rng.randint(1, 4))]
    rng.shuffle(strata)
    return [100.0 * rng.randint(0, 1) for _ in strata], [100.0 * rng.randint(0, 1) for _ in strata], strata

@pytest.mark.parametrize('seed', range(5))
def test_criterion_and_paired_difference_match_the_slow_computation(seed):
    a, b, strata = tiny(seed)
    assert criterion(a, strata) == pytest.approx(slow_criterion(a, strata))
    diff = [x - y for x, y in zip(a, b)]
    assert paired_difference(a, b, strata) == pytest.approx(slow_criterion(diff, strata))
    scores = task_scores(a, strata)
    assert np.mean(list(scores.values())) == pytest.approx(criterion(a, strata)[0])   # each task weighs the same

def test_stratum_weights_tasks_equal_buckets_equal():
    w = stratum_weights([('a', 1), ('a', 2), ('a', 2), ('b', 0)])
    assert w == {('a', 1): 0.25, ('a', 2): 0.25, ('b', 0): 0.5}

def write_run(folder: Path, cfg: TrainConfig, drop=()) -> None:
    (folder/'final').mkdir(parents=True)
    (folder/'final'/'config.json').write_text('{}')
    d = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in drop}
    (folder/'final'/'train_config.json').write_text(json.dumps(d))

def test_finished_run_reuse_match(tmp_path):
    cfg = TrainConfig(steps=1000, warmup=100, batch_size=8, max_len=128, amp='bf16', max_blocks=None, profile='sweep', log_every=10)
    write_run(tmp_path/'lr', dataclasses.replace(cfg, lr=1e-3, profile='cpu'))
    assert finished_run(cfg, [tmp_path/'*']) is None                     # one training field differs: not reused
    write_run(tmp_path/'logs', dataclasses.replace(cfg, log_every=1, save_every=7, profile='cpu', device='cpu', keep_last=5, workers=0))
    assert finished_run(cfg, [tmp_path/'*']) == tmp_path/'logs'/'final'  # only how it was logged and where: reused
    assert finished_run(dataclasses.replace(cfg, steps=2000), [tmp_path/'*']) is None
    assert finished_run(dataclasses.replace(cfg, max_blocks=0), [tmp_path/'*']) == tmp_path/'logs'/'final'   # 0 and None: every block

def test_finished_run_field_added_since(tmp_path):
    "A run recorded before a field existed ran with its default: reused for the default, not for another value."
    cfg = TrainConfig(steps=5)
    write_run(tmp_path/'old', cfg, drop=('batching',))
    assert finished_run(cfg, [tmp_path/'old']) == tmp_path/'old'/'final'
    assert finished_run(dataclasses.replace(cfg, batching='random'), [tmp_path/'old']) is None

def test_finished_run_needs_a_final_model(tmp_path):
    cfg = TrainConfig(steps=5)
    write_run(tmp_path/'run', cfg); (tmp_path/'run'/'final'/'config.json').unlink()
    assert finished_run(cfg, [tmp_path/'run']) is None

def test_training_fields_init_folder_by_its_resolved_path(tmp_path):
    (tmp_path/'mlm'/'checkpoint-9').mkdir(parents=True); (tmp_path/'mlm'/'final').symlink_to('checkpoint-9')
    a = training_fields(TrainConfig(model=str(tmp_path/'mlm'/'final')))
    assert a['model'] == str((tmp_path/'mlm'/'checkpoint-9').resolve()) and 'profile' not in a and 'log_every' not in a

def test_training_minutes_from_metrics(tmp_path):
    rows = [{'step': 10, 'tokens': 1000, 'tokens_per_s': 100.0}, {'step': 20, 'tokens': 2000, 'tokens_per_s': 50.0},
            {'step': 20, 'tokens': 2000, 'tokens_per_s': 20.0},   # resumed: step 20 logged again, the last one counts
            {'step': 30, 'tokens': 2600, 'tokens_per_s': 60.0}]
    (tmp_path/'metrics.jsonl').write_text('\n'.join(map(json.dumps, rows)) + '\n')
    assert training_minutes(tmp_path) == pytest.approx((10 + 50 + 10) / 60)
    assert math.isnan(training_minutes(tmp_path/'none'))
    # at a quantile of the logged speeds: all 2,600 tokens at the median speed (after the resumed row replaced step 20's)
    assert training_minutes(tmp_path, at_quantile=0.5) == pytest.approx(2600 / 60.0 / 60)
    assert training_minutes(tmp_path, at_quantile=1.0) == pytest.approx(2600 / 100.0 / 60)
    with pytest.raises(ValueError, match='at_quantile'): training_minutes(tmp_path, at_quantile=0)

def test_choose_recipe():
    st = [('a', 0)] * 8
    hits = {'big': [100, 100, 100, 0, 0, 0, 0, 0], 'small': [100, 0, 0, 100, 0, 0, 0, 0], 'bad': [0] * 8}
    # small: 12.5 below big, paired SE 22.7: within one SE and half the minutes -> small; bad is cheapest but 37.5 below (SE 18.3)
    chosen, t = choose_recipe(hits, st, {'big': 10, 'small': 5, 'bad': 1})
    assert chosen == 'small' and t.criterion.idxmax() == 'big' and not t.loc['bad', 'within 1 SE of best']
    assert choose_recipe(hits, st, {'big': 10, 'small': 20, 'bad': 1})[0] == 'big'            # the equal one costs more
    clear = {'big': [100] * 7 + [0], 'small': [100, 0, 0, 0, 0, 0, 0, 0]}                       # 87.5 vs 12.5: not within
    assert choose_recipe(clear, st, {'big': 10, 'small': 5})[0] == 'big'
    assert choose_recipe(hits, st, {'big': 10, 'small': 5, 'bad': 1}, max_minutes=4)[0] == 'bad'   # big and small over budget
    two = {'big': hits['big'], 'small': hits['small'], 'smaller': hits['small']}
    assert choose_recipe(two, st, {'big': 10, 'small': 5, 'smaller': 3})[0] == 'smaller'        # the cheapest of those within
    with pytest.raises(ValueError, match='budget'): choose_recipe(hits, st, {'big': 10, 'small': 5, 'bad': 1}, max_minutes=0.5)

def test_sweep_recipes_are_01_train_runs():
    """At the sweep profile's parameters, mlm1k and C2k (the sweep's choice) are the cpu profile's 01_train MLM and NPM, and B1k is
    cpu-b1k's NPM, field for field (so a finished run of either profile is reused)."""
    import yaml
    from npm_nb.core import project_root
    from npm_nb.npm.training import checkpoint_dir
    root = project_root()
    def cells(name): return json.loads((root/'nbs'/'experiments'/f'{name}.ipynb').read_text())['cells']
    def params(profile, nb):
        out = {}
        for p in ['base', profile]:
            y = yaml.safe_load((root/'params'/f'{p}.yaml').read_text())
            if y.get('extends'): out.update(params(y['extends'], nb))
            out.update(y.get('params') or {}); out.update(((y.get('notebooks') or {}).get(nb) or {}).get('params') or {})
        return out
    def run_cells(name, ids, profile):
        g = {}
        code = [c for c in cells(name) if c['cell_type'] == 'code'
                and not ''.join(c['source']).startswith('# what this notebook needs first')]  # its prerequisites check
        exec(''.join(code[0]['source']), g)                                 # the parameters cell
        g.update({k: v for k, v in params(profile, name).items() if k in g}, profile=profile, device='cpu')
        for c in code[1:1 + ids]: exec(''.join(c['source']).replace('display(', 'print('), g)
        return g
    t = run_cells('01_train', 1, 'cpu')           # its parameters and TrainConfigs
    s = run_cells('22_recipe_sweep', 2, 'sweep')  # its parameters, imports and recipes
    tb = run_cells('01_train', 1, 'cpu-b1k')
    assert training_fields(s['config_of']('mlm1k')) == training_fields(t['cfgs']['mlm']) == training_fields(tb['cfgs']['mlm'])
    assert training_fields(s['config_of']('C2k')) == training_fields(t['cfgs']['npm'])
    b1k = s['config_of']('B1k', checkpoint_dir('cpu-b1k', 'mlm')/'final')
    assert training_fields(b1k) == training_fields(tb['cfgs']['npm'])
    assert training_fields(s['config_of']('C1k')) != training_fields(t['cfgs']['npm'])   # 1,000 steps: another run
