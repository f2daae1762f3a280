#!/usr/bin/env bash
# Issue #8's four target measurements (04 closed-set, 05 open-set, 06 temporal, 07 translation), each with the `cpu`
# profile's parameters and only the NPM row, on checkpoints along 09_recipe's run A (NPM from MiniLM, one 3,000-step
# schedule, lr 3e-4 decayed to 0 at step 3,000), on run B (1,000 NPM steps from the 1,000-step MLM) and on run C
# (train_c2000.sh: NPM from MiniLM, a 2,000-step schedule).
# Run from the repository root after `make reproduce PROFILE=recipe`:
#     bash results/runs/recipe/20261123-175052/targets_vs_steps/run.sh [CKPT ...]
# C2000ng is run C without gradient through the candidate pass (train_c2000_nograd.sh); C2000bf16 is C2000's checkpoint
# evaluated with bf16-encoded datastores (encode_amp bf16) instead of fp32 ones. Bconst is B with a constant learning rate
# after the warm-up (train_bconst.sh), evaluated with fp32 stores like A, B and C.
# Each checkpoint is copied to data/cache/checkpoints/recipe/npm/final (the `recipe` profile's NPM), so the notebooks
# load it as the profile's model; stores are cached per encoder fingerprint. Tables go to HERE/<ckpt>/tables.
# A finished (checkpoint, notebook) pair is skipped on a re-run (its executed notebook is the marker); logs go to $TMPDIR.
set -u
HERE=$PWD/results/runs/recipe/20261123-175052/targets_vs_steps   # absolute: papermill runs in nbs/experiments
SRC=data/cache/recipe/recipe
FINAL=data/cache/checkpoints/recipe/npm/final
CKPTS=${@:-A3000 A1000 A300 A2000 B1000 C2000}
for c in $CKPTS; do
  case $c in
    Bconst) path=data/cache/checkpoints/bconst/npm/final ;;   # train_bconst.sh: B with a constant rate after warm-up (before B*: the first match wins)
    A*) path=$SRC/curve_minilm/checkpoint-${c#A} ;;
    B*) path=$SRC/curve_mlm/checkpoint-${c#B} ;;
    C2000|C2000bf16) path=data/cache/checkpoints/c2000/npm/final ;;   # train_c2000.sh: a schedule that ends at 2,000 steps
    C2000ng) path=data/cache/checkpoints/c2000ng/npm/final ;;   # train_c2000_nograd.sh: C, candidate pass without gradient
  esac
  extra=""; [ $c = C2000bf16 ] && extra="-p encode_amp bf16"
  out=$HERE/$c; mkdir -p $out
  { rm -rf $FINAL.tmp && cp -rL $path $FINAL.tmp && rm -rf $FINAL && mv $FINAL.tmp $FINAL; } || { echo "$c: cannot use $path" >&2; exit 1; }   # never evaluate the previous one
  for nb in 05_open_set 06_temporal 04_closed_set 07_translation; do
    [ -f $out/$nb.ipynb ] && { echo "$c $nb: done before"; continue; }
    case $nb in
      04_closed_set) p="-p max_tokens 300000 -p n_examples 300 -p k 1024 -p rows npm" ;;
      05_open_set) p="-p max_tokens 650000 -p per_bucket 20 -p k 1024 -p rows npm -p compare_random_slice False" ;;
      06_temporal) p="-p n_countries 80 -p rows npm" ;;
      07_translation) p="-p n_per_lang 60 -p n_mlm_per_lang 10 -p max_tokens 0 -p k 1024 -p rows npm" ;;
    esac
    t=$(date +%s)
    NPM_NB_RESULTS=$out papermill nbs/experiments/$nb.ipynb $out/.$nb.tmp.ipynb --cwd nbs/experiments \
        -p profile recipe $p $extra --log-output > ${TMPDIR:-/tmp}/targets-$c-$nb.log 2>&1
    rc=$?
    # only a notebook that ran through becomes the marker; a failed one is kept as .failed.ipynb and re-run next time
    if [ $rc -eq 0 ]; then mv $out/.$nb.tmp.ipynb $out/$nb.ipynb; else mv $out/.$nb.tmp.ipynb $out/$nb.failed.ipynb; fi
    echo "$c $nb: rc $rc, $(( $(date +%s) - t )) s" | tee -a $HERE/times.txt
  done
done
cp -r $SRC/curve_minilm/checkpoint-3000 $FINAL.tmp && rm -rf $FINAL && mv $FINAL.tmp $FINAL   # as it was
