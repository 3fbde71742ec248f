"""PyTorch 2.x's torch.distributed.pipelining (PipelineStage under ScheduleGPipe / Schedule1F1B) as the
oracle of volt's `pipeline` strategy (tests/strategies/pytorch_pipeline_strategy_oracle_test.cpp).

  PYTHON pytorch_pipeline_strategy_reference.py --world N [--epochs 2] [--batch-size 4] [--port P]
      --case SPEC;OPTIMIZER;MODEL;INITIAL [--case ...]

MODEL is mlp, or mlp_dropout (a Dropout(0.2) entry first and last in the body: 7 entries, the 2-stage
cut [body.0 (Dropout), body.1 | Tanh, body.3, Tanh, body.5 (Dropout), linear], one dropout a stage).
Each stage draws its masks from its process's default generator, which worker_problem.train seeds as
volt's Trainer does; PipelineStage gets input_args and output_args (stage_examples), so that no
shape inference runs a forward that would draw masks volt's stages never draw.

PYTHON is the PyTorch 2.x of a build against a PyTorch wheel's LibTorch (testing::reference_python:
`env PYTHONPATH=.deps/pytorch2 /usr/bin/python3`). PyTorch 1.13 has no torch.distributed.pipelining
(2.4 made it public); before 2.7 its schedules had no scale_grads and summed the micro-batches'
gradients without dividing them by M, another gradient from a mean loss_fn: both are refused (the
script asks the schedules' signature for scale_grads, not only the version).

SPEC is volt's --strategy `pipeline:...` text (docs/pipeline.md, "The pipeline strategy"); each key
becomes what PyTorch does for it, with volt's defaults:
  stages=S (default 0: every process)
        the ranks form the 2-D mesh init_device_mesh("cpu", (S, N / S), mesh_dim_names=("pp", "dp")),
        row-major as volt's ProcessMesh pp=S,dp=N/S: rank = stage * (N / S) + replica. The S ranks
        of a pipeline (mesh["pp"], the same replica) take the same batches: worker_problem.train's
        DistributedSampler over N / S replicas, replica rank % (N / S) (not a block of consecutive
        ranks, as tensor parallelism's), batch --batch-size per replica. The model's layers are the
        worker's 5 entries body.0, body.1 (Tanh), body.2, body.3 (Tanh), linear, cut into S
        contiguous stages balanced by parameter count (balanced_stage_starts below, step for step
        strategies/pipeline/stage_split.cpp: the largest stage as small as any split makes it, ties
        to the earliest boundaries, every stage at least one entry). Stage s runs its entries as
        nn.Sequential in pipelining.PipelineStage(stage module, s, S, cpu, group=mesh["pp"]'s
        group), its activations' shapes inferred at the first step (no input_args). On the MLP
        (body.0 36 parameters, body.2 20, linear 5) S=2 cuts [body.0 | Tanh, body.2, Tanh, linear]
        and S=3 [body.0 | Tanh | body.2, Tanh, linear]: the middle stage of 3 has no parameters
        (its "optimizer" steps nothing; torch.optim refuses an empty parameter list).
  microbatches=M (default 4)
        ScheduleGPipe / Schedule1F1B(stage, n_microbatches=M, loss_fn=mean squared error,
        scale_grads=True): schedule.step splits the batch on dim 0 into M equal micro-batches (the
        batch must divide into M, as volt requires).
  schedule=1f1b|gpipe (default 1f1b)
        Schedule1F1B or ScheduleGPipe. PyTorch's 1F1B refuses fewer micro-batches than stages
        (volt's runs them), so M < S under 1f1b is refused here.
  data_parallel=ddp|fsdp (default ddp)
        how each stage's replicas (mesh["dp"]) share it: DistributedDataParallel over their group
        (below), or FSDP2's fully_shard(stage module, mesh=mesh["dp"], reshard_after_forward=False),
        torchtitan's sharding of a pipeline stage: the stage's parameters become DTensors sharded
        on dim 0, gathered for the step; PipelineStage defers the reduce-scatter to the last
        micro-batch's backward. The optimizer steps the DTensor shards; the whole model is their
        full_tensor().
A key this script does not map is refused (SystemExit): the oracle never ignores an option.

Gradient scaling, the one place the arithmetic differs from volt's. PyTorch's last stage runs each
micro-batch's backward from loss_fn's value and, after the step's last backward, divides every
stage gradient by M (scale_grads=True: stage.scale_grads in perform_reduce_grad); volt divides each
micro-batch's loss by M before its backward. Both are the gradient of the micro-batches' mean loss.
For M a power of two (every case of the test: 2 and 4) dividing by M is exact in float32 (no
subnormals here), so g0/M + g1/M + ... and (g0 + g1 + ...)/M are the same bits, and multiplying an
incoming gradient by 1/M commutes with every product and sum of the backward: the two orders give
the same bits. For other M they would differ in the last bit.

Gradient averaging over the data-parallel replicas (N / S > 1). Each stage module is wrapped in
DistributedDataParallel over mesh["dp"]'s group (the ranks holding the same stage), PyTorch's own
composition of pipelining with DDP: PipelineStage runs the micro-batches' backwards but the last
under DDP's no_sync, and the last one with the reducer prepared, so the all-reduce averages the
summed gradients (DDP without a comm hook: each gradient times 1 / (N / S) in the bucket, then the
sum), and scale_grads divides by M after it. volt averages each stage's gradients over its `dp`
group after the step (Note [The pipeline strategy]), the same mean: on 2 replicas any mean is the
same bits (exact halvings, a sum of two values in either order), and dividing by M before or after
it is exact as above.

The tolerance that follows (the C++ test's 1e-6 relative, its header gives the numbers): measured
against volt built on PyTorch 2.11's LibTorch, SGD with momentum is this script's run bit for bit on
2, 3 and 4 ranks under both schedules; Adam differs from step 2 by under 1e-7 relative, LibTorch's
C++ Adam against Python's torch.optim.Adam (one Python process taking the same micro-batches is this
script's run bit for bit, and volt's pipeline is volt's single_device with the same accumulation).
Against LibTorch 1.13 the kernels differ from step 1 (up to 5e-5 after 32 momentum steps).

What runs on the CPU over Gloo: everything PyTorch does here, unpatched. The stages' shape
exchange and activations and their gradients are Gloo's batched isend/irecv on the pp group;
DDP's all-reduce, Gloo's on the dp group. Nothing of PyTorch is replaced.

The problem (data, order, loss, optimizers, the CASE K STEP lines) is worker_problem.py's; each
step is the schedule's step (forward_backward), then the optimizer's step over this rank's stage.
Every rank prints the whole model after every step, as each of volt's ranks does: each stage's
parameters broadcast over the pp group from the rank holding it (a collective every rank runs in
the same order), in the whole RegressionMlp's named_parameters order.
"""
import inspect
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import worker_problem  # noqa: E402
from worker_problem import refuse, take  # noqa: E402

