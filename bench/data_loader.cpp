// volt's thread-based data pipeline (Note [Batches built on worker threads]) against PyTorch's
// DataLoader, on the same JPEG files with the same per-sample work, and what the pipeline does
// for the Trainer's step:
//
//   build/bench/data_loader [--workers 1,2,4,8,16] [--batch-size 256] [--batches 8] [--rounds 3]
//       [--images 1024] [--root DIR] [--python "PYTHONPATH=... /usr/bin/python3"] [--decoders pil,torchvision]
//       [--tables throughput,overlap,memory]
//
// throughput  samples/s of an ImageFolder of JPEGs (500x375 photographs' size, synthetic content,
//             written here once into --root), each sample decoded, RandomResizedCrop(224),
//             RandomHorizontalFlip, ToTensor, Normalize(ImageNet), batches of --batch-size, for each
//             worker count up to the machine's cores: volt's DataLoader against PyTorch 2.11's
//             (bench/data_loader_worker.py, torchvision 0.26: PIL's decoder, and torchvision.io's),
//             rounds interleaved, medians.
// overlap     the Trainer's step time with a dataset whose batches cost d ms of CPU and a step that
//             leaves the host idle for c ms (as a GPU step does), against max(c, d / workers).
// memory      bytes of the batches built and waiting at the peak (the stream's counters) against
//             num_workers x prefetch_factor batches, and the process's peak RSS.
//
// The default --python is /usr/bin/python3 with .deps/pytorch2 and .deps/vision on PYTHONPATH
// (tools/setup_vision.sh).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "bench/bench_support.h"
#include "data/image/image_folder_dataset.h"
#include "data/image/jpeg_codec.h"
#include "trainer/volt.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A photograph's size and texture: smooth random colour fields with detail on top, so that
// JPEG codes it like a photograph (3-4 bits per pixel at quality 90), not like a flat field.
volt::image::Pixels synthetic_photo(int64_t height, int64_t width, uint64_t seed) {
  auto g = at::detail::createCPUGenerator(seed);
  auto low = torch::rand({1, 3, height / 32 + 2, width / 32 + 2}, g) * 180 + 20;
  auto field = torch::nn::functional::interpolate(low, torch::nn::functional::InterpolateFuncOptions()
                                                           .size(std::vector<int64_t>{height, width})
                                                           .mode(torch::kBicubic)
                                                           .align_corners(false));
  auto detail = torch::nn::functional::interpolate(torch::randn({1, 1, height / 2, width / 2}, g) * 20,
                                                   torch::nn::functional::InterpolateFuncOptions()
                                                       .size(std::vector<int64_t>{height, width})
                                                       .mode(torch::kBilinear)
                                                       .align_corners(false));
  auto pixels = (field + detail + torch::randn({1, 3, height, width}, g) * 9).clamp(0, 255).to(torch::kUInt8);
  auto hwc = pixels[0].permute({1, 2, 0}).contiguous();
  volt::image::Pixels out{height, width, 3, {}};
  out.data.assign(hwc.data_ptr<uint8_t>(), hwc.data_ptr<uint8_t>() + hwc.numel());
  return out;
}

// root/class_<k>/<i>.jpg, written once (a stamp file says how many).
void write_images(const std::string& root, int64_t count) {
  const std::string stamp = root + "/.written";
  std::ifstream in(stamp);
  int64_t written = 0;
  if (in >> written && written == count) return;
  fs::remove_all(root);
  for (int64_t i = 0; i < count; ++i) {
    const std::string folder = root + "/class_" + std::to_string(i % 8);
    fs::create_directories(folder);
    std::ofstream(folder + "/" + std::to_string(i) + ".jpg", std::ios::binary)
        << volt::image::encode_jpeg(synthetic_photo(375, 500, static_cast<uint64_t>(i)), 90);
  }
  std::ofstream(stamp) << count;
}

volt::ImageFolderOptions imagenet_training(int64_t crop) {
  volt::ImageFolderOptions options;
  options.transform =
      volt::image::ImagePipeline{{volt::image::RandomResizedCrop(crop), volt::image::RandomHorizontalFlip(),
                                  volt::image::Normalize({0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f})}};
  options.extensions = {".jpg"};
  return options;
}

int64_t peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

struct VoltRun {
  double samples_per_second = 0;
  int64_t peak_ready_bytes = 0, peak_ready_batches = 0, batch_bytes = 0;
};

