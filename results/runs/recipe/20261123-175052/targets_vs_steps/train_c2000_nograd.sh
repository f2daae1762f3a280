#!/usr/bin/env bash
# Run C without gradient through the candidate pass: train_c2000.sh with candidate_grad False (not the paper's; the
# unmasked pass runs under no_grad, so gradients reach the encoder through the masked queries only). Asks whether C's
# quality survives the ~1.25x faster step (02_train_benchmark). Checkpoints: data/cache/checkpoints/c2000ng/npm.
# Then: bash results/runs/recipe/20261123-175052/targets_vs_steps/run.sh C2000ng
HERE=$PWD/results/runs/recipe/20261123-175052/targets_vs_steps
mkdir -p $HERE/C2000ng
NPM_NB_RESULTS=$HERE/C2000ng papermill nbs/experiments/01_train.ipynb $HERE/C2000ng/01_train.ipynb --cwd nbs/experiments \
  -p profile c2000ng -p objectives npm -p steps 2000 -p npm_init model -p batch_size 8 -p max_len 128 -p lr 3e-4 \
  -p warmup 100 -p max_blocks 0 -p n_eval_batches 30 -p log_every 10 -p amp bf16 -p threads 0 -p candidate_grad False --log-output
