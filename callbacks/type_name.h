#pragma once
#include <string>
#include <typeinfo>

namespace volt {

// The unqualified class name of `type` ("Adam" for torch::optim::Adam), for display and keys.
std::string short_type_name(const std::type_info& type);

}  // namespace volt
