# The Python side of bench/data_loader: PyTorch's torch.utils.data.DataLoader reading an ImageFolder
# tree of JPEG files (ROOT/<class>/*.jpg) with the ImageNet training augmentation, for the C++
# program to compare with volt's thread-based data loader on the same folder. Runs under PyTorch
# 2.11 and torchvision 0.26 from the project-local prefixes (tools/setup_vision.sh):
#
#   PYTHONPATH=.deps/pytorch2:.deps/vision /usr/bin/python3 bench/data_loader_worker.py \
#       --root DIR --decoder {pil,torchvision} --workers N --batches K [--warmup W] [--batch-size B]
#       [--crop C] [--seed S] [--prefetch-factor P]
#
# The decoders (both decode with libjpeg-turbo, each with its own bundled copy):
#   pil          the classic recipe: torchvision.datasets.ImageFolder with PIL's default loader and
#                T.RandomResizedCrop(C), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(ImageNet)
#   torchvision  the same ImageFolder, but each file is read with torchvision.io.read_file and decoded
#                with torchvision.io.decode_jpeg (to RGB), then transforms.v2 on uint8 tensors:
#                RandomResizedCrop(C, antialias=True), RandomHorizontalFlip(), ToDtype(float32,
#                scale=True), Normalize(ImageNet)
# Either way a batch is float32 [B, 3, C, C] images and int64 [B] labels, from DataLoader(shuffle=True,
# num_workers=N, drop_last=True, persistent_workers=N > 0, prefetch_factor=P if N > 0, pin_memory=False,
# generator seeded with S). W batches are drawn untimed (the workers start, the files enter the page
# cache), then K batches are timed with time.perf_counter(), from after the W-th batch to the arrival of
# the last; an epoch that runs out is followed by the next (the same persistent workers), and the
# count goes on. Each batch is only touched (its images' data_ptr and shape read) in this process.
# With N > 0, up to N*P batches are already made or being made when the timing starts (the prefetch
# the workers keep going through the warm-up), so K should be well above N*P for a steady-state rate.
#
# Prints exactly one line to stdout, a JSON object:
#
#   {"decoder", "workers", "batch_size", "batches", "seconds", "samples_per_second", "main_max_rss_kib",
#    "torch", "torchvision", "pillow", "libjpeg_turbo", "warmup", "crop", "prefetch_factor",
#    "main_threads", "workers_max_rss_kib", "children_max_rss_kib"}
#
# main_max_rss_kib is getrusage(RUSAGE_SELF).ru_maxrss of this process (KiB, imports included).
# workers_max_rss_kib is the sum over the N workers of their peak RSS, VmHWM of /proc/<pid>/status read
# after the timed batches while the workers are still running (null for N = 0, or when a worker's file
# could not be read): every worker's own peak, counted whole, so the pages it shares with this process
# (fork's copy-on-write: the interpreter, torch's libraries) are counted once per worker: an upper
# bound of their memory, not a measure of what they add. children_max_rss_kib is
# getrusage(RUSAGE_CHILDREN).ru_maxrss after the workers have been shut down and reaped: the Linux
# kernel gives the peak RSS of the LARGEST waited-for child there, not a sum (getrusage(2)), so it is a
# cross-check of the largest worker's VmHWM (0 for N = 0). libjpeg_turbo is the version Pillow reports
# (PIL.features.version("libjpeg_turbo")); torchvision reports none for its own copy. Errors go to
# stderr, exit status 1; bad arguments exit 2.
import argparse
import gc
import json
import random
import resource
import sys
import time

import torch

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def parse_args():
    parser = argparse.ArgumentParser(description="The Python side of bench/data_loader.")
    parser.add_argument("--root", required=True, help="an ImageFolder tree: ROOT/<class>/*.jpg")
    parser.add_argument("--decoder", required=True, choices=("pil", "torchvision"))
    parser.add_argument("--workers", required=True, type=int, help="DataLoader num_workers (0: in this process)")
    parser.add_argument("--batches", required=True, type=int, help="timed batches K (>= 1)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed batches W before them (>= 0)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--crop", type=int, default=224, help="RandomResizedCrop's output size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefetch-factor", type=int, default=2, help="batches in flight per worker (N > 0)")
    args = parser.parse_args()
    if args.workers < 0 or args.batches < 1 or args.warmup < 0:
        parser.error("--workers and --warmup must be >= 0, --batches >= 1")
    if args.batch_size < 1 or args.crop < 1 or args.prefetch_factor < 1:
        parser.error("--batch-size, --crop and --prefetch-factor must be >= 1")
    return args


