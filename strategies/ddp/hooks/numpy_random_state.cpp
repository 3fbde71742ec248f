#include "strategies/ddp/hooks/numpy_random_state.h"

#include <sstream>

#include "core/error.h"

namespace volt::ddp {

int64_t NumpyRandomState::randint(int64_t high) {
  VOLT_INTERNAL_ASSERT(high >= 1 && high <= (int64_t{1} << 32), "randint's bound fits 32 bits");
  const auto range = static_cast<uint32_t>(high - 1);
  uint32_t mask = range;
  for (int shift : {1, 2, 4, 8, 16}) mask |= mask >> shift;
  uint32_t value = 0;
  do {
    value = static_cast<uint32_t>(engine_()) & mask;
  } while (value > range);
  return value;
}

std::string NumpyRandomState::save() const {
  std::ostringstream out;
  out << engine_;
  return out.str();
}

void NumpyRandomState::load(const std::string& state) {
  std::istringstream in(state);
  std::mt19937 engine;
  in >> engine;
  check<CheckpointError>(!in.fail(), "PowerSGD: the saved random generator state is malformed");
  engine_ = engine;
}

at::Generator seeded_cpu_generator(int64_t seed) {
  return at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
}

}  // namespace volt::ddp
