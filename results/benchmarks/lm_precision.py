"""`python results/benchmarks/lm_precision.py 10` (about 6 minutes on 2 cores) writes lm_precision.md / .csv beside it.

The rule, written before the run: bf16 autocast is adopted for a system's LM in the cpu profile when, on these dev
examples (the four open-set tasks, 10 a bucket, seed 0), its EM in bf16 minus its EM in fp32 is not below minus one
paired SE (over examples), and, for REPLUG, its time is at least 1.5x shorter. The LM alone shares REPLUG's LM in 12b
and 13b, so only the EM condition applies to it (it is small and its answers short: decoding, not products, is its
time)."""
import os, sys, json, time, platform, warnings
from pathlib import Path
import numpy as np, pandas as pd

HERE = Path(__file__).resolve().parent
INDEX = 'open-factbook2025+wikipedia+wordnet-650000-s0-keep1400-fe57fc5a-c64-bf16'   # 12b's cpu open-set index (cache)


def measure(n: int) -> list:
    "Per system: EM in fp32 and in bf16 on the same dev examples, their paired difference, answers alike, seconds."
    warnings.filterwarnings('ignore')
    import transformers
    transformers.logging.set_verbosity_error()
    from npm_nb.core import data_dir
    from npm_nb.baselines.lm import CausalLM
    from npm_nb.baselines.replug import DenseRetriever, PassageIndex, REPLUG
    from npm_nb.baselines.replug_evaluation import eval_open_set_replug, answer_setting
    from npm_nb.run.reference import open_examples, bf16_autocast
    from npm_nb.npm.search import set_threads
    set_threads(0)
    llm = CausalLM.from_pretrained('smollm2', device='cpu', batch_size=8)
    ret = DenseRetriever.from_pretrained('minilm', device='cpu')
    path = data_dir('cache', 'replug', 'cpu', INDEX)
    if not (path/'manifest.json').exists():
        sys.exit(f"{path} is missing: run 12b_replug_tasks with the cpu profile first (make reproduce builds it)")
    ix = PassageIndex.load(path, retriever=ret)
    ex = open_examples(['lama_geo', 'questions_geo', 'lama_wordnet', 'lama_commonsense'], n, 0, split='dev')
    systems = {'LM alone': (REPLUG(llm, k=0), answer_setting('prefix/stop')),
               'REPLUG (k=5)': (REPLUG(llm, ret, ix, k=5), answer_setting('prefix/stopword'))}
    res = {}
    for amp in ('none', 'bf16'):
        for name, (m, a) in systems.items():
            hits, raw, sec = [], [], 0.0
            for t, rows in ex.items():
                t0 = time.perf_counter()
                with bf16_autocast(amp, 'cpu'):
                    tab, _ = eval_open_set_replug(m, t, rows=rows, max_new_tokens=10, batch_size=8,
                                                  question_form='fewshot', **a)
                sec += time.perf_counter() - t0
                hits += [100.0 * h for h in tab.hit]
                raw += list(tab.raw)
            res[name, amp] = dict(hits=np.array(hits), raw=raw, s=sec)
            print(name, amp, f'{sec:.0f} s, EM {np.mean(hits):.1f}', flush=True)
    rows = []
    for name in systems:
        a, b = res[name, 'none'], res[name, 'bf16']
        d = b['hits'] - a['hits']
        rows.append(dict(system=name, n=len(d), em_fp32=round(a['hits'].mean(), 1), em_bf16=round(b['hits'].mean(), 1),
                         diff=round(d.mean(), 1), se=round(d.std(ddof=1) / np.sqrt(len(d)), 1),
                         same_answer_pct=round(100 * np.mean([x == y for x, y in zip(a['raw'], b['raw'])]), 1),
                         s_fp32=round(a['s'], 1), s_bf16=round(b['s'], 1), speedup=round(a['s'] / b['s'], 2)))
    return rows


def write(rows: list, n: int):
    "The table (.csv) and its page (.md), atomically, beside this script; the machine named."
    from npm_nb.core import atomic_write_text
    df = pd.DataFrame(rows)
    info = open('/proc/cpuinfo').read() if os.path.exists('/proc/cpuinfo') else ''
    cpu = next((l.split(':', 1)[1].strip() for l in info.splitlines() if l.startswith('model name')), platform.processor())
    hw = (f"{cpu}, {len(os.sched_getaffinity(0))} cores, AMX {'yes' if 'amx_bf16' in info else 'no'}, "
          f"avx512_bf16 {'yes' if 'avx512_bf16' in info else 'no'}")
    adopted = [r['system'] for r in rows if r['diff'] >= -r['se'] and (r['system'] == 'LM alone' or r['speedup'] >= 1.5)]
    page = ("# The LMs' precision on CPU: fp32 against bf16 autocast, on dev\n\n"
            f"*{__doc__.split(chr(10) * 2, 1)[1].strip()}*\n\n"
            f"SmolLM2 (135M) alone and with REPLUG (k = 5, MiniLM passages of 64 tokens over 12b's open-set index), on "
            f"{n} dev examples a bucket of each open-set task, the `fewshot` question prompt and the dev-chosen answer "
            f"rules. Machine: {hw}; nothing else ran. `same_answer_pct`: raw answers equal in both precisions; EM in "
            "points; `diff` = bf16 − fp32 with its paired SE; seconds for all the examples.\n\n"
            + df.to_markdown(index=False) + f"\n\n**Adopted by the rule:** bf16 for {', '.join(adopted) or 'none'} "
            "(`lm_amp: bf16` in the cpu profile's 12b and 13b).\n")
    atomic_write_text(HERE/'lm_precision.csv', df.to_csv(index=False))
    atomic_write_text(HERE/'lm_precision.md', page)


if __name__ == '__main__':
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    if len(sys.argv) > 3 and sys.argv[2] == '--write-from':   # the rows of an earlier run (its printed JSON)
        write(json.load(open(sys.argv[3])), n)
    else:
        write(measure(n), n)