def read_and_decode_jpeg(path):
    """The torchvision decoder's ImageFolder loader: the file's bytes, decoded by libjpeg-turbo in
    torchvision.io (to 3 channels, as PIL's loader converts to RGB): a uint8 [3, H, W] tensor."""
    from torchvision.io import ImageReadMode, decode_jpeg, read_file
    return decode_jpeg(read_file(path), mode=ImageReadMode.RGB)


def make_dataset(args):
    from torchvision import datasets
    if args.decoder == "pil":
        import torchvision.transforms as T
        transform = T.Compose([T.RandomResizedCrop(args.crop), T.RandomHorizontalFlip(), T.ToTensor(),
                               T.Normalize(mean=MEAN, std=STD)])
        return datasets.ImageFolder(args.root, transform=transform)
    from torchvision.transforms import v2
    transform = v2.Compose([v2.RandomResizedCrop(args.crop, antialias=True), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean=MEAN, std=STD)])
    return datasets.ImageFolder(args.root, transform=transform, loader=read_and_decode_jpeg)


def peak_rss_kib(pid):
    """VmHWM (the peak resident set size, KiB) of a running process, or None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def main():
    args = parse_args()
    # The main process keeps PyTorch's default intra-op threads (no torch.set_num_threads), as a
    # PyTorch user's training script does; each worker process is set to 1 thread by PyTorch itself.
    torch.manual_seed(args.seed)  # the transforms' randomness when N = 0 (workers seed from the generator)
    random.seed(args.seed)
    dataset = make_dataset(args)
    if len(dataset) < args.batch_size:
        raise RuntimeError(f"{args.root} has {len(dataset)} images, fewer than one batch of {args.batch_size}")
    workers = args.workers
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=workers, drop_last=True,
        persistent_workers=workers > 0, prefetch_factor=args.prefetch_factor if workers > 0 else None,
        pin_memory=False, generator=torch.Generator().manual_seed(args.seed))
    expected = (args.batch_size, 3, args.crop, args.crop)
    batches = iter(loader)

    def next_batch():
        nonlocal batches
        try:
            images, labels = next(batches)
        except StopIteration:  # the epoch ran out: the next one, with the same (persistent) workers
            batches = iter(loader)
            images, labels = next(batches)
        # The touch that makes the batch real in this process, and nothing more.
        if images.data_ptr() == 0 or tuple(images.shape) != expected or images.dtype != torch.float32:
            raise RuntimeError(f"batch of {images.dtype} {tuple(images.shape)}, expected float32 {expected}")
        return labels

    for _ in range(args.warmup):
        next_batch()
    start = time.perf_counter()
    for _ in range(args.batches):
        next_batch()
    seconds = time.perf_counter() - start

    # Worker peaks while they run (loader._iterator is the persistent iterator; _workers is private
    # API, the multiprocessing.Process of each worker), then shut them down so that they are reaped.
    workers_max_rss = None
    if workers > 0:
        peaks = [peak_rss_kib(w.pid) for w in getattr(loader._iterator, "_workers", [])]
        if len(peaks) == workers and None not in peaks:
            workers_max_rss = sum(peaks)
        del batches
        loader._iterator = None
        gc.collect()  # the iterator's __del__ shuts the workers down and joins them

    import PIL
    import PIL.features
    import torchvision
    result = {
        "decoder": args.decoder,
        "workers": workers,
        "batch_size": args.batch_size,
        "batches": args.batches,
        "seconds": seconds,
        "samples_per_second": args.batches * args.batch_size / seconds,
        "main_max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": PIL.__version__,
        "libjpeg_turbo": PIL.features.version("libjpeg_turbo"),
        "warmup": args.warmup,
        "crop": args.crop,
        "prefetch_factor": args.prefetch_factor if workers > 0 else None,
        "main_threads": torch.get_num_threads(),
        "workers_max_rss_kib": workers_max_rss,
        "children_max_rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as error:  # noqa: BLE001 - the C++ side reads the message from stderr
        print(f"data_loader_worker: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
