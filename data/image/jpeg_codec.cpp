#include "data/image/jpeg_codec.h"

// jpeglib.h needs size_t and FILE declared first.
#include <csetjmp>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>

#include "core/error.h"

namespace volt::image {
namespace {

// libjpeg reports errors by calling error_exit, which must not return: it jumps back to the
// setjmp of the function that called libjpeg. The functions that do so hold only trivially
// destructible locals between setjmp and their return, so that the jump skips no destructor.
struct ErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jump_on_error(j_common_ptr info) {
  auto* manager = reinterpret_cast<ErrorManager*>(info->err);
  (*info->err->format_message)(info, manager->message);
  std::longjmp(manager->jump, 1);
}

// Warnings (level -1: corrupt data, a premature end of file) are errors here, as in Pillow: libjpeg
// would go on and fill the rest of the image with gray.
void jump_on_warning(j_common_ptr info, int level) {
  if (level < 0) jump_on_error(info);
}

void install(ErrorManager& manager, jpeg_decompress_struct& info) {
  info.err = jpeg_std_error(&manager.base);
  manager.base.error_exit = jump_on_error;
  manager.base.emit_message = jump_on_warning;
  manager.message[0] = '\0';
}

// Runs `work` on a decompressor that has read `bytes`' header. 0 on success, else the message is
// in manager->message. `work` may hold only trivially destructible locals (libjpeg may jump out).
template <typename Work>
int with_decompressor(const std::string& bytes, ErrorManager* manager, void (*work)(jpeg_decompress_struct&, Work&),
                      Work& context) {
  jpeg_decompress_struct info;
  install(*manager, info);
  if (setjmp(manager->jump)) {
    jpeg_destroy_decompress(&info);
    return 1;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  work(info, context);
  jpeg_destroy_decompress(&info);
  return 0;
}

void read_header(jpeg_decompress_struct& info, JpegHeader& header) {
  header.height = info.image_height;
  header.width = info.image_width;
  header.components = info.num_components;
}

// Where decode_region writes: region.height × region.width × channels bytes at `out`, through a
// row buffer as wide as the image.
struct RegionOutput {
  Region region;
  J_COLOR_SPACE space;
  int64_t channels;
  uint8_t* out;
  uint8_t* row;
};

void decode_region(jpeg_decompress_struct& info, RegionOutput& target) {
  const Region& region = target.region;
  info.out_color_space = target.space;
  jpeg_start_decompress(&info);
  // The columns: libjpeg widens them to whole iMCU columns, left to a multiple of the iMCU width.
  // Fancy upsampling of the chroma at a crop's edge repeats the edge sample where a full decode
  // reads the neighbouring one, so the crop asked for reaches one iMCU further on each side than
  // the region (measured: only the crop's first and last columns differ otherwise).
#if JPEG_LIB_VERSION >= 70  // libjpeg 7's API (libjpeg-turbo's jpeg8 builds) scales the two axes apart
  const int64_t imcu = static_cast<int64_t>(info.max_h_samp_factor) * info.min_DCT_h_scaled_size;
#else
  const int64_t imcu = static_cast<int64_t>(info.max_h_samp_factor) * info.min_DCT_scaled_size;
#endif
  const int64_t from = std::max<int64_t>(region.left - imcu, 0);
  const int64_t to = std::min<int64_t>(region.left + region.width + imcu, info.output_width);
  JDIMENSION x = static_cast<JDIMENSION>(from);
  JDIMENSION width = static_cast<JDIMENSION>(to - from);
  if (width < info.output_width) jpeg_crop_scanline(&info, &x, &width);
  const size_t skip = static_cast<size_t>(region.left - static_cast<int64_t>(x)) * static_cast<size_t>(target.channels);
  const size_t keep = static_cast<size_t>(region.width * target.channels);
  if (region.top > 0) jpeg_skip_scanlines(&info, static_cast<JDIMENSION>(region.top));
  for (int64_t y = 0; y < region.height; ++y) {
    JSAMPROW row = target.row;
    // A short read only comes with a premature end of the data, which libjpeg warns about
    // (jump_on_warning turns it into an error) before it returns.
    jpeg_read_scanlines(&info, &row, 1);
    std::memcpy(target.out + static_cast<size_t>(y) * keep, target.row + skip, keep);
  }
  // The rows below the region are not decoded: abort instead of finish (which wants them all).
  jpeg_abort_decompress(&info);
}

}  // namespace

JpegHeader read_jpeg_header(const std::string& bytes, const std::string& name) {
  ErrorManager manager;
  JpegHeader header;
  check<DataError>(with_decompressor(bytes, &manager, read_header, header) == 0, "JPEG: ", name, " cannot be read: ",
                   manager.message);
  return header;
}

Pixels decode_jpeg(const std::string& bytes, const Region& region, ColorMode mode, const std::string& name) {
  const JpegHeader header = read_jpeg_header(bytes, name);
  check<InternalError>(region.top >= 0 && region.left >= 0 && region.height > 0 && region.width > 0 &&
                           region.top + region.height <= header.height && region.left + region.width <= header.width,
                       "decode_jpeg: region outside the ", header.width, "x", header.height, " image ", name);
  Pixels pixels;
  pixels.height = region.height;
  pixels.width = region.width;
  pixels.channels = channels_of(mode);
  pixels.data.resize(static_cast<size_t>(pixels.height * pixels.width * pixels.channels));
  // A row as libjpeg writes it: the whole width at most (the region widened to iMCU columns).
  std::vector<uint8_t> row(static_cast<size_t>(header.width * pixels.channels));
  RegionOutput target{region, mode == ColorMode::RGB ? JCS_RGB : JCS_GRAYSCALE, pixels.channels, pixels.data.data(),
                      row.data()};
  ErrorManager manager;
  const int failed = with_decompressor(bytes, &manager, decode_region, target);
  check<DataError>(failed == 0, "JPEG: ", name, " is corrupt or truncated: ", manager.message);
  return pixels;
}

namespace {

int encode_into(const Pixels* pixels, int quality, unsigned char** out, unsigned long* size, ErrorManager* manager) {
  jpeg_compress_struct info;
  info.err = jpeg_std_error(&manager->base);
  manager->base.error_exit = jump_on_error;
  if (setjmp(manager->jump)) {
    jpeg_destroy_compress(&info);
    return 1;
  }
  jpeg_create_compress(&info);
  jpeg_mem_dest(&info, out, size);
  info.image_width = static_cast<JDIMENSION>(pixels->width);
  info.image_height = static_cast<JDIMENSION>(pixels->height);
  info.input_components = static_cast<int>(pixels->channels);
  info.in_color_space = pixels->channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels->row(info.next_scanline));
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  return 0;
}

}  // namespace

std::string encode_jpeg(const Pixels& pixels, int quality) {
  check<ConfigurationError>(pixels.channels == 1 || pixels.channels == 3, "encode_jpeg: expected 1 or 3 channels, got ",
                            pixels.channels);
  check<ConfigurationError>(quality >= 1 && quality <= 100, "encode_jpeg: expected a quality in [1, 100], got ",
                            quality);
  check<ConfigurationError>(
      pixels.height > 0 && pixels.width > 0 &&
          pixels.data.size() == static_cast<size_t>(pixels.height * pixels.width * pixels.channels),
      "encode_jpeg: expected ", pixels.height, "x", pixels.width, "x", pixels.channels, " bytes, got ",
      pixels.data.size());
  ErrorManager manager;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int failed = encode_into(&pixels, quality, &buffer, &size, &manager);
  std::string bytes;
  if (failed == 0) bytes.assign(reinterpret_cast<const char*>(buffer), size);
  std::free(buffer);
  check<DataError>(failed == 0, "encode_jpeg: ", manager.message);
  return bytes;
}

}  // namespace volt::image
