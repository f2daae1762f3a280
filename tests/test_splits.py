"Dev and test splits (issue #34): disjoint, deterministic, stable when examples are added, about DEV_FRACTION."
import datasets, pytest
from npm_nb.data.tasks import dev_test, is_dev, split_key, load_task, DEV_FRACTION

FACTS = datasets.Dataset.from_dict({'subject': [f's{i % 300}' for i in range(600)], 'query': [f'q{i}' for i in range(600)]})

def test_disjoint_and_complete():
    d, t = dev_test(FACTS, 'dev'), dev_test(FACTS, 'test')
    assert not set(d['query']) & set(t['query']) and len(d) + len(t) == len(FACTS)
    assert not set(d['subject']) & set(t['subject'])   # a subject's facts fall on one side

def test_deterministic_and_stable_under_appending():
    d = dev_test(FACTS, 'dev')['query']
    assert dev_test(FACTS, 'dev')['query'] == d
    more = datasets.concatenate_datasets([datasets.Dataset.from_dict({'subject': ['new', 'other'], 'query': ['n1', 'n2']}), FACTS])
    assert set(d) <= set(dev_test(more, 'dev')['query']) and set(dev_test(more, 'dev')['query']) - set(d) <= {'n1', 'n2'}

def test_size_and_key():
    assert abs(len(dev_test(FACTS, 'dev')) / len(FACTS) - DEV_FRACTION) < 0.07
    assert split_key({'text': 'x', 'label': 0}) == 'x' and split_key({'subject': '', 'query': 'q'}) == 'q'
    assert is_dev(['a'], seed=0).shape == (1,)
    with pytest.raises(ValueError, match="'dev' or 'test'"): dev_test(FACTS, 'valid')

def test_load_task_splits():
    try: ev = load_task('temporal_factbook', 'evaluated')
    except Exception as e: pytest.skip(f'tasks not built here: {e}')
    d, t = load_task('temporal_factbook', 'dev'), load_task('temporal_factbook', 'test')
    assert len(d) + len(t) == len(ev) and len(t) >= 200 and not set(d['query']) & set(t['query'])
    assert load_task('temporal_factbook')['query'] == t['query']   # the default is test
    with pytest.raises(ValueError, match='split must be one of'): load_task('temporal_factbook', 'train')
