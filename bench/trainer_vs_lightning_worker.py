# The Python side of bench/trainer_vs_lightning: trains the benchmark's models with PyTorch Lightning
# 2.6.6 (barebones, default, DDP and FSDP Trainers) and with a plain PyTorch loop, for the C++ program
# to compare with volt's Trainer on the same model, initial weights, data and optimizer. Runs under
# PyTorch 2.11 and Lightning from the project-local prefixes (tools/setup_lightning.sh):
#
#   PYTHONPATH=.deps/pytorch2:.deps/lightning /usr/bin/python3 bench/trainer_vs_lightning_worker.py \
#       --model {cnn,mlp,gpt} --device {cuda,cpu} --rows ROW[,ROW...] --steps N --warmup W \
#       --round R --root DIR [--batch B]
#
# ROW is lightning_barebones, lightning_default, raw_pytorch, raw_pytorch_fused, raw_pytorch_compiled,
# raw_pytorch_autotuned, lightning_ddp or lightning_fsdp (raw_pytorch_fused: the plain loop with
# AdamW(fused=True); raw_pytorch_compiled and raw_pytorch_autotuned: that loop with the model under
# torch.compile, mode "reduce-overhead" (CUDA graphs) and "max-autotune", compiled during the
# warm-up steps; every other row uses AdamW's default, the foreach implementation on a GPU). The rows
# run one after another in this process, in the given order rotated by R, each with its own model,
# optimizer, data and Trainer (default_root_dir DIR/<row>). Each prints exactly one line to stdout:
#
#   ROW <row> step_ms <float> samples_per_s <float> peak_bytes <int> init_sum <%.9e> final_loss <%.6e>
#   ROW <row> error <exception type>: <message>
#
# step_ms and samples_per_s (tokens per second for gpt) cover steps W .. W+N-1, from the start of step
# W to the end of step W+N-1 (after its optimizer step), the device synchronized at both ends.
# peak_bytes is torch.cuda.max_memory_allocated over the row (0 on the CPU); init_sum the sum of all
# parameters right after the shared initialisation (initialise() below); final_loss the last step's.
# Everything else, Lightning's progress bar, model summary and warnings included, goes to stderr: the
# process's stdout is moved onto stderr at start and only the ROW lines go to the original stdout.
# Exit status 0 whatever the rows did; 2 for bad arguments.
import argparse
import contextlib
import gc
import logging
import math
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch import nn

ROWS = ("lightning_barebones", "lightning_default", "raw_pytorch", "raw_pytorch_fused", "raw_pytorch_compiled",
        "raw_pytorch_autotuned", "lightning_ddp", "lightning_fsdp")
COMPILE_MODES = {"raw_pytorch_compiled": "reduce-overhead", "raw_pytorch_autotuned": "max-autotune"}
DEFAULT_BATCH = {"cnn": 256, "mlp": 512, "gpt": 8}
GPT_VOCAB, GPT_SEQ, GPT_DIM, GPT_HEADS, GPT_LAYERS = 50304, 512, 768, 12, 6


def parse_args():
    parser = argparse.ArgumentParser(description="The Python side of bench/trainer_vs_lightning.")
    parser.add_argument("--model", required=True, choices=sorted(DEFAULT_BATCH))
    parser.add_argument("--device", required=True, choices=("cuda", "cpu"))
    parser.add_argument("--rows", required=True, help="comma-separated, from: " + ",".join(ROWS))
    parser.add_argument("--steps", required=True, type=int, help="timed steps N (>= 1)")
    parser.add_argument("--warmup", required=True, type=int, help="untimed steps W before them (>= 0)")
    parser.add_argument("--round", required=True, type=int, help="rotates the row order (>= 0)")
    parser.add_argument("--root", required=True, help="Lightning's default_root_dir is ROOT/<row>")
    parser.add_argument("--batch", type=int, help="default: cnn 256, mlp 512, gpt 8")
    args = parser.parse_args()
    args.rows = args.rows.split(",")
    for row in args.rows:
        if row not in ROWS:
            parser.error(f"unknown row {row!r}; rows are {', '.join(ROWS)}")
    if args.steps < 1 or args.warmup < 0 or args.round < 0:
        parser.error("--steps must be >= 1, --warmup and --round >= 0")
    if args.batch is None:
        args.batch = DEFAULT_BATCH[args.model]
    if args.batch < 1:
        parser.error("--batch must be >= 1")
    return args


