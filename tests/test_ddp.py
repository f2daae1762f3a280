"""DDP check for npm_nb.npm.training: two gloo processes on the CPU give the loss and gradients of one process on the
concatenated batch, also when one rank has nothing to mask (audit D3: it used to hang), and the training loop runs end to
end under two ranks, with its metric reductions on the training device (audit D2).

Loss scaling: in DDP each rank averages the loss over its own spans and DDP averages the gradients over ranks, so the
objective is mean_r(loss_r), where loss_r scores rank r's queries against the candidates of *all* ranks (gathered
with gradient). The single-process reference computes exactly that: one unmasked forward pass over the concatenated
sequences of both ranks, each rank's masked copies encoded, and (loss_0 + loss_1) / 2 with `seq_offset` = the row of
each rank's first sequence in the concatenated candidates.
"""
import json, os, socket, tempfile, time
from datetime import timedelta
from pathlib import Path
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from npm_nb.core import load_state

os.environ.setdefault('HF_HUB_OFFLINE', '1'); os.environ.setdefault('TRANSFORMERS_OFFLINE', '1')

TEXTS = ["Thessaloniki is the second largest city in Greece. The port of Thessaloniki is on the Thermaic Gulf.",
         "Athens is the capital of Greece. The port of Piraeus serves Athens and the islands of the Aegean Sea.",
         "The White Tower of Thessaloniki stands on the waterfront. The city of Thessaloniki was founded in 315 BC.",
         "Patras is the third largest city in Greece. The port of Patras links Greece to Italy across the Ionian Sea.",
         "Heraklion is the largest city on Crete. The port of Heraklion is the main gate to the island of Crete.",
         "Larissa is the capital of Thessaly. The river Pineios flows through the city of Larissa in central Greece.",
         "Volos is a port city in Thessaly. The port of Volos is on the Pagasetic Gulf of the Aegean Sea.",
         "Ioannina is the capital of Epirus. The lake of Ioannina lies at the foot of the Pindus mountains of Greece."]
SHARDS = [[0, 1, 2], [3, 4]]  # rank 0 has three sequences, rank 1 two: the gather must pad B and L


def _setup():
    import transformers; transformers.logging.set_verbosity_error()
    from npm_nb.models import load_tokenizer
    from npm_nb.data.blocks import build_blocks
    torch.set_num_threads(1)
    tok = load_tokenizer('minilm')
    return tok, build_blocks({'text': TEXTS}, tok, max_len=32, source='toy', progress=False)


def _batches(objective, tok, blocks):
    from npm_nb.npm.training import TrainConfig, prepare_batch
    cfg = TrainConfig(objective=objective)
    return [prepare_batch([blocks[i] for i in idx], tok, cfg, seed=r + 1) for r, idx in enumerate(SHARDS)]


def _init(rank, world, port):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    dist.init_process_group('gloo', rank=rank, world_size=world, timeout=timedelta(seconds=60))  # a hang fails, not blocks


def _spawn(fn, args, timeout=240):
    "Run `fn(rank, *args)` on two processes; fail (instead of blocking the suite) if they have not finished in `timeout` s."
    ctx = mp.start_processes(fn, args=args, nprocs=2, join=False, start_method='spawn')
    end = time.time() + timeout
    while not ctx.join(timeout=max(0.1, end - time.time())):
        if time.time() >= end:
            for p in ctx.processes: p.terminate()
            pytest.fail(f'{fn.__name__}: the two ranks did not finish in {timeout} s (a collective is waiting for a rank that never calls it)')


def _ddp_step(rank, world, port, objective, out):
    _init(rank, world, port)
    try:
        from npm_nb.models import tiny_encoder
        from npm_nb.npm.training import TwoViews, batch_loss
        tok, blocks = _setup()
        net = torch.nn.parallel.DistributedDataParallel(TwoViews(tiny_encoder(tok)))  # eval mode: no dropout
        loss, _ = batch_loss(net, _batches(objective, tok, blocks)[rank], objective)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in net.module.encoder.named_parameters() if p.grad is not None}
        torch.save({'loss': loss.detach(), 'grads': grads}, Path(out)/f'rank{rank}.pt')
    finally: dist.destroy_process_group()


