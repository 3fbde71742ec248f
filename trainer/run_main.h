#pragma once
#include <functional>

namespace volt {

// Runs a program's body and turns volt's exceptions into a message on stderr and an exit code:
// 0 after --help (printed to stdout), 2 for a configuration error, 1 for any other error. Use it
// as `int main(int argc, char** argv) { return volt::run_main([&] { ... }); }` so that bad input
// ends in a sentence, not a stack trace.
int run_main(const std::function<void()>& body);

}  // namespace volt