# ---- models: parameter names are the C++ side's (it initialises by sorted name) ---------------------

class CNN(nn.Module):
    """The main job's CNN, for [B,1,28,28] images of 10 classes."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.25),
                                  nn.Linear(128, 10))

    def forward(self, x):
        return self.head(self.features(x))


class MLP(nn.Module):
    """1024 -> 4096 -> 4096 -> 10."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                                 nn.Linear(4096, 10))

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(GPT_DIM, 3 * GPT_DIM)
        self.proj = nn.Linear(GPT_DIM, GPT_DIM)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, GPT_HEADS, GPT_DIM // GPT_HEADS).transpose(1, 2)
                   for z in self.qkv(x).split(GPT_DIM, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, GPT_DIM))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(GPT_DIM)
        self.attn = Attention()
        self.ln2 = nn.LayerNorm(GPT_DIM)
        self.mlp = nn.Sequential(nn.Linear(GPT_DIM, 4 * GPT_DIM), nn.GELU(), nn.Linear(4 * GPT_DIM, GPT_DIM))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A GPT-2-small-width decoder: 6 pre-norm blocks, causal attention, untied output head."""

    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(GPT_VOCAB, GPT_DIM)
        self.pos_emb = nn.Embedding(GPT_SEQ, GPT_DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(GPT_LAYERS))
        self.ln_f = nn.LayerNorm(GPT_DIM)
        self.head = nn.Linear(GPT_DIM, GPT_VOCAB, bias=False)

    def forward(self, tokens):
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


MODELS = {"cnn": CNN, "mlp": MLP, "gpt": GPT}


def loss_fn(name):
    if name == "gpt":
        return lambda logits, target: F.cross_entropy(logits.float().view(-1, GPT_VOCAB), target.view(-1))
    return F.cross_entropy


def initialise(model):
    """The weights both sides start from; returns their sum (init_sum). Call on the CPU, in float32."""
    params = sorted(model.named_parameters())
    with torch.no_grad():
        for i, (name, p) in enumerate(params):
            if p.dim() >= 2:
                g = torch.Generator().manual_seed(1000 + i)
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.numel() / p.shape[0]))
            elif name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.zero_()
        return sum(p.double().sum().item() for _, p in params)


def make_batches(name, batch, count, device):
    """count pre-sliced (input, target) batches on the device: no loader work inside the timed steps."""
    g = torch.Generator().manual_seed(1)
    n = count * batch
    if name == "cnn":
        x = torch.randn([n, 1, 28, 28], generator=g)
        y = torch.randint(0, 10, [n], generator=g)
    elif name == "mlp":
        x = torch.randn([n, 1024], generator=g)
        y = torch.randint(0, 10, [n], generator=g)
    else:
        x = torch.randint(0, GPT_VOCAB, [n, GPT_SEQ], generator=g)
        y = torch.randint(0, GPT_VOCAB, [n, GPT_SEQ], generator=g)
    x, y = x.to(device), y.to(device)
    return [(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]) for i in range(count)]


class Batches:
    """The pre-sliced batches as one iterable: Lightning takes a plain list (or tuple) passed as
    train_dataloaders for several dataloaders, each of its items one, and so would split every batch."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def make_optimizer(params, fused=False):
    if fused:
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=True)
    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)


class Window:
    """Wall time from the start of step `first` to the end of step `last`, device synchronized."""

    def __init__(self, device, first, last):
        self.device, self.first, self.last = device, first, last
        self.start = self.end = None

    def _now(self):
        if self.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    def step_start(self, step):
        if step == self.first:
            self.start = self._now()

    def step_end(self, step):
        if step == self.last:
            self.end = self._now()

    def elapsed(self):
        if self.start is None or self.end is None:
            raise RuntimeError(f"the timed steps {self.first}..{self.last} did not all run")
        return self.end - self.start


# ---- rows -------------------------------------------------------------------------------------------

