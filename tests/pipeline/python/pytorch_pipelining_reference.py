"""PyTorch 2.x's torch.distributed.pipelining as the oracle of volt's pipeline stages
(tests/pipeline/pytorch_pipelining_oracle_test.cpp).

  PYTHON pytorch_pipelining_reference.py --stages S --starts 0,a,b --microbatches M
      --schedule gpipe|1f1b --data FILE --port P

PYTHON is the PyTorch 2.x of a build against a PyTorch wheel's LibTorch (testing::reference_python);
PyTorch 1.13 has no torch.distributed.pipelining and is refused.

The model is the test's MLP: Sequential(Linear(6,16), Tanh, Linear(16,16), Tanh, Linear(16,8), Tanh,
Linear(8,1)), cut at the entries --starts names (volt's balanced split, computed by the test).
FILE holds, one per line, comma-separated: the model's parameters flattened in named_parameters
order, then for every step its input batch ([B, 6], row-major) and its target ([B, 1]).

Each of S processes (gloo on 127.0.0.1:P, the CPU) builds the model, loads the parameters, keeps
its stage's entries (nn.Sequential keeps their names) in a pipelining.PipelineStage, and steps
ScheduleGPipe or Schedule1F1B with M micro-batches and loss_fn = mean squared error, then SGD with
lr 0.1. After every step every stage notes "STEP stage=s step=k params=..." (its parameters in
named_parameters order, each exactly), in a file of its own beside FILE, which the parent prints
once every stage is done. Gradients: PyTorch's schedules sum the micro-batches'
gradients and divide by M after the backwards (scale_grads=True); volt divides each micro-batch's
loss by M before its backward: the same mean, rounded at another place.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def model():
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def numbers(line):
    return torch.tensor([float(v) for v in line.strip().split(",")], dtype=torch.float32)


def run(stage_index, args):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=stage_index, world_size=args.stages,
                            init_method=f"tcp://127.0.0.1:{args.port}")
    with open(args.data) as f:
        lines = f.readlines()
    whole = model()
    flat = numbers(lines[0])
    offset = 0
    with torch.no_grad():
        for _, p in whole.named_parameters():
            p.copy_(flat[offset:offset + p.numel()].reshape(p.shape))
            offset += p.numel()
    starts = [int(v) for v in args.starts.split(",")] + [len(whole)]
    mine = torch.nn.Sequential()
    for i in range(starts[stage_index], starts[stage_index + 1]):
        mine.add_module(str(i), whole[i])
    stage = PipelineStage(mine, stage_index, args.stages, torch.device("cpu"))
    loss_fn = lambda y, t: (y - t).square().mean()  # noqa: E731
    schedule_class = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
    schedule = schedule_class(stage, args.microbatches, loss_fn=loss_fn)
    sgd = torch.optim.SGD(mine.parameters(), lr=0.1)
    steps = (len(lines) - 1) // 2
    printed = []
    for k in range(steps):
        x = numbers(lines[1 + 2 * k]).reshape(-1, 6)
        y = numbers(lines[2 + 2 * k]).reshape(-1, 1)
        sgd.zero_grad()
        if stage_index == 0:
            schedule.step(x)
        elif stage_index == args.stages - 1:
            schedule.step(target=y)
        else:
            schedule.step()
        sgd.step()
        values = torch.cat([p.detach().reshape(-1) for _, p in mine.named_parameters()]).double().tolist()
        printed.append(f"STEP stage={stage_index} step={k} params=" + ",".join(repr(v) for v in values))
    # A line longer than a pipe's atomic write would interleave with the other stages' on a shared
    # stdout: each stage writes a file of its own, which the parent prints.
    with open(stage_file(args, stage_index), "w") as f:
        f.write("\n".join(printed) + "\n")
    dist.barrier()
    dist.destroy_process_group()


def stage_file(args, stage_index):
    return os.path.join(os.path.dirname(os.path.abspath(args.data)), f"pipelining_stage{stage_index}.txt")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stages", type=int, required=True)
    parser.add_argument("--starts", required=True)
    parser.add_argument("--microbatches", type=int, required=True)
    parser.add_argument("--schedule", choices=["gpipe", "1f1b"], required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    major = int(torch.__version__.split(".")[0])
    if major < 2:
        raise SystemExit(f"torch.distributed.pipelining needs PyTorch 2.x; this is {torch.__version__}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(run, args=(args,), nprocs=args.stages, join=True)
    for stage_index in range(args.stages):
        with open(stage_file(args, stage_index)) as f:
            print(f.read(), end="", flush=True)


if __name__ == "__main__":
    main()
