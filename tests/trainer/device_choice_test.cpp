// Issue 21.4: every rank computed on cuda:0. The device is now chosen by one pure function,
// cuda:<local rank> (Lightning's and torchrun's convention), tested here without a GPU; and the
// Trainer of a process that torchrun or volt's launcher started as local rank 1 asks for cuda:1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "distributed/process_launcher.h"
#include "run/device_choice.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

ProcessTopology local_rank_of(int64_t local_rank, int64_t per_node, int64_t node = 0, int64_t nodes = 1) {
  return {.global_rank = node * per_node + local_rank,
          .world_size = per_node * nodes,
          .local_rank = local_rank,
          .local_world_size = per_node,
          .node_rank = node,
          .num_nodes = nodes};
}

TEST(DeviceChoice, EachLocalRankComputesOnTheCudaDeviceOfItsLocalRank) {
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(choose_device("cuda", local_rank_of(r, 4), 4), torch::Device(torch::kCUDA, r)) << "local rank " << r;
  }
  // The local rank, not the global one: global rank 3 is local rank 1 on the second node.
  EXPECT_EQ(choose_device("cuda", local_rank_of(1, 2, 1, 2), 2), torch::Device(torch::kCUDA, 1));
  // More visible devices than processes: the first ones.
  EXPECT_EQ(choose_device("cuda", local_rank_of(1, 2), 8), torch::Device(torch::kCUDA, 1));
}

TEST(DeviceChoice, AutoIsCudaWhenADeviceIsVisibleAndTheCpuOtherwise) {
  EXPECT_EQ(choose_device("auto", local_rank_of(1, 2), 2), torch::Device(torch::kCUDA, 1));
  EXPECT_EQ(choose_device("auto", local_rank_of(1, 2), 0), torch::Device(torch::kCPU));
  EXPECT_EQ(choose_device("cpu", local_rank_of(1, 2), 2), torch::Device(torch::kCPU));
}

TEST(DeviceChoice, MoreProcessesPerNodeThanVisibleDevicesFailOnEveryLocalRank) {
  // Local rank 0 has a device, but its peers 2 and 3 do not: it must fail too, not wait for them.
  for (const int64_t r : {0, 3}) {
    const auto message = error_message_of<ConfigurationError>([&] { choose_device("cuda", local_rank_of(r, 4), 2); });
    EXPECT_NE(message.find("4 processes per node need a CUDA device each"), std::string::npos) << message;
    EXPECT_NE(message.find("this process sees 2"), std::string::npos) << message;
    EXPECT_NE(
        message.find("local rank " + std::to_string(r) + " of 4 on its node) computes on cuda:" + std::to_string(r)),
        std::string::npos)
        << message;
    EXPECT_NE(message.find("--devices 2"), std::string::npos) << "it says what to do: " << message;
  }
  EXPECT_THROW(choose_device("auto", local_rank_of(0, 3), 2), ConfigurationError);
}

TEST(DeviceChoice, CudaWithoutAVisibleDeviceAndUnknownAcceleratorsAreRefused) {
  const auto message = error_message_of<NotSupportedError>([] { choose_device("cuda", local_rank_of(1, 2), 0); });
  EXPECT_NE(message.find("LibTorch sees no CUDA device"), std::string::npos) << message;
  EXPECT_NE(message.find("cuda:1"), std::string::npos) << message;
  EXPECT_NE(message.find("--accelerator cpu"), std::string::npos) << message;
  EXPECT_THROW(choose_device("tpu", local_rank_of(0, 1), 1), ConfigurationError);
}