def run_raw(args, net, batches, window, fused):
    net.train()
    optimizer = make_optimizer(net.parameters(), fused)
    compute_loss = loss_fn(args.model)
    mixed = args.model == "gpt"  # bf16 autocast over forward and loss, as Lightning's "bf16-mixed"
    loss = None
    for step, (x, y) in enumerate(batches):
        window.step_start(step)
        with torch.autocast(args.device, dtype=torch.bfloat16) if mixed else contextlib.nullcontext():
            loss = compute_loss(net(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        window.step_end(step)
    return float(loss.detach())


def run_lightning(args, row, net, batches, window):
    import pytorch_lightning as pl

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net
            self.compute_loss = loss_fn(args.model)
            self.last_loss = None

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = self.compute_loss(self.net(x), y)
            # Lightning 2.6.6 ignores self.log under Trainer(barebones=True), with a warning.
            if not self.trainer.barebones:
                self.log("train_loss", loss, prog_bar=True)
            self.last_loss = loss.detach()
            return loss

        def configure_optimizers(self):
            return make_optimizer(self.parameters())

    class Timing(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            window.step_start(batch_idx)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            window.step_end(batch_idx)

    settings = dict(
        accelerator=args.device, devices=1, precision="bf16-mixed" if args.model == "gpt" else "32-true",
        max_steps=args.warmup + args.steps, max_epochs=1, limit_val_batches=0, num_sanity_val_steps=0,
        default_root_dir=os.path.join(args.root, row), callbacks=[Timing()])
    if row != "lightning_default":
        settings["barebones"] = True
    if row == "lightning_ddp":
        settings["strategy"] = "ddp"
    elif row == "lightning_fsdp":
        settings["strategy"] = "fsdp"
    # The default row keeps Lightning's info messages (its model summary is one); the others drop them.
    level = logging.INFO if row == "lightning_default" else logging.WARNING
    for logger in ("pytorch_lightning", "lightning_fabric"):
        logging.getLogger(logger).setLevel(level)

    module = Module()
    trainer = pl.Trainer(**settings)
    try:
        trainer.fit(module, train_dataloaders=Batches(batches))
        return float(module.last_loss)
    finally:
        if row in ("lightning_ddp", "lightning_fsdp"):
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()


def run_row(args, row):
    cuda = args.device == "cuda"
    torch.manual_seed(args.round)
    if cuda:
        if not torch.cuda.is_available():
            raise RuntimeError(f"--device cuda, but torch {torch.__version__} finds no CUDA device")
        torch.cuda.reset_peak_memory_stats()
    net = MODELS[args.model]()
    init_sum = initialise(net)
    net.to(args.device)
    count = args.warmup + args.steps
    batches = make_batches(args.model, args.batch, count, args.device)
    window = Window(args.device, args.warmup, count - 1)
    if row in ("raw_pytorch", "raw_pytorch_fused") or row in COMPILE_MODES:
        if row in COMPILE_MODES:
            net = torch.compile(net, mode=COMPILE_MODES[row])
        final_loss = run_raw(args, net, batches, window, fused=row != "raw_pytorch")
    else:
        final_loss = run_lightning(args, row, net, batches, window)
    elapsed = window.elapsed()
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    per_step = args.batch * (GPT_SEQ if args.model == "gpt" else 1)
    return (f"step_ms {elapsed / args.steps * 1e3:.4f} samples_per_s {per_step * args.steps / elapsed:.2f}"
            f" peak_bytes {peak} init_sum {init_sum:.9e} final_loss {final_loss:.6e}")


def free_memory(device):
    gc.collect()
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()


def main():
    args = parse_args()
    # Only the ROW lines reach the original stdout; everything else written to fd 1 (tqdm, print,
    # native libraries) lands on stderr.
    sys.stdout.flush()
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    os.makedirs(args.root, exist_ok=True)
    start = args.round % len(args.rows)
    for row in args.rows[start:] + args.rows[:start]:
        try:
            line = run_row(args, row)
        except Exception as e:  # noqa: BLE001 -- a row that cannot run here is reported, not fatal
            traceback.print_exc(file=sys.stderr)
            message = " ".join(f"{type(e).__name__}: {e}".split())
            line = "error " + message[:1000]
        free_memory(args.device)
        results.write(f"ROW {row} {line}\n")
        results.flush()
    sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
