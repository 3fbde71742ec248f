"""Reads what volt wrote, with PyTorch, and writes a state dict back for volt to read.

Usage: check_interop.py CHECKPOINT WEIGHTS REFERENCE PYTHON_WEIGHTS_OUT
  CHECKPOINT  a Trainer checkpoint of the Fashion-MNIST Classifier after a short fit
  WEIGHTS     volt::save_weights of the same model
  REFERENCE   torch::pickle_save({"x": images, "logits": the model's eval logits, "global_step": n})
Prints one line per check and exits non-zero on the first failure.
"""
import pickletools
import sys
import zipfile

import torch
from torch import nn


class Classifier(nn.Module):
    """The PyTorch twin of examples/fashion_mnist/classifier.cpp."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
                                  nn.Linear(128, 10))

    def forward(self, x):
        return self.head(self.features(x))


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        sys.exit(1)


def main():
    checkpoint_path, weights_path, reference_path, out_path = sys.argv[1:5]
    # The test's own file (torch::pickle_save of a typed dict, which pickles restore_type_tag calls):
    # PyTorch 2.6+ loads with weights_only=True by default and would refuse it.
    reference = torch.load(reference_path, weights_only=False)
    # volt's checkpoint with torch.load's defaults: on PyTorch 2.6+ that is weights_only=True,
    # which volt's checkpoints pass (the GLOBAL check below says why).
    ckpt = torch.load(checkpoint_path)
    check(isinstance(ckpt, dict), "torch.load returns a dict")
    check(ckpt["format_version"] == 1 and isinstance(ckpt["volt_version"], str), "format and volt versions")
    check(ckpt["global_step"] == reference["global_step"] and ckpt["epoch"] == 1, "epoch and global_step")

    model = Classifier()
    model.load_state_dict(ckpt["state_dict"])  # strict: every name and shape matches
    model.eval()
    with torch.no_grad():
        logits = model(reference["x"])
    check(torch.allclose(logits, reference["logits"], rtol=0, atol=1e-4),
          "the PyTorch twin computes volt's logits (max diff %.2e)" % (logits - reference["logits"]).abs().max())

    optimizer = torch.optim.AdamW(model.parameters(), lr=1.0)
    optimizer.load_state_dict(ckpt["optimizer_states"][0])
    steps = {float(s["step"]) for s in optimizer.state.values()}
    check(steps == {float(reference["global_step"])}, "torch.optim.AdamW loads the optimizer state (step %s)" % steps)
    check(optimizer.param_groups[0]["lr"] == ckpt["optimizer_states"][0]["param_groups"][0]["lr"],
          "the group options come from the checkpoint")
    batch = reference["x"][:4]
    model.train()
    loss = model(batch).logsumexp(1).mean()
    loss.backward()
    optimizer.step()  # the restored state is usable, not just readable
    check(torch.isfinite(next(model.parameters())).all().item(), "an optimizer step with the restored state")

    check(ckpt["rng_states"]["torch"].dtype == torch.uint8 and
          ckpt["rng_states"]["torch"].shape == torch.get_rng_state().shape, "rng_states['torch'] is a CPU RNG state")
    check(ckpt["hyper_parameters"]["lr"] == 2e-3, "hyper_parameters")
    check(isinstance(ckpt["loops"]["fit_loop"]["global_step"], int), "loop progress")
    check(len(ckpt["lr_schedulers"]) == 1 and ckpt["lr_schedulers"][0]["last_epoch"] == reference["global_step"],
          "LR scheduler state")

    # What torch.load(weights_only=True) accepts: no globals but tensor rebuilding (PyTorch 1.13's
    # weights-only unpickler also lacks float support, which 2.x has; hence this check for the
    # checkpoint and a real weights_only load for the weights file below).
    with zipfile.ZipFile(checkpoint_path) as archive:
        names = archive.namelist()
        pickle_bytes = archive.read(next(n for n in names if n.endswith("/data.pkl")))
    used = {arg for op, arg, _ in pickletools.genops(pickle_bytes) if op.name == "GLOBAL"}
    check(all(g in ("torch._utils _rebuild_tensor_v2", "collections OrderedDict") or
              (g.startswith("torch ") and g.endswith("Storage")) for g in used),
          "the pickle calls nothing but tensor rebuilding: %s" % sorted(used))
    check(any(n.endswith("/volt_integrity") for n in names), "the archive carries volt's integrity record")

    twin = Classifier()
    twin.load_state_dict(torch.load(weights_path, weights_only=True))
    twin.eval()
    with torch.no_grad():
        check(torch.allclose(twin(reference["x"]), reference["logits"], rtol=0, atol=1e-4),
              "module.load_state_dict(torch.load(weights file, weights_only=True))")

    # Back to volt: a plain dict (an OrderedDict does not unpickle in LibTorch).
    written = {name: value * 0.5 if value.is_floating_point() else value for name, value in twin.state_dict().items()}
    torch.save(written, out_path)
    print("wrote", out_path)


if __name__ == "__main__":
    main()