// Sets variables for the lifetime of the object and restores what was there before.
class EnvironmentOverride {
 public:
  explicit EnvironmentOverride(const std::map<std::string, std::string>& variables) {
    for (const auto& [key, value] : variables) {
      const char* before = std::getenv(key.c_str());
      saved_[key] = before ? std::optional<std::string>(before) : std::nullopt;
      ::setenv(key.c_str(), value.c_str(), 1);
    }
  }
  ~EnvironmentOverride() {
    for (const auto& [key, value] : saved_) {
      if (value) {
        ::setenv(key.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(key.c_str());
      }
    }
  }
  EnvironmentOverride(const EnvironmentOverride&) = delete;
  EnvironmentOverride& operator=(const EnvironmentOverride&) = delete;

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// The Trainer of a process started as local rank 1 of 2 (by torchrun, and by volt's launcher)
// chooses cuda:1: where two devices are visible it is its root_device(); where fewer are (this
// CPU-only machine), its construction fails naming cuda:1. With --accelerator cpu the same process
// computes on the CPU.
TEST(DeviceChoice, TheTrainerOfLocalRankOneAsksForCudaOne) {
  TemporaryDirectory dir;
  LaunchOptions launch;
  launch.local_world_size = 2;
  launch.master_port = 29512;
  const std::map<std::string, std::map<std::string, std::string>> starters{
      {"torchrun",
       {{"RANK", "1"},
        {"WORLD_SIZE", "2"},
        {"LOCAL_RANK", "1"},
        {"LOCAL_WORLD_SIZE", "2"},
        {"GROUP_RANK", "0"},
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", "29512"}}},
      {"volt's launcher", child_environment(launch, 1)}};
  for (const auto& [starter, variables] : starters) {
    EnvironmentOverride environment(variables);
    auto options = quiet_options(dir.path());
    options.devices = 2;
    options.strategy = "ddp";
    options.accelerator = "cuda";
    if (torch::cuda::device_count() >= 2) {
      EXPECT_EQ(Trainer(options).root_device(), torch::Device(torch::kCUDA, 1)) << starter;
    } else {
      const auto message = error_message_of<Error>([&] { Trainer trainer(options); });
      EXPECT_NE(message.find("local rank 1 of 2 on its node) computes on cuda:1"), std::string::npos)
          << starter << ": " << message;
    }
    options.accelerator = "cpu";
    Trainer on_cpu(options);
    EXPECT_EQ(on_cpu.cluster_environment().topology().local_rank, 1) << starter;
    EXPECT_EQ(on_cpu.root_device(), torch::Device(torch::kCPU)) << starter;
  }
}

// A strategy that drives several devices from one process (Placement::devices_per_process):
// local rank r takes the next k devices; the CPU is repeated; too few devices is refused saying
// how many the node needs.
TEST(DeviceChoice, AProcessOfSeveralDevicesTakesTheNextOnesOfItsNode) {
  const auto devices = choose_devices("cuda", local_rank_of(1, 2), 4, 2);
  EXPECT_EQ(devices, (std::vector<torch::Device>{torch::Device(torch::kCUDA, 2), torch::Device(torch::kCUDA, 3)}));
  EXPECT_EQ(choose_devices("cpu", local_rank_of(0, 1), 0, 2), (std::vector<torch::Device>{torch::kCPU, torch::kCPU}));
  const auto message = error_message_of<ConfigurationError>([&] { choose_devices("cuda", local_rank_of(0, 2), 3, 2); });
  EXPECT_NE(message.find("2 processes per node × 2 devices each need 4 CUDA devices"), std::string::npos) << message;
  EXPECT_NE(message.find("--devices 2"), std::string::npos) << "it says what to do: " << message;
}

// With the gloo backend (--process-group-backend gloo, Note [Device tensors on Gloo]) the
// processes of a node may share its devices: local rank r computes on cuda:(r mod visible), so
// that --devices 2 runs on one GPU; NCCL's one rank per device still refuses, naming the way out.
TEST(DeviceChoice, OnGlooTheProcessesOfANodeShareItsDevices) {
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(choose_devices("cuda", local_rank_of(r, 3), 1, 1, /*share_devices=*/true).front(),
              torch::Device(torch::kCUDA, 0))
        << "local rank " << r;
    EXPECT_EQ(choose_devices("cuda", local_rank_of(r, 3), 2, 1, true).front(), torch::Device(torch::kCUDA, r % 2));
  }
  // Enough devices: one each, as without sharing.
  EXPECT_EQ(choose_devices("cuda", local_rank_of(1, 2), 4, 1, true).front(), torch::Device(torch::kCUDA, 1));
  const auto message = error_message_of<ConfigurationError>([&] { choose_device("cuda", local_rank_of(1, 2), 1); });
  EXPECT_NE(message.find("--process-group-backend gloo"), std::string::npos) << message;
  // No device at all is no device, shared or not.
  EXPECT_THROW(choose_devices("cuda", local_rank_of(0, 2), 0, 1, true), NotSupportedError);
}

// --process-group-backend nccl where nothing computes on CUDA: refused at construction, saying
// what to use instead.
TEST(DeviceChoice, NcclWithoutACudaDeviceIsRefused) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.process_group_backend = "nccl";
  options.accelerator = "cpu";
  auto message = error_message_of<ConfigurationError>([&] { Trainer trainer(options); });
  EXPECT_NE(message.find("--process-group-backend nccl"), std::string::npos) << message;
  EXPECT_NE(message.find("--accelerator cuda"), std::string::npos) << message;
  if (torch::cuda::device_count() == 0) {
    options.accelerator = "auto";
    message = error_message_of<NotSupportedError>([&] { Trainer trainer(options); });
    EXPECT_NE(message.find("computes on cpu"), std::string::npos) << message;
    EXPECT_NE(message.find("--process-group-backend gloo"), std::string::npos) << message;
  }
  options.process_group_backend = "mpi";
  EXPECT_THROW(Trainer trainer(options), ConfigurationError);
}

}  // namespace
}  // namespace volt::testing
