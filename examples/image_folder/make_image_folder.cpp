// The image example's setup step: writes Fashion-MNIST's IDX files out as an ImageFolder of JPEG
// files, OUT/{train,test}/<class name>/<index>.jpg (28x28 grayscale), which examples/image_folder
// then decodes every epoch, as a real image dataset is read:
//   build/examples/make_image_folder --out /tmp/fashion_mnist_jpeg [--data-dir ...] [--limit N]
#include <boost/program_options.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "data/image/jpeg_codec.h"
#include "fashion_mnist/idx_reader.h"
#include "trainer/volt.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

// Fashion-MNIST's labels 0..9, as folder names (ImageFolder numbers the classes by sorted name).
const char* const kClasses[] = {"t-shirt_top", "trouser", "pullover", "dress", "coat",
                                "sandal",      "shirt",   "sneaker",  "bag",   "ankle_boot"};

int64_t write_split(const std::string& data_dir, const std::string& split, const std::string& out, int64_t limit,
                    int quality) {
  const auto images = fashion_mnist::read_idx(data_dir + "/" + split + "-images-idx3-ubyte.gz");
  const auto labels = fashion_mnist::read_idx(data_dir + "/" + split + "-labels-idx1-ubyte.gz");
  const int64_t n = limit > 0 ? std::min(limit, images.size(0)) : images.size(0);
  const std::string folder = out + "/" + (split == "train" ? "train" : "test");
  for (const char* name : kClasses) fs::create_directories(folder + "/" + name);
  for (int64_t i = 0; i < n; ++i) {
    volt::image::Pixels pixels{28, 28, 1, {}};
    const auto image = images[i].contiguous();
    pixels.data.assign(image.data_ptr<uint8_t>(), image.data_ptr<uint8_t>() + 28 * 28);
    const int64_t label = labels[i].item<int64_t>();
    std::ofstream(folder + "/" + kClasses[label] + "/" + std::to_string(i) + ".jpg", std::ios::binary)
        << volt::image::encode_jpeg(pixels, quality);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&](volt::ProcessLauncher&) {
    std::string data_dir = "/usr/share/datasets/fashion-mnist", out;
    int64_t limit = 0;
    int quality = 95;
    po::options_description description("make_image_folder");
    description.add_options()("help", "this text")(
        "data-dir", po::value(&data_dir)->default_value(data_dir), "directory with the four *-ubyte.gz files")(
        "out", po::value(&out)->required(), "where to write train/ and test/")(
        "limit", po::value(&limit)->default_value(limit), "images per split (0: all 60000 + 10000)")(
        "quality", po::value(&quality)->default_value(quality), "JPEG quality, 1..100");
    po::variables_map values;
    po::store(po::parse_command_line(argc, argv, description), values);
    if (values.count("help")) {
      std::cout << description;
      return;
    }
    po::notify(values);
    const int64_t train = write_split(data_dir, "train", out, limit, quality);
    const int64_t test = write_split(data_dir, "t10k", out, limit, quality);
    std::cout << "make_image_folder: " << train << " training and " << test << " test images as JPEG files in " << out
              << std::endl;
  });
}
