#include "data/sample_random.h"

#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"

namespace volt {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

// Note [Per-sample randomness]: PyTorch's DataLoader seeds each worker process once (base_seed +
// worker id), so a sample's augmentation depends on which worker built it, hence on the number
// of workers and on their timing. volt seeds each sample: the three numbers are folded through
// splitmix64 one after the other (each step a bijection of the running value mixed with the next
// number), so (seed, epoch, index) triples that differ anywhere give unrelated streams.
SampleRandom::SampleRandom(uint64_t seed, int64_t epoch, int64_t index) {
  uint64_t x = seed;
  x = splitmix64(x) ^ static_cast<uint64_t>(epoch);
  x = splitmix64(x) ^ static_cast<uint64_t>(index);
  for (uint64_t& word : state_) word = splitmix64(x);
}

uint64_t SampleRandom::bits() {
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double SampleRandom::uniform(double low, double high) {
  // The top 53 bits as a double in [0, 1).
  const double unit = static_cast<double>(bits() >> 11) * 0x1.0p-53;
  return low + (high - low) * unit;
}

int64_t SampleRandom::integer(int64_t low, int64_t high) {
  check<ConfigurationError>(low < high, "SampleRandom::integer: expected low < high, got [", low, ", ", high, ")");
  const auto range = static_cast<uint64_t>(high - low);
  // Rejection keeps every value equally likely (a plain modulo favours the small ones).
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t draw = bits();
  while (draw >= limit) draw = bits();
  return low + static_cast<int64_t>(draw % range);
}

bool SampleRandom::bernoulli(double p) { return uniform() < p; }

at::Generator SampleRandom::torch_generator() { return at::detail::createCPUGenerator(bits()); }

}  // namespace volt