// volt's loader over the folder: `warmup` batches untimed, then `batches` timed, epochs chained;
// the consumer pauses `pause_ms` after each batch (a slow step, which lets the workers fill the
// window).
VoltRun run_volt(const std::shared_ptr<volt::ImageFolderDataset>& dataset, int64_t workers, int64_t batch_size,
                 int64_t warmup, int64_t batches, int64_t prefetch, int64_t pause_ms = 0) {
  volt::DataLoader loader(dataset, {.batch_size = batch_size, .shuffle = true, .drop_last = true, .seed = 0,
                                    .num_workers = workers, .prefetch_factor = prefetch,
                                    .persistent_workers = true});
  VoltRun run;
  int64_t drawn = 0, epoch = 0;
  Clock::time_point start;
  while (drawn < warmup + batches) {
    loader.set_epoch(epoch++);
    volt::BatchStream stream = loader.stream(0, loader.num_batches());
    while (stream.has_next() && drawn < warmup + batches) {
      const volt::Batch batch = stream.next();
      run.batch_bytes = static_cast<int64_t>(batch.input.nbytes() + batch.target.nbytes());
      if (++drawn == warmup) start = Clock::now();
      if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    }
    run.peak_ready_bytes = std::max(run.peak_ready_bytes, stream.stats().peak_ready_bytes);
    run.peak_ready_batches = std::max(run.peak_ready_batches, stream.stats().peak_ready_batches);
  }
  run.samples_per_second = static_cast<double>(batches * batch_size) / seconds_since(start);
  return run;
}

// --- overlap: a dataset of d ms of CPU per batch, a step of c ms with the host idle.

void spin_for(double milliseconds) {
  const auto until = Clock::now() + std::chrono::duration<double, std::milli>(milliseconds);
  volatile double sink = 0;
  while (Clock::now() < until) sink = sink + 1.0;
}

class CostlyDataset : public volt::Dataset {
 public:
  CostlyDataset(int64_t samples, double batch_ms) : samples_(samples), batch_ms_(batch_ms) {}
  int64_t size() const override { return samples_; }
  volt::Batch get_batch(const volt::BatchRequest& request) const override {
    spin_for(batch_ms_);
    const auto n = static_cast<int64_t>(request.indices.size());
    return {torch::ones({n, 4}), torch::zeros({n, 1})};
  }

 private:
  int64_t samples_;
  double batch_ms_;
};

class IdleStep : public volt::Module {
 public:
  explicit IdleStep(double step_ms) : step_ms_(step_ms) { weight = register_parameter("weight", torch::zeros({4, 1})); }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(step_ms_));
    return (batch.input.matmul(weight) - batch.target).pow(2).mean();
  }
  volt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), 0.0);
  }
  torch::Tensor weight;

 private:
  double step_ms_;
};

// Times the steps after the first few through the batch hooks.
class StepTimes : public volt::Callback {
 public:
  void on_train_batch_start(volt::Trainer&, volt::Module&, const volt::Batch&, int64_t batch_idx) override {
    if (batch_idx == kSkip) start_ = Clock::now();
  }
  void on_train_batch_end(volt::Trainer&, volt::Module&, const torch::Tensor&, const volt::Batch&,
                          int64_t batch_idx) override {
    last_ = batch_idx;
    end_ = Clock::now();
  }
  double ms_per_step() const {
    return std::chrono::duration<double, std::milli>(end_ - start_).count() / static_cast<double>(last_ - kSkip + 1);
  }
  static constexpr int64_t kSkip = 3;

 private:
  Clock::time_point start_, end_;
  int64_t last_ = 0;
};

