#include "trainer/run_main.h"

#include <iostream>

#include "distributed/process_launcher.h"
#include "core/error.h"
#include "trainer/trainer_options.h"

namespace volt {
namespace {

int run_body(const std::function<void()>& body) {
  try {
    body();
    return 0;
  } catch (const HelpRequested& help) {
    std::cout << help.what();
    return 0;
  } catch (const ConfigurationError& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 2;
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "error (LibTorch): " << e.what_without_backtrace() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}

// With volt's launcher this process is local rank 0 of a group it started: it ends only after its
// children, and fails when one of them did (naming it).
int finish_children(int exit_code, ProcessLauncher& launcher) {
  if (!launcher.launched()) return exit_code;
  if (exit_code != 0) {
    if (auto failure = launcher.failure()) std::cerr << "error: the first failure was " << *failure << std::endl;
    launcher.stop_children();
    return exit_code;
  }
  if (auto failure = launcher.wait_for_children(launcher.finish_timeout())) {
    std::cerr << "error: " << *failure << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace

int run_main(const std::function<void()>& body) { return run_body(body); }

int run_main(const std::function<void(ProcessLauncher& launcher)>& body) {
  ProcessLauncher launcher;
  return finish_children(run_body([&] { body(launcher); }), launcher);
}

}  // namespace volt