TORCH_VERSION = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
SCHEDULES = ("1f1b", "gpipe", "interleaved_1f1b")


def pipelining_api():
    """{schedule: class}, PipelineStage, DistributedDataParallel; refuses a PyTorch without them."""
    if TORCH_VERSION < (2, 7):
        refuse(f"torch.distributed.pipelining with scale_grads (dividing the summed micro-batch gradients by M) "
               f"needs PyTorch >= 2.7; this is {torch.__version__}")
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
    from torch.nn.parallel import DistributedDataParallel
    for schedule in (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B):
        if "scale_grads" not in inspect.signature(schedule.__init__).parameters:
            refuse(f"{schedule.__name__} of PyTorch {torch.__version__} takes no scale_grads: its gradients "
                   "would be the micro-batches' sum, not their mean")
    return ({"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved_1f1b": ScheduleInterleaved1F1B},
            PipelineStage, DistributedDataParallel)


def entries_of(model):
    """The worker's pipeline_layers(): (name in the whole model, module), in order."""
    return [(f"body.{i}", module) for i, module in enumerate(model.body)] + [("linear", model.linear)]


def balanced_stage_starts(parameters, stages):
    """strategies/pipeline/stage_split.cpp's balanced_stage_starts: the first entry of each of `stages`
    contiguous stages over entries of `parameters[i]` elements, the largest stage's count the least
    any split has, ties to the earliest boundaries (a later cut replaces an earlier one only when
    strictly smaller), every stage at least one entry."""
    n = len(parameters)
    if stages < 1 or n < stages:
        refuse(f"stages={stages} but the model has {n} entries (volt refuses it too)")
    prefix = [0]
    for count in parameters:
        prefix.append(prefix[-1] + count)
    best = [[None] * (n + 1) for _ in range(stages + 1)]
    cut = [[None] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for k in range(1, stages + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):  # the k-th stage runs entries [j, i)
                if best[k - 1][j] is None:
                    continue
                largest = max(best[k - 1][j], prefix[i] - prefix[j])
                if best[k][i] is None or largest < best[k][i]:
                    best[k][i], cut[k][i] = largest, j
    starts, i = [0] * stages, n
    for k in range(stages, 0, -1):
        i = cut[k][i]
        starts[k - 1] = i
    return starts


def stage_examples(entries, starts, stage, rows):
    """An input and an output of stage `stage` for a micro-batch of `rows` samples, for PipelineStage's
    input_args and output_args: with both, PyTorch infers no shapes when the schedule first steps.
    That inference runs the stage's forward once on the first micro-batch before the schedule's own,
    which draws dropout masks from the default generator (volt's stages, whose shapes travel in a
    header, draw none), so every mask after it would be the next one. Computed here under a forked
    generator: nothing is drawn."""
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        activation = torch.zeros(rows, worker_problem.FEATURES)
        for _, module in entries[:starts[stage]]:
            activation = module(activation)
        example_input = activation
        for _, module in entries[starts[stage]:starts[stage + 1]]:
            activation = module(activation)
    return example_input, activation


def as_count(name, least):
    def convert(value):
        if not value.isdigit() or int(value) < least:
            refuse(f"{name} is a whole number >= {least}, got '{value}'")
        return int(value)
    return convert


def as_schedule(value):
    if value not in SCHEDULES:
        refuse(f"schedule is 1f1b or gpipe, got '{value}'")
    return value


class NoParameters:
    """The optimizer of a stage without parameters (a Tanh alone): nothing to zero or step."""

    def zero_grad(self):
        pass

    def step(self):
        pass


def as_data_parallel(value):
    if value not in ("ddp", "fsdp"):
        refuse(f"data_parallel is ddp or fsdp, got '{value}'")
    return value


def whole(parameter):
    """A parameter's whole value: a DTensor's gathered (a collective over its mesh), else itself."""
    return parameter.full_tensor() if hasattr(parameter, "full_tensor") else parameter


def stage_parameters_broadcast(stage_parameters, sizes, ranks, pp_group):
    """The whole model's flat parameters (float64, named_parameters order): global stage g's broadcast
    over this rank's pp group from the rank holding it, g % ranks (a collective; stages without
    parameters skipped). `stage_parameters`: this rank's, by global stage."""
    pieces = []
    for g, size in enumerate(sizes):
        if size == 0:
            continue
        if g in stage_parameters:
            flat = torch.cat([whole(p).detach().reshape(-1).double() for p in stage_parameters[g]])
        else:
            flat = torch.zeros(size, dtype=torch.float64)
        dist.broadcast(flat, src=dist.get_global_rank(pp_group, g % ranks), group=pp_group)
        pieces.append(flat)
    return torch.cat(pieces)


def run_case(rank, args, index, spec, optimizer_name, model_kind, initial_file):
    schedules, PipelineStage, DistributedDataParallel = pipelining_api()
    from torch.distributed.device_mesh import init_device_mesh

    name, options = worker_problem.parse_strategy(spec)
    if name != "pipeline":
        refuse(f"this reference is PyTorch's pipelining, for --strategy pipeline; got '{name}'")
    stages = take(options, "stages", as_count("stages", 0), 0) or args.world
    microbatches = take(options, "microbatches", as_count("microbatches", 1), 4)
    schedule_name = take(options, "schedule", as_schedule, "1f1b")
    data_parallel = take(options, "data_parallel", as_data_parallel, "ddp")
    chunks = take(options, "virtual_stages", as_count("virtual_stages", 1), 1)
    if options:
        refuse(f"pipeline: options not mapped to PyTorch's pipelining: {sorted(options)}")
    if args.world % stages != 0:
        refuse(f"stages={stages} does not divide the {args.world} ranks (volt refuses it too)")
    if args.batch_size % microbatches != 0:
        refuse(f"a batch of {args.batch_size} does not divide into microbatches={microbatches} (volt refuses it too)")
    if schedule_name == "1f1b" and microbatches < stages:
        refuse(f"PyTorch's Schedule1F1B refuses fewer micro-batches ({microbatches}) than stages ({stages}); "
               "volt's 1f1b runs them, this oracle cannot")
    if (schedule_name == "interleaved_1f1b") != (chunks > 1):
        refuse(f"virtual_stages={chunks} with schedule={schedule_name} (volt refuses it too)")
    if chunks > 1 and microbatches % stages != 0:
        refuse(f"interleaved_1f1b with microbatches={microbatches} not a multiple of stages={stages} "
               "(volt refuses it too)")
    replicas = args.world // stages
    total = stages * chunks  # global stages; rank s holds s, s + S, ... (PyTorch's loop placement)

    model = worker_problem.mlp_of(model_kind)
    names = [n for n, _ in model.named_parameters()]
    worker_problem.load_initial(model, initial_file)
    entries = entries_of(model)
    starts = balanced_stage_starts([sum(p.numel() for p in m.parameters()) for _, m in entries], total) + [
        len(entries)]
    mesh = init_device_mesh("cpu", (stages, replicas), mesh_dim_names=("pp", "dp"))
    my_rank = mesh.get_local_rank("pp")
    if my_rank != rank // replicas or mesh.get_local_rank("dp") != rank % replicas:
        refuse(f"rank {rank} is at pp {my_rank}, dp {mesh.get_local_rank('dp')} of the device mesh, not where "
               "volt's ProcessMesh pp,dp puts it")
    pp_group = mesh["pp"].get_group()
    mine = [v * stages + my_rank for v in range(chunks)]
    # Before any stage is sharded or wrapped: the entries still run as plain modules.
    examples = {g: stage_examples(entries, starts, g, args.batch_size // microbatches) for g in mine}

    sizes = [sum(p.numel() for _, m in entries[starts[g]:starts[g + 1]] for p in m.parameters()) for g in range(total)]
    ordered = [n for g in range(total) for entry_name, m in entries[starts[g]:starts[g + 1]]
               for n in (f"{entry_name}.{p}" for p, _ in m.named_parameters())]
    if ordered != names:
        refuse(f"the stages' parameters {ordered} are not the model's named_parameters order {names}")

    stages_here, stage_parameters = [], {}
    for g in mine:
        # Global stage g: entries [starts[g], starts[g + 1]) of the whole model, the same modules.
        stage_module = torch.nn.Sequential()
        for entry_name, module in entries[starts[g]:starts[g + 1]]:
            stage_module.add_module(entry_name.replace(".", "_"), module)
        if replicas > 1 and not list(stage_module.parameters()):
            refuse("a stage without parameters beside data parallelism is not mapped (DDP refuses such a module)")
        submodule = stage_module
        if replicas > 1 and data_parallel == "fsdp":
            try:
                from torch.distributed.fsdp import fully_shard
            except ImportError:
                refuse(f"PyTorch {torch.__version__} has no torch.distributed.fsdp.fully_shard (FSDP2)")
            fully_shard(stage_module, mesh=mesh["dp"], reshard_after_forward=False)
        elif replicas > 1:
            submodule = DistributedDataParallel(stage_module, process_group=mesh["dp"].get_group())
        stage_parameters[g] = list(stage_module.parameters())  # fully_shard's DTensors where it sharded
        example_input, example_output = examples[g]
        stages_here.append(PipelineStage(submodule, g, total, torch.device("cpu"), input_args=(example_input,),
                                         output_args=(example_output,), group=pp_group))
    loss_fn = lambda output, target: (output - target).square().mean()  # noqa: E731
    if chunks > 1:
        schedule = schedules[schedule_name](stages_here, n_microbatches=microbatches, loss_fn=loss_fn,
                                            scale_grads=True)
    else:
        schedule = schedules[schedule_name](stages_here[0], n_microbatches=microbatches, loss_fn=loss_fn,
                                            scale_grads=True)
    first, last = 0 in mine, total - 1 in mine

    def forward_backward(inputs, targets):
        schedule.step(*((inputs,) if first else ()), **({"target": targets} if last else {}))

    parameters_here = [p for g in mine for p in stage_parameters[g]]
    if parameters_here:
        optimizer_class, optimizer_arguments = worker_problem.optimizer_of(optimizer_name)
        optimizer = optimizer_class(parameters_here, **optimizer_arguments)
    else:
        worker_problem.optimizer_of(optimizer_name)  # refuses an unknown optimizer on every rank
        optimizer = NoParameters()
    worker_problem.train(rank, args, index, None, optimizer, lambda optimizer: None,
                         lambda: stage_parameters_broadcast(stage_parameters, sizes, stages, pp_group),
                         replicas=replicas, replica=rank % replicas, forward_backward=forward_backward)


if __name__ == "__main__":
    worker_problem.main(run_case)
