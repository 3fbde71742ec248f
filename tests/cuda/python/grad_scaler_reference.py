"""PyTorch's own GradScaler on CUDA, the reference for tests/cuda/grad_scaler_parity_test.cpp.

Usage: grad_scaler_reference.py INPUT
  INPUT  torch::pickle_save({"weight", "bias", "inputs", "targets", "growth_interval"}) from the test
Trains Linear(8, 1) from the given weights on the given batches, in order, with float16 autocast,
torch.amp.GradScaler (init_scale 65536, growth_interval from INPUT), SGD(lr=0.01) and a StepLR
(gamma 0.9) stepped after every optimizer step that was not skipped (what volt's Trainer does,
and what PyTorch's AMP recipe does when it checks the scale). Prints one line per batch:
  STEP i scale=<scale after update> stepped=<0|1> lr=<lr>
and finally: WEIGHTS <17-digit values, comma-separated>.
"""
import sys

import torch


def main():
    data = torch.load(sys.argv[1], weights_only=False)  # the test's typed dict: not weights-only
    device = torch.device("cuda", 0)
    model = torch.nn.Linear(8, 1).to(device)
    with torch.no_grad():
        model.weight.copy_(data["weight"])
        model.bias.copy_(data["bias"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    scaler = torch.amp.GradScaler("cuda", init_scale=65536.0, growth_interval=int(data["growth_interval"]))
    for i, (x, y) in enumerate(zip(data["inputs"], data["targets"])):
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = (model(x) - y).square().mean()
        scaler.scale(loss).backward()
        before = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        stepped = scaler.get_scale() >= before
        if stepped:
            scheduler.step()
        print(f"STEP {i} scale={scaler.get_scale()!r} stepped={int(stepped)} lr={optimizer.param_groups[0]['lr']!r}")
    values = torch.cat([p.detach().reshape(-1).double().cpu() for p in model.parameters()])
    print("WEIGHTS " + ",".join(f"{v:.17g}" for v in values.tolist()))


if __name__ == "__main__":
    main()
