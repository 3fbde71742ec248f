#pragma once
// A network link between two benchmark ranks: two network namespaces joined by a veth pair
// (10.214.<x>.1 and .2), each rank run in its own namespace (`ip netns exec`), optionally limited
// to a rate by a token bucket (`tc qdisc ... tbf`) on both ends, so that each direction carries
// at most that rate. Needs root (CAP_NET_ADMIN) and iproute2; tests/distributed/
// process_launch_test.cpp (NetworkNamespaceTest) sets up the same pair. Not thread-safe.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace volt::bench {

class VethLink {
 public:
  // Creates the namespaces and the pair; error() says why when it could not.
  VethLink() {
    const std::string id = std::to_string(getpid() % 100000);
    namespaces_ = {"vbench_a" + id, "vbench_b" + id};
    interfaces_ = {"vba" + id, "vbb" + id};
    const std::string subnet = "10.214." + std::to_string(getpid() % 200 + 10);
    addresses_ = {subnet + ".1", subnet + ".2"};
    std::string setup = "ip netns add " + namespaces_[0] + " && ip netns add " + namespaces_[1] + " && ip link add " +
                        interfaces_[0] + " type veth peer name " + interfaces_[1];
    for (int r = 0; r < 2; ++r) {
      setup += " && ip link set " + interfaces_[r] + " netns " + namespaces_[r] + " && ip -n " + namespaces_[r] +
               " addr add " + addresses_[r] + "/24 dev " + interfaces_[r] + " && ip -n " + namespaces_[r] +
               " link set " + interfaces_[r] + " up && ip -n " + namespaces_[r] + " link set lo up";
    }
    error_ = run(setup);
  }
  ~VethLink() {
    for (const auto& ns : namespaces_) run("ip netns del " + ns);
    run("ip link del " + interfaces_[0]);  // left in this namespace when the setup failed halfway
  }
  VethLink(const VethLink&) = delete;
  VethLink& operator=(const VethLink&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // Limits each direction to `rate` ("1gbit", "100mbit": tc's units; "" lifts the limit). The
  // bucket holds 10 ms at that rate (at least 64 KiB, one GSO packet), so long transfers run at
  // the rate and short ones are not split. Returns "" or the failure.
  std::string set_rate(const std::string& rate) {
    for (int r = 0; r < 2; ++r) {
      const std::string prefix = "ip netns exec " + namespaces_[r] + " tc qdisc ";
      std::string failure = rate.empty() ? (run(prefix + "del dev " + interfaces_[r] + " root"), "")
                                         : run(prefix + "replace dev " + interfaces_[r] + " root tbf rate " + rate +
                                               " burst " + std::to_string(burst_bytes(rate)) + " latency 200ms");
      if (!failure.empty()) return failure;
    }
    return "";
  }

  // What runs a command as `rank`: prepend to its argv.
  std::vector<std::string> exec_prefix(int rank) const { return {"ip", "netns", "exec", namespaces_[rank]}; }
  const std::string& address(int rank) const { return addresses_[rank]; }
  const std::string& interface(int rank) const { return interfaces_[rank]; }

 private:
  // "" when `command` succeeded, else its output.
  static std::string run(const std::string& command) {
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    if (!pipe) return "popen failed: " + command;
    std::string output;
    char buffer[512];
    while (fgets(buffer, sizeof buffer, pipe)) output += buffer;
    const int status = pclose(pipe);
    return status == 0 ? "" : command + ": " + (output.empty() ? "failed" : output);
  }

  static long long burst_bytes(const std::string& rate) {
    const double number = std::atof(rate.c_str());
    const std::string unit = rate.substr(rate.find_first_not_of("0123456789."));
    const double bits = unit == "gbit"   ? number * 1e9
                        : unit == "mbit" ? number * 1e6
                        : unit == "kbit" ? number * 1e3
                                         : number;
    return std::max(65536LL, static_cast<long long>(bits / 8 / 100));
  }

  std::vector<std::string> namespaces_, interfaces_, addresses_;
  std::string error_;
};

}  // namespace volt::bench
