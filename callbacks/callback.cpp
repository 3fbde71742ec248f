#include "callbacks/callback.h"

#include <cxxabi.h>

#include <memory>

#include "callbacks/type_name.h"

namespace volt {

std::string short_type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                   std::free);
  std::string name = status == 0 && demangled ? demangled.get() : type.name();
  const auto template_start = name.find('<');
  const auto colon = name.rfind("::", template_start);
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

std::string Callback::state_key() const { return short_type_name(typeid(*this)); }

}  // namespace volt