def _reference(objective, active=(0, 1)):
    "One process, the concatenated batch, mean over the ranks' per-rank losses (a rank not `active` contributes 0)."
    from npm_nb.models import tiny_encoder
    from npm_nb.npm.training import unmasked_inputs
    from npm_nb.npm.losses import start_end_loss, single_loss
    tok, blocks = _setup()
    enc = tiny_encoder(tok)
    for p in enc.pooler.parameters(): p.requires_grad_(False)
    bs = _batches(objective, tok, blocks)
    allrows = [blocks[i] for idx in SHARDS for i in idx]
    u = unmasked_inputs(allrows, tok)
    cand = enc(**u).last_hidden_state
    losses, offset = [], 0
    for r, (idx, b) in enumerate(zip(SHARDS, bs)):
        if r not in active: losses.append(torch.zeros(())); offset += len(idx); continue
        q = enc(input_ids=b['masked_input_ids'], attention_mask=b['masked_attention_mask']).last_hidden_state
        if objective == 'npm':
            l, _ = start_end_loss(q[b['span_seq'], b['q_start_pos']], q[b['span_seq'], b['q_end_pos']], b['span_seq'],
                                  b['span_tokens'], b['span_len'], cand, u['input_ids'], u['attention_mask'].bool(), offset)
        else:
            l, _ = single_loss(q[b['q_seq'], b['q_pos']], b['q_seq'], b['q_token'], cand, u['input_ids'],
                               u['attention_mask'].bool(), offset)
        losses.append(l); offset += len(idx)
    torch.stack(losses).mean().backward()
    return [l.detach() for l in losses], {n: p.grad for n, p in enc.named_parameters() if p.grad is not None}


def _free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


@pytest.mark.parametrize('objective', ['npm', 'single'])
def test_ddp_equals_single_process(objective, tmp_path):
    _spawn(_ddp_step, (2, _free_port(), objective, str(tmp_path)))
    ranks = [torch.load(tmp_path/f'rank{r}.pt') for r in range(2)]
    ref_losses, ref_grads = _reference(objective)
    for r in range(2): torch.testing.assert_close(ranks[r]['loss'], ref_losses[r], rtol=1e-5, atol=1e-6)
    assert set(ranks[0]['grads']) == set(ref_grads)
    for n, g in ref_grads.items():
        torch.testing.assert_close(ranks[0]['grads'][n], g, rtol=1e-4, atol=1e-6, msg=lambda m: f'{n}: {m}')
        torch.testing.assert_close(ranks[1]['grads'][n], g, rtol=1e-4, atol=1e-6)  # DDP: every rank holds the mean


def _ddp_train(rank, world, port, out):
    _init(rank, world, port)
    try:
        from npm_nb.models import tiny_encoder
        from npm_nb.npm.training import TrainConfig, train
        tok, blocks = _setup()
        cfg = TrainConfig(objective='npm', model='tiny', corpora=('toy',), batch_size=2, steps=3, warmup=1, lr=1e-3,
                          heldout=0.0, log_every=1, save_every=2, grad_accum=2, out_dir=out)
        train(cfg, model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False)
    finally: dist.destroy_process_group()


def test_ddp_train_loop(tmp_path):
    out = tmp_path/'run'
    _spawn(_ddp_train, (2, _free_port(), str(out)))
    rows = [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines()]
    assert [r['step'] for r in rows] == [1, 2, 3] and all(r['loss'] > 0 for r in rows)
    assert (out/'final'/'config.json').exists() and (out/'final'/'trainer_state.pt').exists()
    state = load_state(out/'final'/'trainer_state.pt')
    assert state['cursor'] == 3 * 2  # 3 steps x 2 accumulated batches (each rank takes cursor*world + rank)


