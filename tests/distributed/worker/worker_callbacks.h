#pragma once
// The distributed worker's callbacks and checkpoint IO (tests/distributed/worker/distributed_worker.cpp),
// each behind a flag of its train mode: a rank killed or failing on purpose, a stray decision, a
// checkpoint at a chosen point, the parameters printed after every step.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "callbacks/callback.h"
#include "checkpoint/checkpoint_io.h"
#include "core/collective_site.h"
#include "core/error.h"
#include "distributed/cluster/cluster_environment.h"
#include "strategies/parallel_strategy.h"
#include "tests/support/regression_problem.h"
#include "trainer/trainer.h"

namespace volt::worker {

// --kill-rank R --kill-batch B: rank R kills itself (SIGKILL, nothing cleaned up) as training
// batch B of the first epoch starts, while the other ranks are inside that step's collectives
// (or a pipeline's sends and receives) with it.
class KillAtBatch : public Callback {
 public:
  KillAtBatch(int64_t rank, int64_t batch) : rank_(rank), batch_(batch) {}
  void on_train_batch_start(Trainer& trainer, Module&, const Batch&, int64_t batch_idx) override {
    if (trainer.strategy().topology().global_rank == rank_ && trainer.current_epoch() == 0 && batch_idx == batch_) {
      std::cout << "KILLING rank=" << rank_ << "\n" << std::flush;
      ::kill(::getpid(), SIGKILL);
    }
  }

 private:
  int64_t rank_, batch_;
};

// --kill-at-steps S0,S1,...: on its attempt a (torchrun's restart count), rank `rank` SIGKILLs its
// process at the start of the first training batch once the run has committed S_a optimizer steps
// (a replica that healed may start past it: it dies at once); from attempt len(S) on it lives.
class KillAtSteps : public Callback {
 public:
  KillAtSteps(int64_t rank, std::vector<int64_t> steps) : rank_(rank), steps_(std::move(steps)) {}
  void on_train_batch_start(Trainer& trainer, Module&, const Batch&, int64_t) override {
    const auto attempt = static_cast<size_t>(trainer.cluster_environment().restart_count());
    if (trainer.strategy().topology().global_rank != rank_ || attempt >= steps_.size()) return;
    if (trainer.global_step() < steps_[attempt]) return;
    std::cout << "KILLING rank=" << rank_ << " attempt=" << attempt << " step=" << trainer.global_step() << "\n"
              << std::flush;
    ::kill(::getpid(), SIGKILL);
  }

 private:
  int64_t rank_;
  std::vector<int64_t> steps_;
};

// One rank takes a decision the others do not take (Note [Which decision]).
class StrayDecision : public Callback {
 public:
  explicit StrayDecision(int64_t rank) : rank_(rank) {}
  void on_train_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch&, int64_t batch_idx) override {
    if (trainer.strategy().topology().global_rank == rank_ && batch_idx == 0 && trainer.current_epoch() == 0) {
      trainer.collectives().broadcast_decision(true);
    }
  }

 private:
  int64_t rank_;
};

// A hang injected after training batch 1 of epoch 0 (Note [Diagnosing a hang]):
//   save_on_rank0  rank 0 alone saves a checkpoint, whose collectives no other rank joins;
//   skip           every rank but the last enters a barrier that the last one skips;
//   sizes          every rank all-reduces a tensor of a size of its own (1 MiB and more: past the
//                  inline path, through the process group).
// `slow_rank` >= 0 instead sleeps `slow_ms` on that rank at every batch: peers then wait for it in
// their collectives, which is no hang.
class InjectHang : public Callback {
 public:
  InjectHang(std::string how, std::string path, int64_t slow_rank, int64_t slow_ms)
      : how_(std::move(how)), path_(std::move(path)), slow_rank_(slow_rank), slow_ms_(slow_ms) {}
  void on_train_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch&, int64_t batch_idx) override {
    const auto topology = trainer.strategy().topology();
    if (topology.global_rank == slow_rank_) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms_));
    if (trainer.current_epoch() != 0 || batch_idx != 1) return;
    std::cerr << "INJECTED rank=" << topology.global_rank << " how=" << how_ << std::endl;
    if (how_ == "save_on_rank0" && topology.global_rank == 0) trainer.save_checkpoint(path_);
    if (how_ == "skip" && topology.global_rank != topology.world_size - 1) {
      const CollectiveSite site("a barrier of the worker's callback");
      trainer.collectives().barrier("injected");
    }
    if (how_ == "sizes") {
      const CollectiveSite site("an all_reduce of the worker's callback");
      trainer.collectives().all_reduce(torch::ones({(int64_t{1} << 18) + 1024 * topology.global_rank}), ReduceOp::Sum);
    }
  }

 private:
  std::string how_, path_;
  int64_t slow_rank_, slow_ms_;
};

