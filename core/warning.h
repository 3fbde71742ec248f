#pragma once
// Warnings: a run that goes on, but not exactly as the user may think (a resumed run that cannot
// match the original, a setting that turns a feature off). One line on stderr, prefixed so that it
// can be told from the program's own output. Callers in distributed code print on one rank only.
#include <iostream>
#include <string>

namespace volt {

inline void warn(const std::string& message) { std::cerr << "volt: warning: " << message << std::endl; }

}  // namespace volt
