// Note [Fault-tolerant replicas]: the quorum's rules, and the lighthouse with replicas as threads
// (each a ReplicaLink, Gloo on 127.0.0.1): quorums, the cross-replica average, a replica that dies
// (the others' average fails at once and the next quorum goes on without it), one that comes back
// and heals, and what the lighthouse refuses. The runs of whole replicas under torchrun are in
// fault_tolerant_replicas_test.cpp.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "core/error.h"
#include "distributed/fault_tolerance/lighthouse.h"
#include "distributed/fault_tolerance/quorum.h"
#include "distributed/fault_tolerance/replica_link.h"
#include "distributed/network.h"
#include "run/fault_tolerance/fault_tolerance_options.h"
#include "tests/support/test_support.h"
#include "trainer/trainer_options.h"

namespace volt::testing {
namespace {

using std::chrono::milliseconds;

Quorum quorum_of(std::vector<QuorumMember> members) {
  Quorum quorum;
  quorum.id = 7;
  quorum.generation = 3;
  quorum.members = std::move(members);
  return quorum;
}

TEST(QuorumRules, MembersBehindHealFromThoseAheadDealtInTurn) {
  // Replicas 0 and 2 at step 12, 1 restarted (fresh, step 0), 3 one step behind.
  const auto quorum = quorum_of({{0, 12, false}, {1, 0, true}, {2, 12, false}, {3, 11, false}});
  EXPECT_EQ(quorum.max_step(), 12);
  EXPECT_EQ(quorum.sources(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(quorum.source_of(0), -1);
  EXPECT_EQ(quorum.source_of(1), 0);
  EXPECT_EQ(quorum.source_of(3), 2) << "the second healer goes to the second source";
  EXPECT_EQ(quorum.healers_of(0), (std::vector<int64_t>{1}));
  EXPECT_EQ(quorum.healers_of(2), (std::vector<int64_t>{3}));
  EXPECT_TRUE(quorum.healers_of(1).empty());
  // A fresh member at the top step is no source while another member has trained: it may have
  // started from another checkpoint or other weights.
  const auto restarted = quorum_of({{0, 5, false}, {1, 5, true}});
  EXPECT_EQ(restarted.source_of(1), 0);
  // The run's first quorum: every member fresh, the lowest replica is the source of all.
  const auto first = quorum_of({{1, 0, true}, {2, 0, true}, {3, 0, true}});
  EXPECT_EQ(first.sources(), (std::vector<int64_t>{1}));
  EXPECT_EQ(first.healers_of(1), (std::vector<int64_t>{2, 3}));
}

TEST(QuorumRules, AStepDealsTheNextReplicaBatchesInMemberOrderUpToTheEpochsEnd) {
  const auto quorum = quorum_of({{0, 4, false}, {2, 4, false}, {3, 4, false}});
  auto batches = batches_of_step(quorum, 2, 10, 16);
  EXPECT_EQ(batches.mine, 11);
  EXPECT_EQ(batches.trained, 3);
  // Two batches left for three members: the last one trains none, and the mean is over two.
  batches = batches_of_step(quorum, 3, 14, 16);
  EXPECT_EQ(batches.mine, -1);
  EXPECT_EQ(batches.trained, 2);
  EXPECT_EQ(batches_of_step(quorum, 0, 14, 16).mine, 14);
  EXPECT_EQ(batches_of_step(quorum, 1, 0, 16).mine, -1) << "not a member";
}

TEST(QuorumRules, TheTextReadsBackAndGarbageIsRefused) {
  const auto quorum = quorum_of({{0, 12, false}, {1, 0, true}});
  const auto back = Quorum::decode(quorum.encode(), "test");
  EXPECT_EQ(back.encode(), quorum.encode());
  EXPECT_EQ(back.members[1].fresh, true);
  EXPECT_THROW(Quorum::decode("quorum 1 2 3 0 0", "test"), DistributedError);
  EXPECT_THROW(Quorum::decode("hello", "test"), DistributedError);
}

ReplicaLinkOptions link_options(int64_t port, int64_t replica, const std::string& fingerprint = "model") {
  return {.lighthouse_port = port,
          .replicas = 3,
          .replica = replica,
          .timeout = milliseconds(5000),
          .quorum_timeout = milliseconds(20000),
          .heartbeat_interval = milliseconds(50),
          .fingerprint = fingerprint};
}

// Each link's request at `step`, at once (a quorum waits for every live replica).
std::vector<Quorum> request_all(const std::vector<ReplicaLink*>& links, int64_t step, bool failed) {
  std::vector<std::future<Quorum>> asked;
  for (auto* link : links) {
    asked.push_back(std::async(std::launch::async, [=] { return link->request_quorum(step, failed); }));
  }
  std::vector<Quorum> out;
  for (auto& answer : asked) out.push_back(answer.get());
  return out;
}

// Each link connects to `quorum` and sums `values[i]` over it; the sums, or NaN where it failed.
std::vector<double> sum_all(const std::vector<ReplicaLink*>& links, const Quorum& quorum,
                            const std::vector<double>& values) {
  std::vector<std::future<double>> sums;
  for (size_t i = 0; i < links.size(); ++i) {
    sums.push_back(std::async(std::launch::async, [&, i] {
      auto tensor = torch::full({4}, values[i], torch::kDouble);
      if (!links[i]->connect(quorum) || !links[i]->all_reduce_sum(tensor)) return std::nan("");
      return tensor[0].item<double>();
    }));
  }
  std::vector<double> out;
  for (auto& sum : sums) out.push_back(sum.get());
  return out;
}

TEST(Lighthouse, QuorumsGoOnWithoutADeadReplicaAndTakeItBackFresh) {
  Lighthouse lighthouse(
      {.port = 0, .replicas = 3, .join_timeout = milliseconds(10000), .heartbeat_timeout = milliseconds(600)});
  auto a = std::make_unique<ReplicaLink>(link_options(lighthouse.port(), 0));
  auto b = std::make_unique<ReplicaLink>(link_options(lighthouse.port(), 1));
  auto c = std::make_unique<ReplicaLink>(link_options(lighthouse.port(), 2));

  // A replica counts as alive from its first request on, so the first to ask may form a quorum
  // before the others have asked; once all three have, each quorum waits for all of them.
  request_all({a.get(), b.get(), c.get()}, 0, false);
  auto quorums = request_all({a.get(), b.get(), c.get()}, 0, false);
  ASSERT_EQ(quorums[0].encode(), quorums[2].encode()) << "every member reads the same quorum";
  ASSERT_EQ(quorums[0].members.size(), 3u);
  EXPECT_FALSE(quorums[0].members[1].fresh);
  EXPECT_EQ(sum_all({a.get(), b.get(), c.get()}, quorums[0], {1, 2, 4}), (std::vector<double>{7, 7, 7}));

  // The same members again, nobody failed: the same generation, the groups are kept.
  auto again = request_all({a.get(), b.get(), c.get()}, 1, false);
  EXPECT_EQ(again[0].generation, quorums[0].generation);
  EXPECT_EQ(again[0].id, quorums[0].id + 1);

  // Replica 2 dies (its heartbeat stops, its group closes): the others' next average fails at
  // once, not at the 5 s timeout, and their next quorum forms without it.
  EXPECT_EQ(sum_all({a.get(), b.get(), c.get()}, again[0], {1, 2, 4})[0], 7.0);
  c.reset();
  const auto started = std::chrono::steady_clock::now();
  const auto failed = sum_all({a.get(), b.get()}, again[0], {1, 2});
  EXPECT_TRUE(std::isnan(failed[0]) && std::isnan(failed[1]));
  EXPECT_LT(std::chrono::steady_clock::now() - started, milliseconds(4000));
  EXPECT_NE(a->last_error().find("averaging gradients over quorum"), std::string::npos) << a->last_error();
  auto without = request_all({a.get(), b.get()}, 2, true);
  ASSERT_EQ(without[0].members.size(), 2u);
  EXPECT_GT(without[0].generation, again[0].generation);
  EXPECT_EQ(sum_all({a.get(), b.get()}, without[0], {1, 2}), (std::vector<double>{3, 3}));

  // Replica 2 restarted: fresh at step 0, it heals from replica 0, whose state reaches it whole.
  // It asks first, and the lighthouse waits for the live replicas 0 and 1 to ask too.
  c = std::make_unique<ReplicaLink>(link_options(lighthouse.port(), 2));
  std::vector<std::future<Quorum>> asked;
  auto c_asked = std::async(std::launch::async, [&] { return c->request_quorum(0, false); });
  while (lighthouse.status().find("replicas 2 ask to join; waiting for live replicas 0, 1") == std::string::npos) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  asked.push_back(std::async(std::launch::async, [&] { return a->request_quorum(3, false); }));
  asked.push_back(std::async(std::launch::async, [&] { return b->request_quorum(3, false); }));
  asked.push_back(std::move(c_asked));
  std::vector<Quorum> back;
  for (auto& answer : asked) back.push_back(answer.get());
  ASSERT_EQ(back[2].members.size(), 3u);
  EXPECT_TRUE(back[2].members[2].fresh);
  EXPECT_EQ(back[2].source_of(2), 0);
  const std::string state(100000, 'x');
  auto sent = std::async(std::launch::async, [&] { return a->connect(back[0]) && a->send(state + "!", 2); });
  auto connected_b = std::async(std::launch::async, [&] { return b->connect(back[1]); });
  ASSERT_TRUE(c->connect(back[2]));
  const auto received = c->receive(0);
  EXPECT_TRUE(sent.get());
  EXPECT_TRUE(connected_b.get());
  ASSERT_TRUE(received.has_value()) << c->last_error();
  EXPECT_EQ(*received, state + "!");
  EXPECT_GE(lighthouse.quorums(), 4);
}

TEST(Lighthouse, RefusesAnotherModelAndSaysWhatItWaitsFor) {
  Lighthouse lighthouse({.port = 0, .replicas = 3, .min_replicas = 3, .heartbeat_timeout = milliseconds(600)});
  ReplicaLink first(link_options(lighthouse.port(), 0, "mlp-1-abc"));
  ReplicaLink other(link_options(lighthouse.port(), 1, "mlp-2-def"));
  auto waiting = std::async(std::launch::async, [&] { return first.request_quorum(0, false); });
  while (lighthouse.status().find("replicas 0 ask to join") == std::string::npos) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  // Replica 1 was built otherwise (another replica size here): refused, naming both fingerprints.
  const auto refused = configuration_error_of([&] { other.request_quorum(0, false); });
  EXPECT_NE(refused.find("replica 1 joins with a model or replica size (fingerprint mlp-2-def) other than "
                         "replica 0's (mlp-1-abc)"),
            std::string::npos)
      << refused;
  // Replicas 0 and 2 cannot make a quorum of min_replicas=3 (the refused one does not count):
  // replica 2 fails at its quorum_timeout, quoting the lighthouse.
  auto alone_options = link_options(lighthouse.port(), 2, "mlp-1-abc");
  alone_options.quorum_timeout = milliseconds(800);
  ReplicaLink alone(alone_options);
  const auto message = error_message_of<DistributedError>([&] { alone.request_quorum(0, false); });
  EXPECT_NE(message.find("replica 2 found no quorum within 0.8 s; the lighthouse at 127.0.0.1:"), std::string::npos)
      << message;
  EXPECT_NE(message.find("replicas 0, 2 ask to join, but a quorum needs 3 (min_replicas)"), std::string::npos)
      << message;
  // Replica 1 built right asks too: with replica 2's request still standing, the quorum forms.
  ReplicaLink second(link_options(lighthouse.port(), 1, "mlp-1-abc"));
  const auto quorum = second.request_quorum(0, false);
  EXPECT_EQ(quorum.members.size(), 3u);
  EXPECT_EQ(waiting.get().encode(), quorum.encode());
}

TEST(Lighthouse, BadOptionsAreRefused) {
  EXPECT_NE(
      configuration_error_of([] { Lighthouse({.port = 0, .replicas = 0}); }).find("replicas expects a value >= 1"),
      std::string::npos);
  EXPECT_NE(configuration_error_of([] {
              Lighthouse({.port = 0, .replicas = 2, .min_replicas = 3});
            }).find("min_replicas expects a value in [1, 2]"),
            std::string::npos);
  EXPECT_NE(configuration_error_of([] {
              ReplicaLink(ReplicaLinkOptions{.replicas = 2, .replica = 2});
            }).find("replica expects a value in [0, 2)"),
            std::string::npos);
}

TEST(Lighthouse, AReplicaWithoutOneSaysHowToStartIt) {
  auto options = link_options(find_free_port(), 1);
  options.timeout = milliseconds(500);
  const auto message = error_message_of<DistributedError>([&] { ReplicaLink link(options); });
  EXPECT_NE(message.find("replica 1 cannot reach the lighthouse at 127.0.0.1:"), std::string::npos) << message;
  EXPECT_NE(message.find("start it first (volt-lighthouse --replicas 3 --port"), std::string::npos) << message;
}

// Note [What fault-tolerant replicas run]: the flag's keys, and the Trainer settings a replica
// step cannot run, each refused naming what to do.
TEST(FaultToleranceOptions, RefusesBadKeysAndWhatAReplicaStepCannotRun) {
  const auto refusal = [](const std::string& spec, const std::function<void(TrainerOptions&)>& change = {}) {
    TrainerOptions options;
    options.fault_tolerance = spec;
    if (change) change(options);
    return configuration_error_of([&] { options.validate(); });
  };
  const std::string good = "replicas=4,replica=1,lighthouse=10.0.0.5:29510";
  TrainerOptions options;
  options.fault_tolerance = good + ",timeout=2.5";
  EXPECT_NO_THROW(options.validate());
  const auto parsed = FaultToleranceOptions::parse(options.fault_tolerance);
  EXPECT_EQ(parsed.host(), "10.0.0.5");
  EXPECT_EQ(parsed.port(), 29510);
  EXPECT_EQ(parsed.timeout, milliseconds(2500));
  EXPECT_NE(refusal("replicas=4,replica=4,lighthouse=h:1").find("replica expects a value in [0, 4)"),
            std::string::npos);
  EXPECT_NE(refusal("replicas=4,replica=0").find("option 'lighthouse' expects HOST:PORT"), std::string::npos);
  EXPECT_NE(refusal("replicas=4,replica=0,lighthouse=h:99999").find("HOST:PORT with a port in [1, 65535]"),
            std::string::npos);
  EXPECT_NE(refusal(good + ",lighthose=x").find("lighthouse"), std::string::npos) << "the closest key";
  EXPECT_NE(refusal(good, [](auto& o) { o.accumulate_grad_batches = 2; }).find("a replica step is one batch"),
            std::string::npos);
  EXPECT_NE(refusal(good, [](auto& o) { o.precision = "16-mixed"; }).find("use bf16-mixed or 32-true"),
            std::string::npos);
  EXPECT_NE(refusal(good, [](auto& o) { o.val_check_interval = BatchLimit::fraction(0.5); })
                .find("replicas validate at the end of an epoch only"),
            std::string::npos);
  EXPECT_NE(refusal(good, [](auto& o) { o.fast_dev_run = 1; }).find("not with --fast-dev-run"), std::string::npos);
}

}  // namespace
}  // namespace volt::testing