// Saves <checkpoint_dir>/last.ckpt at every epoch end, or one checkpoint after a given training
// batch of epoch 0; and makes one rank fail once.
class CheckpointAndCrash : public Callback {
 public:
  CheckpointAndCrash(bool save, bool in_background, int64_t crash_rank, int64_t crash_epoch,
                     std::string save_after_batch_path = "", int64_t save_after_batch = -1)
      : save_(save),
        in_background_(in_background),
        crash_rank_(crash_rank),
        crash_epoch_(crash_epoch),
        save_after_batch_path_(std::move(save_after_batch_path)),
        save_after_batch_(save_after_batch) {}
  void on_train_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch&, int64_t batch_idx) override {
    if (save_after_batch_ >= 0 && trainer.current_epoch() == 0 && batch_idx == save_after_batch_) {
      trainer.save_checkpoint(save_after_batch_path_);
    }
  }
  void on_train_epoch_start(Trainer& trainer, Module&) override {
    const auto restarts = current_environment()["TORCHELASTIC_RESTART_COUNT"];
    if (trainer.strategy().topology().global_rank == crash_rank_ && trainer.current_epoch() == crash_epoch_ &&
        (restarts.empty() || restarts == "0")) {
      throw Error("worker: deliberate crash at the start of epoch " + std::to_string(crash_epoch_));
    }
  }
  void on_train_epoch_end(Trainer& trainer, Module&) override {
    if (save_) trainer.save_checkpoint(trainer.checkpoint_dir() / "last.ckpt", false, in_background_);
  }

 private:
  bool save_, in_background_;
  int64_t crash_rank_, crash_epoch_;
  std::string save_after_batch_path_;
  int64_t save_after_batch_;
};

// --print-steps: "STEP rank=.. step=.. params=.." after every optimizer step, for tests that compare
// strategies step by step; under a ParallelStrategy "TRANSPORT rank=.. all_reduce=.. ring_thread=0|1"
// before the first.
class StepPrinter : public Callback {
 public:
  void on_train_batch_end(Trainer& trainer, Module& module, const torch::Tensor&, const Batch&, int64_t) override {
    if (trainer.global_step() == last_step_) return;
    last_step_ = trainer.global_step();
    const auto params = testing::full_parameters(trainer.strategy(), module);
    std::ostringstream line;
    const auto* parallel = dynamic_cast<const ParallelStrategy*>(&trainer.strategy());
    if (last_step_ == 1 &&
        parallel != nullptr) {  // how the world group reduces (Note [Collectives through shared memory])
      line << "TRANSPORT rank=" << trainer.strategy().topology().global_rank << " all_reduce="
           << (parallel->communicator().reduces_through_shared_memory() ? "shared_memory" : "process_group")
           << " ring_thread=" << (parallel->communicator().runs_on_a_ring_thread() ? 1 : 0) << "\n";
    }
    line << std::setprecision(17) << "STEP rank=" << trainer.strategy().topology().global_rank << " step=" << last_step_
         << " params=";
    for (int64_t i = 0; i < params.numel(); ++i) line << (i ? "," : "") << params[i].item<double>();
    line << "\n";
    std::cout << line.str() << std::flush;
  }

 private:
  int64_t last_step_ = 0;
};

// --fail-write-rank R: a CheckpointIO whose writes fail on global rank R (a full disk there).
class FailingOnOneRankIO : public CheckpointIO {
 public:
  explicit FailingOnOneRankIO(int64_t failing_rank) : failing_rank_(failing_rank) {}
  void save(const StateDict& checkpoint, const std::filesystem::path& path) override {
    // Rank 0 is the process the launcher runs in, without RANK; the ranks it starts have it.
    const auto rank = current_environment()["RANK"];
    if ((rank.empty() ? 0 : std::stoll(rank)) == failing_rank_) {
      throw CheckpointError("worker: no space left on rank " + std::to_string(failing_rank_) + "'s disk");
    }
    CheckpointIO::save(checkpoint, path);
  }

 private:
  int64_t failing_rank_;
};

}  // namespace volt::worker