def _ddp_step_nothing_to_mask(rank, world, port, objective, out):
    "Rank 1's batch had nothing to mask: it only encodes and gathers its candidates (batch None, unmasked fallback)."
    _init(rank, world, port)
    try:
        from npm_nb.models import tiny_encoder
        from npm_nb.npm.training import TwoViews, batch_loss, unmasked_inputs
        tok, blocks = _setup()
        net = torch.nn.parallel.DistributedDataParallel(TwoViews(tiny_encoder(tok)))
        b = _batches(objective, tok, blocks)[rank] if rank == 0 else None
        fb = unmasked_inputs([blocks[i] for i in SHARDS[rank]], tok) if b is None else None
        loss, _ = batch_loss(net, b, objective, fallback=fb)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in net.module.encoder.named_parameters() if p.grad is not None}
        torch.save({'loss': loss.detach(), 'grads': grads}, Path(out)/f'rank{rank}.pt')
    finally: dist.destroy_process_group()


@pytest.mark.parametrize('objective', ['npm', 'single'])
def test_ddp_rank_with_nothing_to_mask(objective, tmp_path):
    "D3: no hang, and the result of one process where rank 1 contributes candidates and a zero loss."
    _spawn(_ddp_step_nothing_to_mask, (2, _free_port(), objective, str(tmp_path)))
    ranks = [torch.load(tmp_path/f'rank{r}.pt') for r in range(2)]
    ref_losses, ref_grads = _reference(objective, active=(0,))
    torch.testing.assert_close(ranks[0]['loss'], ref_losses[0], rtol=1e-5, atol=1e-6)
    assert ranks[1]['loss'].item() == 0
    assert set(ranks[0]['grads']) == set(ref_grads)
    for n, g in ref_grads.items():  # rank 1's candidates got their gradient from rank 0's queries
        torch.testing.assert_close(ranks[0]['grads'][n], g, rtol=1e-4, atol=1e-6, msg=lambda m: f'{n}: {m}')
        torch.testing.assert_close(ranks[1]['grads'][n], g, rtol=1e-4, atol=1e-6)


def _ddp_train_rank1_masks_nothing(rank, world, port, out):
    "The training loop where rank 1 never has anything to mask; every all_reduce's tensor is checked for its device."
    _init(rank, world, port)
    try:
        import npm_nb.npm.training as T
        from npm_nb.models import tiny_encoder
        tok, blocks = _setup()
        if rank == 1: T.prepare_batch = lambda *a, **k: None  # as if every batch of this rank had nothing to mask
        devices, reduce = [], dist.all_reduce
        def recording(t, *a, **k): devices.append(str(t.device)); return reduce(t, *a, **k)
        dist.all_reduce = recording
        cfg = T.TrainConfig(objective='npm', model='tiny', corpora=('toy',), batch_size=2, steps=3, warmup=1, lr=1e-3,
                            heldout=0.0, log_every=1, save_every=10, out_dir=out, device='cpu')
        T.train(cfg, model=tiny_encoder(tok), tok=tok, blocks=blocks, progress=False)
        json.dump(devices, open(Path(out)/f'devices{rank}.json', 'w'))
    finally: dist.destroy_process_group()


def test_ddp_train_loop_rank_with_nothing_to_mask(tmp_path):
    "D3 in the loop (no hang, same metric keys on both ranks); D2: the metric reduction runs on the training device."
    out = tmp_path/'run'
    _spawn(_ddp_train_rank1_masks_nothing, (2, _free_port(), str(out)))
    rows = [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines()]
    assert [r['step'] for r in rows] == [1, 2, 3] and all(r['loss'] > 0 for r in rows)
    assert all(0 < r['mask_ratio'] < 0.15 for r in rows)  # the mean over both ranks' batches: rank 1 masked nothing
    for r in range(2):
        devices = json.loads((out/f'devices{r}.json').read_text())
        assert len(devices) >= 3 and set(devices) == {'cpu'}, devices  # on CUDA: cuda (an NCCL group rejects CPU tensors)


