#!/usr/bin/env bash
# Run Bconst: the `cpu` recipe (B: NPM 1,000 steps from the 1,000-step MLM baseline, lr 3e-4, 100 warm-up steps) with a
# constant learning rate after the warm-up (`schedule constant`) instead of the linear decay to 0. It asks whether the
# end of the schedule is what costs the finished runs their open-set EM (A2000, mid-schedule: lama_geo 21.2; the
# finished A3000, B and C: 8.8-13.8). The MLM baseline is the `cpu` profile's own (copied, not retrained: same recipe).
# Checkpoints: data/cache/checkpoints/bconst/npm. Then: bash results/runs/recipe/20261123-175052/targets_vs_steps/run.sh Bconst
set -eu
HERE=$PWD/results/runs/recipe/20261123-175052/targets_vs_steps
mkdir -p $HERE/Bconst data/cache/checkpoints/bconst
[ -d data/cache/checkpoints/bconst/mlm ] || cp -r data/cache/checkpoints/cpu/mlm data/cache/checkpoints/bconst/mlm
NPM_NB_RESULTS=$HERE/Bconst papermill nbs/experiments/01_train.ipynb $HERE/Bconst/01_train.ipynb --cwd nbs/experiments \
  -p profile bconst -p objectives npm,mlm -p steps 1000 -p mlm_steps 1000 -p npm_init mlm -p batch_size 8 -p max_len 128 \
  -p lr 3e-4 -p warmup 100 -p schedule constant -p max_blocks 0 -p n_eval_batches 30 -p log_every 10 -p amp bf16 -p threads 0 --log-output
