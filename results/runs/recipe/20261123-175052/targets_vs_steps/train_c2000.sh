#!/usr/bin/env bash
# Run C: NPM from MiniLM with a 2,000-step schedule (lr 3e-4, 100 warm-up steps, linear decay to 0 at step 2,000), the
# `cpu` profile's 01_train otherwise (8 x 128 tokens a step, bf16, the whole training corpora). A's 2,000-step point is
# mid-schedule; this asks whether a schedule that ends there keeps it. Checkpoints: data/cache/checkpoints/c2000/npm.
# Then: bash results/runs/recipe/20261123-175052/targets_vs_steps/run.sh C2000
HERE=$PWD/results/runs/recipe/20261123-175052/targets_vs_steps
mkdir -p $HERE/C2000
NPM_NB_RESULTS=$HERE/C2000 papermill nbs/experiments/01_train.ipynb $HERE/C2000/01_train.ipynb --cwd nbs/experiments \
  -p profile c2000 -p objectives npm -p steps 2000 -p npm_init model -p batch_size 8 -p max_len 128 -p lr 3e-4 \
  -p warmup 100 -p max_blocks 0 -p n_eval_batches 30 -p log_every 10 -p amp bf16 -p threads 0 --log-output
