// Checkpoint I/O: volt's save_weights / load_weights (torch.save-compatible archive + CRC32C +
// atomic write with fsync; verify on load) against LibTorch's own ways to store the same tensors,
// measured in the same run on the same disk:
//   pickle_save  torch::pickle_save of the same name → tensor dict, written with one write()
//                (the same archive format without volt's checksum; durability: none)
//   +fsync       the same, plus fsync (the durability volt's atomic write gives)
//   torch::save  LibTorch's module archive (TorchScript format; Python cannot torch.load it)
// for the example CNN and a ~150 MB MLP. Prints medians and volt's time as a ratio to each.
//   build/bench/checkpoint_io [--dir DIR] [--repeats N]
#include <fcntl.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include "bench/bench_support.h"
#include "fashion_mnist/classifier.h"
#include "checkpoint/module_state.h"
#include "checkpoint/weights.h"

namespace fs = std::filesystem;

namespace {

double median_seconds(int repeats, const std::function<void()>& body) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return volt::bench::median(std::move(times));
}

void write_file(const fs::path& path, const std::vector<char>& bytes, bool sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    throw std::runtime_error("cannot write " + path.string());
  }
  if (sync) ::fsync(fd);
  ::close(fd);
}

std::vector<char> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

struct Row {
  std::string model, operation;
  double volt = 0, pickle = 0, pickle_fsync = 0, torch_save = 0;
};

Row measure_save(const std::string& name, torch::nn::Module& model, const std::shared_ptr<torch::nn::Module>& holder,
                 const fs::path& dir, int repeats) {
  const auto state = volt::module_state_dict(model).to_ivalue();
  Row row{name, "save"};
  row.volt = median_seconds(repeats, [&] { volt::save_weights(model, dir / "volt.pt"); });
  row.pickle = median_seconds(repeats, [&] { write_file(dir / "pickle.pt", torch::pickle_save(state), false); });
  row.pickle_fsync = median_seconds(repeats, [&] { write_file(dir / "pickle.pt", torch::pickle_save(state), true); });
  row.torch_save = median_seconds(repeats, [&] { torch::save(holder, (dir / "torch.pt").string()); });
  return row;
}

Row measure_load(const std::string& name, torch::nn::Module& model, const std::shared_ptr<torch::nn::Module>& holder,
                 const fs::path& dir, int repeats) {
  Row row{name, "load"};
  row.volt = median_seconds(repeats, [&] { volt::load_weights(model, dir / "volt.pt"); });
  row.pickle = median_seconds(repeats, [&] {
    // Read, unpickle and copy into the module: what volt's load does, minus verification.
    const auto value = torch::pickle_load(read_file(dir / "pickle.pt"));
    volt::load_module_state_dict(model, volt::StateDict::from_ivalue(value), true, "bench");
  });
  row.pickle_fsync = row.pickle;
  row.torch_save = median_seconds(repeats, [&] { torch::load(holder, (dir / "torch.pt").string()); });
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir = fs::path("build") / "bench_checkpoint_io";
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--dir") dir = argv[i + 1];
    else if (flag == "--repeats") repeats = std::stoi(argv[i + 1]);
    else {
      std::cerr << "usage: checkpoint_io [--dir DIR] [--repeats N]\n";
      return 2;
    }
  }
  fs::create_directories(dir);
  torch::manual_seed(0);
  auto cnn = std::make_shared<fashion_mnist::Classifier>();
  torch::nn::Sequential mlp;
  for (int i = 0; i < 9; ++i) mlp->push_back(torch::nn::Linear(2048, 2048));  // 37.8 M floats = 151 MB
  std::shared_ptr<torch::nn::Module> mlp_holder = mlp.ptr();

  std::vector<Row> rows;
  for (const auto& [name, module, holder] :
       std::vector<std::tuple<std::string, torch::nn::Module*, std::shared_ptr<torch::nn::Module>>>{
           {"example CNN", cnn.get(), cnn}, {"MLP 151 MB", mlp.ptr().get(), mlp_holder}}) {
    rows.push_back(measure_save(name, *module, holder, dir, repeats));
    rows.push_back(measure_load(name, *module, holder, dir, repeats));
  }
  const auto size_of = [&](const char* file) { return static_cast<double>(fs::file_size(dir / file)) / 1e6; };
  std::printf("files (last model): volt %.1f MB, pickle_save %.1f MB, torch::save %.1f MB\n\n", size_of("volt.pt"),
              size_of("pickle.pt"), size_of("torch.pt"));
  std::printf("%-12s %-5s %12s %12s %12s %12s   %s\n", "model", "op", "volt ms", "pickle ms", "+fsync ms",
              "torch::save ms", "volt / pickle, / +fsync, / torch::save");
  for (const auto& r : rows) {
    std::printf("%-12s %-5s %12.2f %12.2f %12.2f %12.2f   %.2fx, %.2fx, %.2fx\n", r.model.c_str(), r.operation.c_str(),
                r.volt * 1e3, r.pickle * 1e3, r.pickle_fsync * 1e3, r.torch_save * 1e3, r.volt / r.pickle,
                r.volt / r.pickle_fsync, r.volt / r.torch_save);
  }
  fs::remove_all(dir);
  return 0;
}
