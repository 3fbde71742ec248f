// Environment parsing for every cluster type, from variable maps.
#include <gtest/gtest.h>

#include "distributed/cluster/cluster_environment_registry.h"
#include "distributed/cluster/environments.h"
#include "distributed/process_launcher.h"
#include "core/error.h"

namespace volt {
namespace {

void expect_topology(const ClusterEnvironment& env, int64_t rank, int64_t world, int64_t local, int64_t local_world,
                     int64_t node, int64_t nodes) {
  const auto& t = env.topology();
  EXPECT_EQ(t.global_rank, rank);
  EXPECT_EQ(t.world_size, world);
  EXPECT_EQ(t.local_rank, local);
  EXPECT_EQ(t.local_world_size, local_world);
  EXPECT_EQ(t.node_rank, node);
  EXPECT_EQ(t.num_nodes, nodes);
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const ConfigurationError& e) {
    return e.what();
  }
  return "";
}

EnvironmentVariables torchrun_variables() {
  return {{"RANK", "3"},        {"WORLD_SIZE", "4"},         {"LOCAL_RANK", "1"},  {"LOCAL_WORLD_SIZE", "2"},
          {"GROUP_RANK", "1"},  {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29400"},
          {"TORCHELASTIC_RESTART_COUNT", "2"}, {"TORCHELASTIC_RUN_ID", "abc"}};
}

TEST(TorchElasticEnvironmentTest, ReadsTorchrunVariables) {
  auto variables = torchrun_variables();
  ASSERT_TRUE(TorchElasticEnvironment::detect(variables));
  TorchElasticEnvironment env(variables, {});
  expect_topology(env, 3, 4, 1, 2, 1, 2);
  EXPECT_EQ(env.master_addr(), "10.0.0.1");
  EXPECT_EQ(env.master_port(), 29400);
  EXPECT_TRUE(env.creates_processes_externally());
  EXPECT_FALSE(env.store_is_external());
  EXPECT_EQ(env.store_prefix(), "");
  EXPECT_EQ(env.restart_count(), 2);
}

TEST(TorchElasticEnvironmentTest, AgentStoreMakesEveryRankAClientWithAnAttemptPrefix) {
  auto variables = torchrun_variables();
  variables["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  TorchElasticEnvironment env(variables, {});
  EXPECT_TRUE(env.store_is_external());
  EXPECT_EQ(env.store_prefix(), "/worker/attempt_2");
  variables["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(TorchElasticEnvironment(variables, {}).store_is_external());
}

TEST(TorchElasticEnvironmentTest, MissingOrContradictedVariablesAreNamed) {
  auto variables = torchrun_variables();
  variables.erase("MASTER_PORT");
  EXPECT_NE(error_of([&] { TorchElasticEnvironment(variables, {}); }).find("MASTER_PORT is not set"),
            std::string::npos);
  variables = torchrun_variables();
  variables["LOCAL_RANK"] = "two";
  EXPECT_NE(error_of([&] { TorchElasticEnvironment(variables, {}); }).find("LOCAL_RANK: expected an integer, got 'two'"),
            std::string::npos);
  ClusterRequest request;
  request.devices = 4;
  EXPECT_NE(error_of([&] { TorchElasticEnvironment(torchrun_variables(), request); })
                .find("--devices 4 contradicts 2 processes per node set by torchrun"),
            std::string::npos);
  request = {};
  request.master_port = 1234;
  EXPECT_NE(error_of([&] { TorchElasticEnvironment(torchrun_variables(), request); })
                .find("--master-port 1234 contradicts MASTER_PORT=29400"),
            std::string::npos);
  request = {};
  request.devices = 2;
  request.num_nodes = 2;  // agreeing flags are fine
  EXPECT_NO_THROW(TorchElasticEnvironment(torchrun_variables(), request));
}

TEST(SLURMEnvironmentTest, HostListsExpand) {
  EXPECT_EQ(expand_slurm_hostlist("node7"), (std::vector<std::string>{"node7"}));
  EXPECT_EQ(expand_slurm_hostlist("host[5-7]"), (std::vector<std::string>{"host5", "host6", "host7"}));
  EXPECT_EQ(expand_slurm_hostlist("node[001-003,7],gpu5"),
            (std::vector<std::string>{"node001", "node002", "node003", "node7", "gpu5"}));
  EXPECT_EQ(expand_slurm_hostlist("r[1-2]n[08-09]"), (std::vector<std::string>{"r1n08", "r1n09", "r2n08", "r2n09"}));
  EXPECT_EQ(expand_slurm_hostlist("a[3] b,c"), (std::vector<std::string>{"a3", "b", "c"}));
  EXPECT_EQ(expand_slurm_hostlist("x-[10-11].cluster"), (std::vector<std::string>{"x-10.cluster", "x-11.cluster"}));
  EXPECT_THROW(expand_slurm_hostlist("node[1-3"), ConfigurationError);
  EXPECT_THROW(expand_slurm_hostlist("node[a-c]"), ConfigurationError);
  EXPECT_THROW(expand_slurm_hostlist("node[5-3]"), ConfigurationError);
}

TEST(SLURMEnvironmentTest, TasksPerNodeExpand) {
  EXPECT_EQ(expand_slurm_tasks_per_node("4"), (std::vector<int64_t>{4}));
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1"), (std::vector<int64_t>{2, 2, 2, 1}));
  EXPECT_THROW(expand_slurm_tasks_per_node("2(x3"), ConfigurationError);
  EXPECT_THROW(expand_slurm_tasks_per_node(""), ConfigurationError);
}

EnvironmentVariables slurm_variables() {
  return {{"SLURM_NTASKS", "8"},     {"SLURM_PROCID", "5"},  {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "2"},     {"SLURM_NNODES", "4"},  {"SLURM_TASKS_PER_NODE", "2(x4)"},
          {"SLURM_NODELIST", "gpu[012-015]"}, {"SLURM_JOB_ID", "1234567"}, {"SLURM_JOB_NAME", "train"}};
}

TEST(SLURMEnvironmentTest, ReadsSrunVariablesWithLightningsPortRule) {
  const auto variables = slurm_variables();
  ASSERT_TRUE(SLURMEnvironment::detect(variables));
  SLURMEnvironment env(variables, {});
  expect_topology(env, 5, 8, 1, 2, 2, 4);
  EXPECT_EQ(env.master_addr(), "gpu012");
  EXPECT_EQ(env.master_port(), 15000 + 4567);
  EXPECT_TRUE(env.creates_processes_externally());
}

TEST(SLURMEnvironmentTest, PortAndAddressFallbacksAndOverrides) {
  auto variables = slurm_variables();
  variables.erase("SLURM_JOB_ID");
  EXPECT_EQ(SLURMEnvironment(variables, {}).master_port(), 12910);
  variables["SLURM_JOB_ID"] = "42";
  EXPECT_EQ(SLURMEnvironment(variables, {}).master_port(), 15042);
  variables["MASTER_PORT"] = "23456";
  variables["MASTER_ADDR"] = "head";
  SLURMEnvironment env(variables, {});
  EXPECT_EQ(env.master_port(), 23456);
  EXPECT_EQ(env.master_addr(), "head");
  variables = slurm_variables();
  variables.erase("SLURM_TASKS_PER_NODE");
  variables["SLURM_NTASKS_PER_NODE"] = "2";
  expect_topology(SLURMEnvironment(variables, {}), 5, 8, 1, 2, 2, 4);
  variables.erase("SLURM_NTASKS_PER_NODE");
  expect_topology(SLURMEnvironment(variables, {}), 5, 8, 1, 2, 2, 4);  // 8 tasks / 4 nodes
}

TEST(SLURMEnvironmentTest, InteractiveJobsAndUnevenNodesAreNotTaken) {
  auto variables = slurm_variables();
  variables["SLURM_JOB_NAME"] = "interactive";
  EXPECT_FALSE(SLURMEnvironment::detect(variables));
  variables["SLURM_JOB_NAME"] = "bash";
  EXPECT_FALSE(SLURMEnvironment::detect(variables));
  variables = slurm_variables();
  variables["SLURM_TASKS_PER_NODE"] = "3,2(x2),1";
  EXPECT_NE(error_of([&] { SLURMEnvironment(variables, {}); }).find("differ between nodes"), std::string::npos);
}

TEST(MPIEnvironmentTest, ReadsOpenMPIVariables) {
  const EnvironmentVariables variables{{"OMPI_COMM_WORLD_RANK", "3"},
                                       {"OMPI_COMM_WORLD_SIZE", "4"},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                       {"MASTER_ADDR", "n0"},
                                       {"MASTER_PORT", "31000"}};
  ASSERT_TRUE(MPIEnvironment::detect(variables));
  MPIEnvironment env(variables, {});
  expect_topology(env, 3, 4, 1, 2, 1, 2);
  EXPECT_EQ(env.master_addr(), "n0");
  EXPECT_EQ(env.master_port(), 31000);
  ClusterRequest request;
  request.master_addr = "n1";
  request.master_port = 32000;
  MPIEnvironment flagged(variables, request);  // flags win over variables for MPI
  EXPECT_EQ(flagged.master_addr(), "n1");
  EXPECT_EQ(flagged.master_port(), 32000);
}

TEST(MPIEnvironmentTest, ReadsPMIVariablesAndDefaultsOnOneNode) {
  const EnvironmentVariables variables{
      {"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}};
  ASSERT_TRUE(MPIEnvironment::detect(variables));
  MPIEnvironment env(variables, {});
  expect_topology(env, 1, 2, 1, 2, 0, 1);
  EXPECT_EQ(env.master_addr(), "127.0.0.1");
  EXPECT_EQ(env.master_port(), 29500);
}

TEST(MPIEnvironmentTest, SeveralNodesNeedAnAddressAndBlockPlacement) {
  EnvironmentVariables variables{{"OMPI_COMM_WORLD_RANK", "2"},
                                 {"OMPI_COMM_WORLD_SIZE", "4"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  EXPECT_NE(error_of([&] { MPIEnvironment(variables, {}); }).find("pass --master-addr"), std::string::npos);
  variables["MASTER_ADDR"] = "n0";
  variables["OMPI_COMM_WORLD_LOCAL_RANK"] = "1";  // rank 2 as local rank 1: round-robin placement
  EXPECT_NE(error_of([&] { MPIEnvironment(variables, {}); }).find("--map-by slot"), std::string::npos);
}

TEST(VoltEnvironmentTest, ParentTakesItsShapeFromTheFlags) {
  ClusterRequest request;
  request.devices = 3;
  VoltEnvironment env({}, request);
  expect_topology(env, 0, 3, 0, 3, 0, 1);
  EXPECT_FALSE(env.creates_processes_externally());
  EXPECT_EQ(env.master_addr(), "127.0.0.1");
  EXPECT_EQ(env.master_port(), 0);  // any free port, bound by rank 0's store and handed to the children

  request.num_nodes = 2;
  request.node_rank = 1;
  EXPECT_NE(error_of([&] { VoltEnvironment({}, request); }).find("pass --master-addr"), std::string::npos);
  request.master_addr = "10.1.1.1";
  VoltEnvironment node1({}, request);
  expect_topology(node1, 3, 6, 0, 3, 1, 2);
  EXPECT_EQ(node1.master_port(), 29500);
  request.node_rank = -1;
  expect_topology(VoltEnvironment({{"NODE_RANK", "1"}}, request), 3, 6, 0, 3, 1, 2);
  request.node_rank = 2;
  EXPECT_NE(error_of([&] { VoltEnvironment({}, request); }).find("--node-rank"), std::string::npos);
}

TEST(VoltEnvironmentTest, ChildReadsWhatTheLauncherSets) {
  LaunchOptions launch;
  launch.local_world_size = 2;
  launch.num_nodes = 2;
  launch.node_rank = 1;
  launch.master_addr = "10.1.1.1";
  launch.master_port = 30001;
  const auto child = child_environment(launch, 1);
  EnvironmentVariables variables(child.begin(), child.end());
  ASSERT_TRUE(VoltEnvironment::is_launched_child(variables));
  ClusterRequest request;
  request.devices = 2;
  request.num_nodes = 2;
  request.node_rank = 1;
  request.master_addr = "10.1.1.1";
  VoltEnvironment env(variables, request);
  expect_topology(env, 3, 4, 1, 2, 1, 2);
  EXPECT_TRUE(env.creates_processes_externally());
  EXPECT_EQ(env.master_port(), 30001);
}

TEST(ClusterDetectionTest, DetectionOrderAndForcing) {
  // torchrun under SLURM: torchrun's variables win (the order).
  auto both = torchrun_variables();
  for (const auto& [key, value] : slurm_variables()) both[key] = value;
  EXPECT_EQ(make_cluster_environment("auto", both, {})->name(), "torchelastic");
  EXPECT_EQ(make_cluster_environment("slurm", both, {})->name(), "slurm");
  auto slurm_and_mpi = slurm_variables();
  slurm_and_mpi["PMI_RANK"] = "5";
  slurm_and_mpi["PMI_SIZE"] = "8";
  EXPECT_EQ(make_cluster_environment("auto", slurm_and_mpi, {})->name(), "slurm");
  slurm_and_mpi.erase("SLURM_NTASKS");
  slurm_and_mpi["MASTER_ADDR"] = "n0";  // MPI over several nodes needs it
  EXPECT_EQ(make_cluster_environment("auto", slurm_and_mpi, {})->name(), "mpi");
  EXPECT_EQ(make_cluster_environment("auto", {}, {})->name(), "volt");
  // A child of volt's launcher started under srun stays volt's.
  LaunchOptions launch;
  launch.local_world_size = 2;
  auto child = slurm_variables();
  for (const auto& [key, value] : child_environment(launch, 1)) child[key] = value;
  EXPECT_EQ(make_cluster_environment("auto", child, {})->name(), "volt");
  // Forcing one whose variables are absent names what is missing.
  EXPECT_NE(error_of([] { make_cluster_environment("torchelastic", {}, {}); }).find("RANK, WORLD_SIZE"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_cluster_environment("slurm", {}, {}); }).find("SLURM_NTASKS"), std::string::npos);
  EXPECT_NE(error_of([] { make_cluster_environment("slrum", {}, {}); }).find("did you mean 'slurm'"),
            std::string::npos);
}


// A user's scheduler: QUEUE_RANK / QUEUE_SIZE, one node, a fixed rendezvous.
class QueueEnvironment : public ClusterEnvironment {
 public:
  static bool detect(const EnvironmentVariables& variables) { return variables.count("QUEUE_RANK") > 0; }
  QueueEnvironment(const EnvironmentVariables& variables, const ClusterRequest&) {
    ProcessTopology t;
    t.world_size = t.local_world_size = std::stoll(variables.at("QUEUE_SIZE"));
    t.global_rank = t.local_rank = std::stoll(variables.at("QUEUE_RANK"));
    set_topology(t);
    set_rendezvous("10.9.8.7", 4242);
  }
  std::string name() const override { return "queue"; }
  bool creates_processes_externally() const override { return true; }
};

TEST(ClusterDetectionTest, AUserRegisteredEnvironmentIsForcedByNameAndDetectedAfterTheBuiltIns) {
  if (!cluster_environment_registry().contains("queue")) {
    register_cluster_environment("queue", "a user's scheduler", QueueEnvironment::detect,
                                 [](const EnvironmentVariables& variables, const ClusterRequest& request) {
                                   return std::make_shared<QueueEnvironment>(variables, request);
                                 });
  }
  const EnvironmentVariables queue{{"QUEUE_RANK", "1"}, {"QUEUE_SIZE", "3"}};
  const auto detected = make_cluster_environment("auto", queue, {});
  EXPECT_EQ(detected->name(), "queue");
  expect_topology(*detected, 1, 3, 1, 3, 0, 1);
  EXPECT_EQ(detected->master_addr(), "10.9.8.7");
  EXPECT_EQ(make_cluster_environment("queue", queue, {})->master_port(), 4242);
  const auto& names = cluster_environment_names();
  EXPECT_EQ(names, (std::vector<std::string>{"auto", "torchelastic", "slurm", "mpi", "volt", "queue"}));
  // The built-ins' order comes first: under SLURM, or as a child of volt's launcher, they win.
  auto under_slurm = slurm_variables();
  under_slurm.insert(queue.begin(), queue.end());
  EXPECT_EQ(make_cluster_environment("auto", under_slurm, {})->name(), "slurm");
  LaunchOptions launch;
  launch.local_world_size = 2;
  auto child = queue;
  for (const auto& [key, value] : child_environment(launch, 1)) child[key] = value;
  EXPECT_EQ(make_cluster_environment("auto", child, {})->name(), "volt");
  EXPECT_EQ(make_cluster_environment("auto", {}, {})->name(), "volt") << "nothing detected: volt's launcher";
  EXPECT_THROW(register_cluster_environment("queue", "again", nullptr, nullptr), ConfigurationError);
}

}  // namespace
}  // namespace volt
