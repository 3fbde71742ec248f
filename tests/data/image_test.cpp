// The image stack (data/image): partial JPEG decoding gives the pixels of a full decode; the
// resampling is ATen's antialiased bilinear filter (_upsample_bilinear2d_aa, torchvision's
// Resize), also through crops, flips and chains of transforms (Note [Cropping before decoding]);
// torchvision's crop arithmetic; ImageFolderDataset's layout, batches and errors.
#include <gtest/gtest.h>

#include <png.h>

#include <filesystem>
#include <fstream>

#include "data/image/image_folder_dataset.h"
#include "data/image/jpeg_codec.h"
#include "data/image/png_codec.h"
#include "data/image/transforms.h"
#include "tests/support/test_support.h"
#include "trainer/volt.h"

namespace volt::testing {
namespace {

using image::ColorMode;
using image::Image;
using image::Pixels;

// A smooth random image with some texture: JPEG codes it like a photograph (not a flat field).
Pixels test_pixels(int64_t height, int64_t width, int64_t channels, uint64_t seed, double noise = 55) {
  auto g = at::detail::createCPUGenerator(seed);
  auto low = torch::rand({1, channels, height / 8 + 2, width / 8 + 2}, g) * 200;
  auto smooth = torch::nn::functional::interpolate(
      low, torch::nn::functional::InterpolateFuncOptions().size(std::vector<int64_t>{height, width}).mode(torch::kBilinear).align_corners(false));
  auto noisy = (smooth + torch::rand({1, channels, height, width}, g) * noise).clamp(0, 255).to(torch::kUInt8);
  auto hwc = noisy[0].permute({1, 2, 0}).contiguous();
  Pixels pixels{height, width, channels, {}};
  pixels.data.assign(hwc.data_ptr<uint8_t>(), hwc.data_ptr<uint8_t>() + hwc.numel());
  return pixels;
}

torch::Tensor as_tensor(const Pixels& p) {  // C × H × W float, 0..255
  return torch::from_blob(const_cast<uint8_t*>(p.data.data()), {p.height, p.width, p.channels}, torch::kUInt8)
      .permute({2, 0, 1})
      .to(torch::kFloat);
}

// ATen's antialiased bilinear resize of a C × H × W float tensor.
torch::Tensor aten_resize(const torch::Tensor& chw, int64_t height, int64_t width) {
  return at::_upsample_bilinear2d_aa(chw.unsqueeze(0), {height, width}, /*align_corners=*/false)[0];
}

torch::Tensor chw_of(Image image) {
  torch::Tensor out = torch::empty({image.channels(), image.height(), image.width()});
  image.write_chw(out.data_ptr<float>());
  return out * 255;
}

std::shared_ptr<const std::string> jpeg_of(const Pixels& pixels, int quality = 90) {
  return std::make_shared<const std::string>(image::encode_jpeg(pixels, quality));
}

TEST(Jpeg, APartialDecodeGivesThePixelsOfAFullDecode) {
  for (const int64_t channels : {3, 1}) {
    const auto bytes = jpeg_of(test_pixels(251, 333, channels, 1));
    const ColorMode mode = channels == 3 ? ColorMode::RGB : ColorMode::Gray;
    const Pixels full = image::decode_jpeg(*bytes, {0, 0, 251, 333}, mode, "test.jpg");
    const auto whole = as_tensor(full);
    SampleRandom random(0, 0, channels);
    for (int trial = 0; trial < 40; ++trial) {
      const int64_t top = random.integer(0, 250), left = random.integer(0, 332);
      const int64_t height = random.integer(1, 251 - top + 1), width = random.integer(1, 333 - left + 1);
      const Pixels part = image::decode_jpeg(*bytes, {top, left, height, width}, mode, "test.jpg");
      ASSERT_EQ(part.height, height);
      ASSERT_EQ(part.width, width);
      EXPECT_TRUE(as_tensor(part).equal(whole.slice(1, top, top + height).slice(2, left, left + width)))
          << channels << " channels, region " << width << "x" << height << " at (" << left << ", " << top << ")";
    }
  }
}

TEST(Jpeg, EncodedImagesDecodeCloseToTheirPixels) {
  // A smooth image (JPEG drops fine chroma detail: 4:2:0).
  const Pixels pixels = test_pixels(64, 48, 3, 2, /*noise=*/0);
  const Pixels decoded = image::decode_jpeg(*jpeg_of(pixels, 95), {0, 0, 64, 48}, ColorMode::RGB, "x.jpg");
  EXPECT_LT((as_tensor(decoded) - as_tensor(pixels)).abs().mean().item<double>(), 4.0);  // swapped channels: ~60
}

TEST(Jpeg, CorruptAndTruncatedFilesAreErrorsNamingThem) {
  const auto bytes = jpeg_of(test_pixels(64, 64, 3, 3));
  const std::string truncated = bytes->substr(0, bytes->size() / 2);
  auto message = error_message_of<DataError>(
      [&] { image::decode_jpeg(truncated, {0, 0, 64, 64}, ColorMode::RGB, "/data/cat/half.jpg"); });
  EXPECT_NE(message.find("/data/cat/half.jpg is corrupt or truncated"), std::string::npos) << message;
  message = error_message_of<DataError>([&] { image::read_jpeg_header("not a jpeg", "/data/cat/x.jpg"); });
  EXPECT_NE(message.find("/data/cat/x.jpg cannot be read"), std::string::npos) << message;
}

TEST(Resample, ResizesAsATenDoesWhetherShrinkingOrGrowing) {
  const Pixels pixels = test_pixels(97, 131, 3, 4);
  const auto source = as_tensor(pixels);
  for (const auto& [h, w] : {std::pair<int64_t, int64_t>{32, 40}, {97, 131}, {200, 150}, {7, 300}, {224, 224}}) {
    Image image = Image::from_pixels(pixels);
    image.resize(h, w);
    const auto got = chw_of(image);
    const auto want = aten_resize(source, h, w);
    EXPECT_LT((got - want).abs().max().item<double>(), 2e-3) << w << "x" << h;
  }
}

TEST(Resample, CropsFlipsAndResizesComposeAsTheyWouldOneAfterTheOther) {
  const Pixels pixels = test_pixels(120, 160, 3, 5);
  const auto source = as_tensor(pixels);
  // A crop, then a resize: the filter stops at the crop's edges (torchvision's RandomResizedCrop).
  Image a = Image::from_pixels(pixels);
  a.crop({10, 20, 70, 90});
  a.resize(33, 47);
  EXPECT_LT((chw_of(a) - aten_resize(source.slice(1, 10, 80).slice(2, 20, 110), 33, 47)).abs().max().item<double>(), 2e-3);
  // A resize, then a crop: output pixels of the resize (Resize then CenterCrop).
  Image b = Image::from_pixels(pixels);
  b.resize(90, 120);
  b.crop({5, 11, 64, 64});
  EXPECT_LT((chw_of(b) - aten_resize(source, 90, 120).slice(1, 5, 69).slice(2, 11, 75)).abs().max().item<double>(), 2e-3);
  // A flip before a crop mirrors the crop's place; a flip after a resize mirrors the result.
  Image c = Image::from_pixels(pixels);
  c.flip_horizontal();
  c.crop({0, 30, 120, 50});
  c.resize(40, 25);
  const auto flipped = source.flip({2});
  EXPECT_LT((chw_of(c) - aten_resize(flipped.slice(2, 30, 80), 40, 25)).abs().max().item<double>(), 2e-3);
  // A second resize reads the first one's pixels, rounded to bytes (ATen's, up to a rounding
  // tipped by the last bits of a value at a half).
  Image d = Image::from_pixels(pixels);
  d.resize(60, 80);
  Image first_only = d;
  const auto first = as_tensor(first_only.pixels());
  EXPECT_LE((first - aten_resize(source, 60, 80).round()).abs().max().item<double>(), 1.0);
  d.resize(30, 30);
  EXPECT_LT((chw_of(d) - aten_resize(first, 30, 30)).abs().max().item<double>(), 2e-3);
}

TEST(Resample, AJpegCropResizedFromItsPartialDecodeEqualsTheFullDecodesResult) {
  const auto bytes = jpeg_of(test_pixels(300, 400, 3, 6));
  const auto full = as_tensor(image::decode_jpeg(*bytes, {0, 0, 300, 400}, ColorMode::RGB, "x.jpg"));
  Image lazy = Image::from_file_bytes(bytes, "x.jpg", ColorMode::RGB);
  lazy.crop({37, 101, 150, 211});
  lazy.resize(64, 64);
  const auto want = aten_resize(full.slice(1, 37, 187).slice(2, 101, 312), 64, 64);
  EXPECT_LT((chw_of(lazy) - want).abs().max().item<double>(), 2e-3);
}

TEST(Transforms, FollowTorchvisionsArithmetic) {
  SampleRandom random(0, 0, 0);
  Image image = Image::from_pixels(test_pixels(50, 75, 1, 7));
  image::Resize(20).apply(image, random);  // shorter side 20, longer int(20 * 75 / 50)
  EXPECT_EQ(image.height(), 20);
  EXPECT_EQ(image.width(), 30);
  Image odd = Image::from_pixels(test_pixels(11, 11, 1, 7));
  image::CenterCrop(4).apply(odd, random);  // top-left round(3.5) = 4 (Python rounds halves to even)
  const auto cropped = chw_of(odd);
  EXPECT_TRUE(torch::allclose(cropped, as_tensor(test_pixels(11, 11, 1, 7)).slice(1, 4, 8).slice(2, 4, 8), 0, 1e-4));
  const auto error = error_message_of<DataError>([&] { image::CenterCrop(12).apply(odd, random); });
  EXPECT_NE(error.find("smaller than the 12x12 crop"), std::string::npos) << error;
  // RandomResizedCrop's crops stay within its bounds: area fraction in scale, ratio in ratio.
  const image::RandomResizedCrop crop(224);
  int64_t fallbacks = 0;
  for (int64_t i = 0; i < 500; ++i) {
    SampleRandom r(1, 0, i);
    const image::Region region = crop.crop_for(375, 500, r);
    ASSERT_TRUE(region.top >= 0 && region.left >= 0 && region.top + region.height <= 375 &&
                region.left + region.width <= 500);
    const double area = static_cast<double>(region.height * region.width) / (375.0 * 500.0);
    const double ratio = static_cast<double>(region.width) / static_cast<double>(region.height);
    if (region.height == 375 && region.width == 500) {
      ++fallbacks;
      continue;
    }
    EXPECT_TRUE(area > 0.07 && area < 1.01) << area;
    EXPECT_TRUE(ratio > 0.74 && ratio < 1.35) << ratio;
    SampleRandom again(1, 0, i);
    const image::Region same = crop.crop_for(375, 500, again);
    EXPECT_EQ(same.top, region.top);
    EXPECT_EQ(same.width, region.width);
  }
  EXPECT_LT(fallbacks, 5);
}

TEST(Transforms, APipelineNormalizesLikeToTensorThenNormalize) {
  const Pixels pixels = test_pixels(40, 30, 3, 8);
  const image::ImagePipeline pipeline{{image::Normalize({0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f})}};
  SampleRandom random(0, 0, 0);
  const auto got = pipeline(Image::from_pixels(pixels), random);
  const auto mean = torch::tensor({0.485f, 0.456f, 0.406f}).view({3, 1, 1});
  const auto std = torch::tensor({0.229f, 0.224f, 0.225f}).view({3, 1, 1});
  EXPECT_TRUE(torch::allclose(got, (as_tensor(pixels) / 255 - mean) / std, 1e-5, 1e-5));
  EXPECT_FALSE(pipeline.fixed_size().has_value());
  const image::ImagePipeline cropping{{image::RandomResizedCrop(24, 32, {0.08, 1.0}, {0.75, 1.333}),
                                       image::RandomHorizontalFlip()}};
  EXPECT_EQ(*cropping.fixed_size(), (std::array<int64_t, 2>{24, 32}));
}

// root/<class>/... with JPEG and PNG files; returns the root.
void write_file(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string png_bytes(const Pixels& pixels) {
  // libpng's simplified writer, through a temporary file read back.
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(pixels.width);
  image.height = static_cast<png_uint_32>(pixels.height);
  image.format = pixels.channels == 4 ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data.data(), 0, nullptr);
  std::string bytes(size, '\0');
  EXPECT_NE(png_image_write_to_memory(&image, bytes.data(), &size, 0, pixels.data.data(), 0, nullptr), 0);
  bytes.resize(size);
  return bytes;
}

TEST(ImageFolder, ClassesAreSortedFoldersAndFilesAreSortedWithinThem) {
  TemporaryDirectory dir;
  const std::string root = dir.path();
  write_file(root + "/zebra/2.jpg", image::encode_jpeg(test_pixels(30, 40, 3, 1)));
  write_file(root + "/zebra/1.JPG", image::encode_jpeg(test_pixels(30, 40, 3, 2)));
  write_file(root + "/ant/deeper/3.jpeg", image::encode_jpeg(test_pixels(30, 40, 3, 3)));
  write_file(root + "/ant/notes.txt", "not an image");
  Pixels rgba = test_pixels(30, 40, 3, 4);
  Pixels with_alpha{30, 40, 4, {}};
  for (size_t i = 0; i < rgba.data.size() / 3; ++i) {
    with_alpha.data.insert(with_alpha.data.end(), {rgba.data[3 * i], rgba.data[3 * i + 1], rgba.data[3 * i + 2], 7});
  }
  write_file(root + "/ant/4.png", png_bytes(with_alpha));
  ImageFolderDataset dataset(root);
  EXPECT_EQ(dataset.classes(), (std::vector<std::string>{"ant", "zebra"}));
  ASSERT_EQ(dataset.size(), 4);
  EXPECT_EQ(dataset.path(0), root + "/ant/4.png");
  EXPECT_EQ(dataset.path(1), root + "/ant/deeper/3.jpeg");
  EXPECT_EQ(dataset.path(2), root + "/zebra/1.JPG");
  EXPECT_EQ(dataset.class_of(1), 0);
  EXPECT_EQ(dataset.class_of(3), 1);
  SampleRandom random(0, 0, 0);
  // The PNG's alpha is dropped, its colours kept.
  const Sample png = dataset.get(0, random);
  EXPECT_TRUE(torch::allclose(png.input * 255, as_tensor(rgba), 0, 1e-3));
  EXPECT_EQ(png.target.item<int64_t>(), 0);
}

TEST(ImageFolder, ABatchIsWrittenInPlaceAsItsSamplesWouldStackWithAnyNumberOfWorkers) {
  TemporaryDirectory dir;
  for (int64_t i = 0; i < 18; ++i) {
    write_file(dir.file("c" + std::to_string(i % 3) + "/" + std::to_string(i) + ".jpg"),
               image::encode_jpeg(test_pixels(40 + i, 60 - i, 3, static_cast<uint64_t>(i))));
  }
  ImageFolderOptions options;
  options.transform = image::ImagePipeline{{image::RandomResizedCrop(16), image::RandomHorizontalFlip(),
                                            image::Normalize({0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f})}};
  auto dataset = std::make_shared<ImageFolderDataset>(dir.path(), options);
  const BatchRequest request{{5, 0, 17, 3}, 2, 9};
  const Batch batch = dataset->get_batch(request);
  ASSERT_EQ(batch.input.sizes(), (std::vector<int64_t>{4, 3, 16, 16}));
  for (size_t i = 0; i < 4; ++i) {
    SampleRandom random = request.random(i);
    const Sample sample = dataset->get(request.indices[i], random);
    EXPECT_TRUE(batch.input[static_cast<int64_t>(i)].equal(sample.input)) << "position " << i;
    EXPECT_EQ(batch.target[static_cast<int64_t>(i)].item<int64_t>(), sample.target.item<int64_t>());
  }
  DataLoader serial(dataset, {.batch_size = 4, .shuffle = true, .seed = 1});
  DataLoader threaded(dataset, {.batch_size = 4, .shuffle = true, .seed = 1, .num_workers = 3});
  BatchStream a = serial.stream(0, serial.num_batches()), b = threaded.stream(0, threaded.num_batches());
  while (a.has_next()) EXPECT_TRUE(a.next().input.equal(b.next().input));
}

TEST(ImageFolder, BadFoldersAndFilesAreErrorsNamingThem) {
  TemporaryDirectory dir;
  auto message = error_message_of<DataError>([&] { ImageFolderDataset(dir.file("missing")); });
  EXPECT_NE(message.find(dir.file("missing") + " is not a directory"), std::string::npos) << message;
  message = error_message_of<DataError>([&] { ImageFolderDataset(dir.path()); });
  EXPECT_NE(message.find("has no class folders"), std::string::npos) << message;
  std::filesystem::create_directories(dir.file("empty"));
  write_file(dir.file("full/a.jpg"), image::encode_jpeg(test_pixels(20, 20, 3, 1)));
  message = error_message_of<DataError>([&] { ImageFolderDataset(dir.path()); });
  EXPECT_NE(message.find("the class folder " + dir.file("empty") + " has no image files"), std::string::npos) << message;
  std::filesystem::remove(dir.file("empty"));

  // A corrupt file, read on a worker: the error names the file and the sample.
  write_file(dir.file("full/b.jpg"), "\xFF\xD8\xFF garbage");
  write_file(dir.file("full/c.jpg"), image::encode_jpeg(test_pixels(20, 20, 3, 3)));
  ImageFolderOptions options;
  options.transform = image::ImagePipeline{{image::CenterCrop(8)}};
  auto dataset = std::make_shared<ImageFolderDataset>(dir.path(), options);
  DataLoader loader(dataset, {.batch_size = 3, .num_workers = 2});
  BatchStream stream = loader.stream(0, 1);
  message = error_message_of<DataError>([&] { stream.next(); });
  EXPECT_NE(message.find("sample 1 (position 1 of its batch, epoch 0): JPEG: " + dir.file("full/b.jpg")),
            std::string::npos)
      << message;

  // skip_unreadable leaves it out of its batch, counts it and says so once.
  options.skip_unreadable = true;
  auto skipping = std::make_shared<ImageFolderDataset>(dir.path(), options);
  ::testing::internal::CaptureStderr();
  const Batch batch = skipping->get_batch({{0, 1, 2}});
  skipping->get_batch({{1, 2}});
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(batch.size(), 2);
  EXPECT_EQ(skipping->skipped(), 2);
  EXPECT_NE(warnings.find("skipping sample 1"), std::string::npos) << warnings;
  EXPECT_EQ(warnings.find("skipping sample 1", warnings.find("skipping sample 1") + 1), std::string::npos) << warnings;
}

}  // namespace
}  // namespace volt::testing
