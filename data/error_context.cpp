#include "data/error_context.h"

#include <c10/util/Exception.h>

#include <exception>

#include "core/error.h"

namespace volt {
namespace {

// Throws ErrorType with `context` before e's message. When e nests another exception (a
// DataError that carries a worker's original exception), the new one nests that same original.
template <typename ErrorType>
[[noreturn]] void rethrow_as(const ErrorType& e, const std::string& context) {
  const auto* nested = dynamic_cast<const std::nested_exception*>(&e);
  if (nested != nullptr && nested->nested_ptr()) {
    try {
      std::rethrow_exception(nested->nested_ptr());
    } catch (...) {
      std::throw_with_nested(ErrorType(context + e.what()));
    }
  }
  throw ErrorType(context + e.what());
}

}  // namespace

void rethrow_with_context(const std::string& context) {
  try {
    throw;
  } catch (const ConfigurationError& e) {
    rethrow_as(e, context);
  } catch (const DistributedError& e) {
    rethrow_as(e, context);
  } catch (const CheckpointError& e) {
    rethrow_as(e, context);
  } catch (const DataError& e) {
    rethrow_as(e, context);
  } catch (const NotSupportedError& e) {
    rethrow_as(e, context);
  } catch (const StateError& e) {
    rethrow_as(e, context);
  } catch (const InternalError& e) {
    rethrow_as(e, context);
  } catch (const c10::Error& e) {
    // LibTorch's message without its C++ backtrace, which says nothing about the data.
    std::throw_with_nested(DataError(context + e.what_without_backtrace()));
  } catch (const std::exception& e) {
    std::throw_with_nested(DataError(context + e.what()));
  } catch (...) {
    std::throw_with_nested(DataError(context + "an exception that is not a std::exception"));
  }
}

}  // namespace volt
