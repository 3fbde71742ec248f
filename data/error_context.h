#pragma once
#include <string>

namespace volt {

// Rethrows the exception being handled with `context` put before its message ("DataLoader:
// sample 17 (position 3 of batch 5, epoch 0): " + what()). volt's own error types keep their
// type; any other exception (a c10::Error from a tensor op, a std::exception, anything else)
// becomes a DataError that nests the original, which std::rethrow_if_nested reaches. Call only
// inside a catch block.
[[noreturn]] void rethrow_with_context(const std::string& context);

}  // namespace volt