EXTRA = [[5, 6], [7]]  # extra candidate blocks of each rank (TrainConfig.extra_blocks): rank 0 has 3 + 2 rows, rank 1 2 + 1


def _extra_batches(tok, blocks):
    from npm_nb.npm.training import TrainConfig, prepare_batch
    cfg = TrainConfig(objective='npm', extra_blocks=2)
    return [prepare_batch([blocks[i] for i in idx], tok, cfg, seed=r + 1, extra_rows=[blocks[i] for i in EXTRA[r]])
            for r, idx in enumerate(SHARDS)]


def _ddp_step_extra(rank, world, port, out):
    _init(rank, world, port)
    try:
        from npm_nb.models import tiny_encoder
        from npm_nb.npm.training import TwoViews, batch_loss
        tok, blocks = _setup()
        net = torch.nn.parallel.DistributedDataParallel(TwoViews(tiny_encoder(tok)))  # eval mode: no dropout
        loss, st = batch_loss(net, _extra_batches(tok, blocks)[rank], 'npm')
        loss.backward()
        grads = {n: p.grad.clone() for n, p in net.module.encoder.named_parameters() if p.grad is not None}
        torch.save({'loss': loss.detach(), 'grads': grads, 'n_dropped': st['n_dropped']}, Path(out)/f'rank{rank}.pt')
    finally: dist.destroy_process_group()


def test_ddp_extra_blocks_equal_single_process(tmp_path):
    """With extra candidate blocks every rank gathers its batch's rows followed by its extra rows: the loss and gradients
    of one process whose pool is [rank 0 rows, rank 0 extras, rank 1 rows, rank 1 extras], the extras without gradient."""
    _spawn(_ddp_step_extra, (2, _free_port(), str(tmp_path)))
    ranks = [torch.load(tmp_path/f'rank{r}.pt') for r in range(2)]
    from npm_nb.models import tiny_encoder
    from npm_nb.npm.training import unmasked_inputs
    from npm_nb.npm.losses import start_end_loss
    tok, blocks = _setup()
    enc = tiny_encoder(tok)
    for p in enc.pooler.parameters(): p.requires_grad_(False)
    bs = _extra_batches(tok, blocks)
    order = [(i, False) for i in SHARDS[0]] + [(i, True) for i in EXTRA[0]] + [(i, False) for i in SHARDS[1]] + [(i, True) for i in EXTRA[1]]
    u = unmasked_inputs([blocks[i] for i, _ in order], tok)
    with_grad = enc(**u).last_hidden_state
    with torch.no_grad(): no_grad = enc(**u).last_hidden_state
    cand = torch.stack([no_grad[j] if extra else with_grad[j] for j, (_, extra) in enumerate(order)])
    losses = []
    for b, offset in zip(bs, (0, len(SHARDS[0]) + len(EXTRA[0]))):
        q = enc(input_ids=b['masked_input_ids'], attention_mask=b['masked_attention_mask']).last_hidden_state
        l, st = start_end_loss(q[b['span_seq'], b['q_start_pos']], q[b['span_seq'], b['q_end_pos']], b['span_seq'],
                               b['span_tokens'], b['span_len'], cand, u['input_ids'], u['attention_mask'].bool(), offset)
        losses.append(l)
    torch.stack(losses).mean().backward()
    ref_grads = {n: p.grad for n, p in enc.named_parameters() if p.grad is not None}
    for r in range(2):
        torch.testing.assert_close(ranks[r]['loss'], losses[r].detach(), rtol=1e-5, atol=1e-6)
        assert ranks[r]['n_dropped'] == 0  # every span has a positive in the gathered pool
    assert set(ranks[0]['grads']) == set(ref_grads)
    for n, g in ref_grads.items():
        torch.testing.assert_close(ranks[0]['grads'][n], g, rtol=1e-4, atol=1e-6, msg=lambda m: f'{n}: {m}')
        torch.testing.assert_close(ranks[1]['grads'][n], g, rtol=1e-4, atol=1e-6)
