#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace volt {

// The random draws of one sample's work (augmentations: a crop's place, a flip), from a stream
// seeded by (seed, epoch, sample index) alone. So they depend neither on the worker that builds
// the sample nor on the order the workers run in, and a batch is the same whatever the number
// of workers, in a resumed run too (Note [Per-sample randomness]).
//
// The engine is xoshiro256** seeded through splitmix64, written out here rather than taken from
// <random>, whose distributions differ between standard libraries: the same seed gives the same
// draws with any compiler. Not thread-safe; each sample has its own.
class SampleRandom {
 public:
  SampleRandom(uint64_t seed, int64_t epoch, int64_t index);

  // 64 random bits.
  uint64_t bits();
  // Uniform in [low, high).
  double uniform(double low = 0.0, double high = 1.0);
  // Uniform integer in [low, high) (torch.randint's range); low < high.
  int64_t integer(int64_t low, int64_t high);
  // True with probability p.
  bool bernoulli(double p);
  // A LibTorch CPU generator seeded from this stream, for torch's own random functions
  // (torch::rand({3}, random.torch_generator())).
  at::Generator torch_generator();

 private:
  uint64_t state_[4];
};

}  // namespace volt