double trainer_step_ms(double data_ms, double step_ms, int64_t workers, int64_t steps, const std::string& root) {
  volt::TrainerOptions options;
  options.default_root_dir = root;
  options.max_epochs = 1;
  options.enable_progress_bar = false;
  options.enable_model_summary = false;
  options.enable_checkpointing = false;
  options.loggers.clear();
  options.num_sanity_val_steps = 0;
  volt::Trainer trainer(options);
  auto times = std::make_shared<StepTimes>();
  trainer.add_callback(times);
  auto dataset = std::make_shared<CostlyDataset>(steps * 8, data_ms);
  trainer.fit(
      std::make_shared<IdleStep>(step_ms),
      std::make_shared<volt::DataLoader>(dataset, volt::DataLoaderOptions{.batch_size = 8, .num_workers = workers}));
  return times->ms_per_step();
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&](volt::ProcessLauncher&) {
    std::string workers_list = "1,2,4,8,16", python, decoders = "pil,torchvision", tables = "throughput,overlap,memory";
    std::string root = "build/bench/data_loader_images";
    int64_t batch_size = 256, batches = 8, warmup = 2, images = 1024, crop = 224, rounds = 3, prefetch = 2;
    po::options_description description("data_loader");
    description.add_options()("help", "this text")("workers", po::value(&workers_list)->default_value(workers_list),
                                                   "worker counts (those above the cores are left out)")(
        "batch-size", po::value(&batch_size)->default_value(batch_size), "samples per batch")(
        "batches", po::value(&batches)->default_value(batches), "timed batches per run")(
        "warmup", po::value(&warmup)->default_value(warmup), "batches drawn before the timing starts")(
        "rounds", po::value(&rounds)->default_value(rounds), "interleaved rounds (medians)")(
        "prefetch-factor", po::value(&prefetch)->default_value(prefetch), "batches in flight per worker, both sides")(
        "images", po::value(&images)->default_value(images), "JPEG files written into --root")(
        "crop", po::value(&crop)->default_value(crop), "RandomResizedCrop's size")(
        "root", po::value(&root)->default_value(root), "the ImageFolder tree (written when absent)")(
        "python", po::value(&python),
        "command running bench/data_loader_worker.py (default: /usr/bin/python3 with "
        ".deps/pytorch2 and .deps/vision)")("decoders", po::value(&decoders)->default_value(decoders),
                                            "the Python side's: pil, torchvision")(
        "tables", po::value(&tables)->default_value(tables), "throughput, overlap, memory");
    if (!volt::bench::parse_flags(argc, argv, description)) return;
    // The checkout this program was built from, or the current directory when that is not here (a
    // program built elsewhere and run in another copy of the repository, as tools/gpu_check.sh does).
    std::string source = VOLT_SOURCE_DIR;
    if (!fs::exists(source + "/bench/data_loader_worker.py")) source = fs::current_path().string();
    if (python.empty())
      python = "PYTHONPATH=" + source + "/.deps/pytorch2:" + source + "/.deps/vision /usr/bin/python3";
    const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
    std::vector<int64_t> worker_counts;
    for (const auto& w : volt::bench::split_list(workers_list)) {
      if (std::stoll(w) <= cores) worker_counts.push_back(std::stoll(w));
    }
    const auto wanted = volt::bench::split_list(tables);
    auto table = [&](const std::string& name) { return std::find(wanted.begin(), wanted.end(), name) != wanted.end(); };
    std::printf("data_loader: %lld cores, LibTorch %s\n", static_cast<long long>(cores), TORCH_VERSION);

    if (table("throughput") || table("memory")) {
      write_images(root, images);
      auto dataset = std::make_shared<volt::ImageFolderDataset>(root, imagenet_training(crop));
      int64_t bytes = 0;
      for (int64_t i = 0; i < dataset->size(); ++i) bytes += static_cast<int64_t>(fs::file_size(dataset->path(i)));
      std::printf(
          "%lld JPEG files of 500x375 (%.0f KB each on average) in %s; RandomResizedCrop(%lld), "
          "RandomHorizontalFlip, ToTensor, Normalize; batch %lld, shuffled, prefetch_factor %lld; %lld timed "
          "batches after %lld, %lld round(s), medians\n",
          static_cast<long long>(dataset->size()),
          static_cast<double>(bytes) / 1000.0 / static_cast<double>(dataset->size()), root.c_str(),
          static_cast<long long>(crop), static_cast<long long>(batch_size), static_cast<long long>(prefetch),
          static_cast<long long>(batches), static_cast<long long>(warmup), static_cast<long long>(rounds));
      std::map<int64_t, std::vector<double>> volt_rate;
      std::map<std::pair<int64_t, std::string>, std::vector<double>> torch_rate;
      std::string versions;
      const auto python_decoders = table("throughput") ? volt::bench::split_list(decoders) : std::vector<std::string>{};
      for (int64_t round = 0; round < (table("throughput") ? rounds : 0); ++round) {
        for (const int64_t w : worker_counts) {
          const VoltRun run = run_volt(dataset, w, batch_size, warmup, batches, prefetch);
          volt_rate[w].push_back(run.samples_per_second);
          for (const auto& decoder : python_decoders) {
            const std::string out = volt::bench::run_shell(
                python + " " + source + "/bench/data_loader_worker.py --root " + root + " --decoder " + decoder +
                    " --workers " + std::to_string(w) + " --batches " + std::to_string(batches) + " --warmup " +
                    std::to_string(warmup) + " --batch-size " + std::to_string(batch_size) + " --crop " +
                    std::to_string(crop) + " --prefetch-factor " + std::to_string(prefetch),
                "data_loader");
            torch_rate[{w, decoder}].push_back(
                volt::bench::number_after(out, "\"samples_per_second\": ", "data_loader"));
            const auto at = out.find("\"torch\": ");
            if (versions.empty() && at != std::string::npos) versions = out.substr(at, out.find(", \"warmup\"") - at);
          }
          std::fprintf(stderr, "data_loader: round %lld, %lld workers done\n", static_cast<long long>(round),
                       static_cast<long long>(w));
        }
      }
      if (table("throughput")) {
        std::printf("PyTorch side: %s\n\n| workers | volt samples/s |", versions.c_str());
        for (const auto& d : python_decoders)
          std::printf(" PyTorch (%s) samples/s | volt / PyTorch (%s) |", d.c_str(), d.c_str());
        std::printf("\n|---:|---:|");
        for (size_t i = 0; i < python_decoders.size(); ++i) std::printf("---:|---:|");
        std::printf("\n");
        for (const int64_t w : worker_counts) {
          const double v = volt::bench::median(volt_rate[w]);
          std::printf("| %lld | %.0f |", static_cast<long long>(w), v);
          for (const auto& d : python_decoders) {
            const double t = volt::bench::median(torch_rate[{w, d}]);
            std::printf(" %.0f | %.2fx |", t, v / t);
          }
          std::printf("\n");
        }
      }
      if (table("memory")) {
        std::printf("\nBytes in flight with a consumer that pauses 1.5 s after each batch (a slow step: the workers "
                    "fill the window), 6 batches:\n\n| workers | prefetch_factor | batch bytes (MiB) | bound: workers "
                    "x prefetch x batch (MiB) | peak bytes built and waiting (MiB) | batches at that peak |\n"
                    "|---:|---:|---:|---:|---:|---:|\n");
        for (const int64_t w : worker_counts) {
          const VoltRun run = run_volt(dataset, w, batch_size, 0, 6, prefetch, /*pause_ms=*/1500);
          std::printf("| %lld | %lld | %.1f | %.1f | %.1f | %lld |\n", static_cast<long long>(w),
                      static_cast<long long>(prefetch), volt::bench::mib(static_cast<double>(run.batch_bytes)),
                      volt::bench::mib(static_cast<double>(run.batch_bytes * w * prefetch)),
                      volt::bench::mib(static_cast<double>(run.peak_ready_bytes)),
                      static_cast<long long>(run.peak_ready_batches));
        }
        std::printf("Peak RSS of this process (every run above): %.0f MiB\n",
                    static_cast<double>(peak_rss_kib()) / 1024.0);
      }
    }

    if (table("overlap")) {
      std::printf("\nThe Trainer's step with a dataset of d ms of CPU per batch and a step that leaves the host idle "
                  "for c ms (a GPU step), 40 steps after 3, median of %lld:\n\n| c (ms) | d (ms) | workers | step (ms) "
                  "| max(c, d / workers) (ms) | ratio | c + d (no workers) |\n|---:|---:|---:|---:|---:|---:|---:|\n",
                  static_cast<long long>(rounds));
      const std::string run_root = root + "_overlap";
      for (const auto& [c, d] : {std::pair<double, double>{20, 40}, {30, 20}, {10, 30}}) {
        for (int64_t w = 0; w <= std::min<int64_t>(cores, 4); ++w) {
          std::vector<double> samples;
          for (int64_t round = 0; round < rounds; ++round) samples.push_back(trainer_step_ms(d, c, w, 43, run_root));
          const double step = volt::bench::median(samples);
          const double bound = w == 0 ? c + d : std::max(c, d / static_cast<double>(w));
          std::printf("| %.0f | %.0f | %lld | %.1f | %.1f | %.2f | %.0f |\n", c, d, static_cast<long long>(w), step,
                      bound, step / bound, c + d);
        }
      }
    }
  });
}
