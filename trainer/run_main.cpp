#include "trainer/run_main.h"

#include <iostream>

#include "trainer/error.h"
#include "trainer/trainer_options.h"

namespace volt {

int run_main(const std::function<void()>& body) {
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

}  // namespace volt
