// A program that links volt does not take the C++ standard library from the partial copies
// PyTorch's wheels put into libtorch.so, whose std::filesystem::remove_all jumped to address 0
// (Note [LibTorch's copy of libstdc++] in cmake/volt_find_torch.cmake).
#include <dlfcn.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include <torch/torch.h>

namespace volt {
namespace {

std::string library_defining(const void* address) {
  Dl_info info{};
  if (::dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "(unknown)";
  return info.dli_fname;
}

TEST(OneLibstdcxx, FilesystemCallsDoNotReachLibtorchSo) {
  using RemoveAll = std::uintmax_t (*)(const std::filesystem::path&, std::error_code&);
  const RemoveAll remove_all = &std::filesystem::remove_all;
  const std::string library = library_defining(reinterpret_cast<const void*>(remove_all));
  EXPECT_EQ(library.find("/libtorch.so"), std::string::npos) << "std::filesystem::remove_all comes from " << library;
  // And the call works (through libtorch.so's copy it jumped to address 0).
  const auto directory = std::filesystem::temp_directory_path() / ("volt_one_libstdcxx_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory / "inner");
  std::error_code error;
  EXPECT_EQ(std::filesystem::remove_all(directory, error), 2u) << error.message();
}

TEST(OneLibstdcxx, LibTorchIsLinked) {
  // The guard above is about where std:: comes from, with LibTorch in the same process.
  EXPECT_EQ(torch::ones({2}).sum().item<float>(), 2.0f);
}

}  // namespace
}  // namespace volt
