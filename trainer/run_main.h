#pragma once
#include <functional>

namespace volt {

class ProcessLauncher;

// Runs a program's body and turns volt's exceptions into a message on stderr and an exit code:
// 0 after --help (printed to stdout), 2 for a configuration error, 1 for any other error. Use it
// as `int main(int argc, char** argv) { return volt::run_main([&] { ... }); }` so that bad input
// ends in a sentence, not a stack trace.
int run_main(const std::function<void()>& body);

// The same, for a program that may start its own local ranks (volt's launcher: --devices N
// without torchrun, srun or mpirun): the body gets the run's ProcessLauncher to hand to its
// Trainers (Trainer(options, launcher)). run_main owns it, so that several Trainers one after
// another share one group of processes, and it ends only after the children did: a child that
// failed, even after this process's last collective, makes the exit status non-zero and is named
// on stderr.
int run_main(const std::function<void(ProcessLauncher& launcher)>& body);

}  // namespace volt
