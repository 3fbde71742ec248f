#pragma once
// RunOptions's keys, declared once for the two schemas that hold them: RunOptions's own (what a
// Fabric's options are checked against) and TrainerOptions's, which adds the loops' keys and is
// what the command line, `--config`, `--print-config` and `--help` read (Note [Flags from the
// schema] in trainer/command_line.cpp). Names are Lightning's in dash form.
//
// Checks that span keys (node_rank below num_nodes) and those that consult a registry with its own
// suggestions (precision, cluster environment) are RunOptions::check_combinations().
#include <charconv>
#include <cstdint>
#include <string>

#include "core/duration.h"
#include "core/option_schema.h"
#include "distributed/cluster/cluster_environment.h"
#include "precision/precision.h"
#include "run/run_options.h"

namespace volt {

// A seed: any unsigned 64-bit integer, read exactly (not through a double).
inline TextForm<uint64_t> seed_form() {
  auto parse = [](const std::string& text) {
    uint64_t value = 0;
    const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
    check<ConfigurationError>(!text.empty() && result.ec == std::errc() && result.ptr == text.data() + text.size(),
                              "expected an integer in [0, 2^64), got '", text, "'");
    return value;
  };
  return {"an integer >= 0", parse, [](const uint64_t& seed) { return std::to_string(seed); }};
}

template <typename Options>
OptionSchema<Options>& declare_run_flags(OptionSchema<Options>& schema) {
  const auto automatic = [](const int64_t& n) { return n >= 0; };
  return schema
      .option("strategy", &RunOptions::strategy, "NAME[:key=value,...] (see --list-strategies)")
      .option("devices", &RunOptions::devices, "processes per node", at_least<int64_t>(1))
      .option("precision", &RunOptions::precision, "one of: " + join(precision_names()))
      .option("accelerator", &RunOptions::accelerator, "cpu | cuda | auto (cuda when LibTorch sees a GPU)",
              one_of({"cpu", "cuda", "auto"}))
      .option("num-nodes", &RunOptions::num_nodes, "number of nodes", at_least<int64_t>(1))
      .option("cluster-environment", &RunOptions::cluster_environment,
              "who started the processes: " + join(cluster_environment_names()) + " (auto: detected)")
      .option("node-rank", &RunOptions::node_rank, "this machine's node with volt's launcher (-1: NODE_RANK or 0)",
              satisfies([](const int64_t& rank) { return rank >= -1; }, "a value >= 0 (or -1: NODE_RANK or 0)"))
      .option("master-addr", &RunOptions::master_addr,
              "rendezvous host (default: MASTER_ADDR, else 127.0.0.1 on one node)")
      .option("master-port", &RunOptions::master_port,
              "rendezvous port (0: MASTER_PORT, else a free port on one node, 29500 on several)",
              satisfies([](const int64_t& port) { return port >= 0 && port <= 65535; },
                        "a port in [1, 65535] (or 0: MASTER_PORT / automatic)"))
      .option("timeout", &RunOptions::timeout, seconds_form(), "seconds any collective may take before the run fails",
              satisfies([](const std::chrono::milliseconds& t) { return t.count() > 0; }, "a value > 0"))
      .option("shared-memory-collectives", &RunOptions::shared_memory_collectives,
              "CPU collectives among the ranks of one host through shared memory, not Gloo's sockets "
              "(VOLT_SHM=0 turns it off too)")
      .option("process-group-backend", &RunOptions::process_group_backend,
              "auto (nccl on CUDA, gloo on the CPU) | gloo (on CUDA too: tensors staged through the host, and "
              "processes may share a GPU) | nccl (CUDA only)",
              one_of({"auto", "gloo", "nccl"}))
      .option("hang-check", &RunOptions::hang_check, seconds_form(),
              "seconds a collective may wait before the ranks compare where they are, reporting collectives "
              "out of step (0: off; default 5, or half of --timeout where shorter)",
              satisfies([](const std::chrono::milliseconds& t) { return t.count() >= 0; }, "a value >= 0"))
      .option("hang-check-action", &RunOptions::hang_check_action,
              "what a hang found by --hang-check does: fail (end the run with the report) | warn (report, wait on)",
              one_of({"fail", "warn"}))
      .option("seed", &RunOptions::seed, seed_form(), "seed for torch and the samplers (default: unseeded)")
      .option("deterministic", &RunOptions::deterministic, "use deterministic algorithms only")
      .implicit_value("true")
      .option("cuda-graph", &RunOptions::cuda_graph,
              "capture the training step in CUDA graphs and replay it (CUDA; single_device; volt::FusedAdamW)")
      .implicit_value("true")
      .option("malloc-tuning", &RunOptions::malloc_tuning,
              "keep freed memory in the heap (glibc) instead of re-faulting it every step")
      .option("threads", &RunOptions::threads,
              "LibTorch intra-op threads per process (0: OMP_NUM_THREADS, else cores / processes per node)",
              satisfies(automatic, "a value >= 1 (or 0: automatic)"))
      .option("blas-threads", &RunOptions::blas_threads,
              "OpenBLAS threads per process (0: OPENBLAS_NUM_THREADS, else 1: LibTorch's pool runs around BLAS)",
              satisfies(automatic, "a value >= 1 (or 0: automatic)"));
}

}  // namespace volt
