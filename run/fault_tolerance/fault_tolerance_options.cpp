#include "run/fault_tolerance/fault_tolerance_options.h"

#include "core/duration.h"
#include "core/option_schema.h"

namespace volt {

namespace {

bool is_host_port(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
  const std::string port = text.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5) return false;
  const int64_t value = std::stoll(port);
  return value >= 1 && value <= 65535;
}

}  // namespace

const OptionSchema<FaultToleranceOptions>& FaultToleranceOptions::schema() {
  using O = FaultToleranceOptions;
  static const auto schema =
      OptionSchema<O>("--fault-tolerance")
          .option("replicas", &O::replicas, "replica groups of the run", at_least<int64_t>(1))
          .option("replica", &O::replica, "this launch's replica group, in [0, replicas)", at_least<int64_t>(0))
          .option("lighthouse", &O::lighthouse, "HOST:PORT where volt-lighthouse listens",
                  satisfies(is_host_port, "HOST:PORT with a port in [1, 65535]"))
          .option("timeout", &O::timeout, seconds_form(),
                  "seconds a cross-replica operation may take before the step fails",
                  satisfies([](const std::chrono::milliseconds& t) { return t.count() > 0; }, "a value > 0"))
          .option("quorum_timeout", &O::quorum_timeout, seconds_form(),
                  "seconds a replica waits for a quorum before the run fails",
                  satisfies([](const std::chrono::milliseconds& t) { return t.count() > 0; }, "a value > 0"));
  return schema;
}

FaultToleranceOptions FaultToleranceOptions::parse(const std::string& spec) {
  const NamedSpec named = parse_named_spec("fault-tolerance:" + spec, "--fault-tolerance");
  return schema().from(schema().values([&] {
    std::map<std::string, std::vector<std::string>> given;
    for (const auto& [key, value] : named.values) given[key] = {value};
    return given;
  }()));
}

void FaultToleranceOptions::validate() const {
  schema().validate(*this);
  check<ConfigurationError>(replica < replicas, "--fault-tolerance: replica expects a value in [0, ", replicas,
                            ") (replicas=", replicas, "), got ", replica);
  check<ConfigurationError>(!lighthouse.empty(),
                            "--fault-tolerance: lighthouse=HOST:PORT is required: where volt-lighthouse listens");
}

std::string FaultToleranceOptions::host() const { return lighthouse.substr(0, lighthouse.rfind(':')); }
int64_t FaultToleranceOptions::port() const { return std::stoll(lighthouse.substr(lighthouse.rfind(':') + 1)); }

}  // namespace volt
