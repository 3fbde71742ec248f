#pragma once
// Note [Objects reached from a backward]: a custom torch::autograd::Function takes only
// IValue-convertible arguments and keeps only IValues in its context's saved_data, so an object
// its backward must reach (a communicator to reduce over, a pipeline stage's gradient window)
// travels as its address, an int64. The address says nothing about lifetime: the object must
// outlive every backward of the graph that holds it, which the strategies that pass one ensure by
// owning it for the run (a mesh's group) or for the step (the window, finished by that step's
// backward). These two functions are the only place the address is taken and read back.
#include <cstdint>

namespace volt {

template <typename T>
int64_t autograd_address(T& object) {
  return reinterpret_cast<int64_t>(&object);
}

template <typename T>
T& autograd_object(int64_t address) {
  return *reinterpret_cast<T*>(address);
}

}  // namespace volt
