#pragma once
// volt's exception hierarchy. Every error a user can cause says what was wrong, the value seen and
// what to do, shaped "Component: expected X, got Y; what to do". Broken internal invariants are a
// separate type so that a bug in volt never reads like a user mistake.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace volt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad option, flag, strategy name or combination of settings.
class ConfigurationError : public Error {
 public:
  using Error::Error;
};

// A peer failed, a collective timed out, ranks disagree about shapes or world size.
class DistributedError : public Error {
 public:
  using Error::Error;
};

// A checkpoint that is missing, truncated, corrupt, or of another model or format version.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// Input data that is missing or malformed (a dataset file, a batch without a target, ...).
class DataError : public Error {
 public:
  using Error::Error;
};

// A feature that is valid in general but not available here (fp16 autocast without CUDA, ...).
class NotSupportedError : public Error {
 public:
  using Error::Error;
};

// An object used out of its order: a call its current state does not allow (an FSDP unit's
// forward during its own backward, ...). Says which state it is in and what order is expected.
class StateError : public Error {
 public:
  using Error::Error;
};

// A broken invariant inside volt: a bug to report, never the user's fault.
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// Throws ErrorType with the concatenated message unless `condition` holds. Always on, also in
// release builds: these checks guard user input and invariants that would otherwise corrupt state.
template <typename ErrorType, typename... Parts>
void check(bool condition, const Parts&... parts) {
  if (!condition) throw ErrorType(detail::concat(parts...));
}

}  // namespace volt

// For invariants volt itself must keep; names the file and line so the report is actionable.
#define VOLT_INTERNAL_ASSERT(condition, ...)                                                    \
  ::volt::check<::volt::InternalError>((condition), "volt internal error at ", __FILE__, ":", \
                                       __LINE__, ": `" #condition "` failed. " __VA_OPT__(, ) \
                                           __VA_ARGS__)
