#pragma once
// numpy.random.RandomState(seed).randint(high), reproduced: PyTorch's PowerSGD hook draws the seed
// of each random initial Q from such a generator (`torch.manual_seed(rng.randint(1_000_000_000))`,
// then `torch.randn`), so that every rank starts from the same Q. Doing the same in C++ makes
// volt's PowerSGD start from PyTorch's Q, which is what lets the parity tests compare the two.
//
// numpy's legacy RandomState seeds a Mersenne Twister (MT19937) with init_genrand(seed), as
// std::mt19937 does; randint(high) for high <= 2^32 masks 32-bit draws to the next power of two
// minus one and rejects values >= high. Not thread-safe.
#include <torch/torch.h>

#include <cstdint>
#include <random>
#include <string>

namespace volt::ddp {

class NumpyRandomState {
 public:
  // `seed` in [0, 2^32), like numpy's.
  explicit NumpyRandomState(uint32_t seed = 0) : engine_(seed) {}
  // A value in [0, high); 1 <= high <= 2^32.
  int64_t randint(int64_t high);
  // The engine's state as text, and back (checkpoints); load throws CheckpointError when malformed.
  std::string save() const;
  void load(const std::string& state);

 private:
  std::mt19937 engine_;
};

// A CPU generator in the state torch.manual_seed(seed) leaves the global one in: torch::randn(...,
// generator) then draws what PyTorch's hook draws after seeding, without disturbing the global
// generator (the hook forks it: torch.random.fork_rng).
at::Generator seeded_cpu_generator(int64_t seed);

}  // namespace volt::ddp
