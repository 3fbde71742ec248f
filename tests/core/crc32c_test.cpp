#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace volt {
namespace {

// RFC 3720 (iSCSI) B.4 test vectors and the standard check value.
TEST(Crc32c, MatchesPublishedVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF), ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<unsigned char>(i), descending[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending.data(), descending.size()), 0x113FDB5Cu);
}

TEST(Crc32c, ExtendsAcrossChunks) {
  std::string text(1000, 'x');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 7 + 3);
  const uint32_t whole = crc32c(text.data(), text.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{333}, size_t{999}}) {
    const uint32_t first = crc32c(text.data(), split);
    EXPECT_EQ(crc32c(text.data() + split, text.size() - split, first), whole) << "split at " << split;
  }
}

TEST(Crc32c, TheInstructionAndTheTablesAgreeAtEveryAlignment) {
  std::vector<unsigned char> bytes(4096 + 16);
  uint32_t state = 12345;
  for (auto& b : bytes) b = static_cast<unsigned char>((state = state * 1103515245u + 12345u) >> 24);
  for (size_t offset = 0; offset < 16; ++offset) {
    for (size_t size : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{4096}}) {
      EXPECT_EQ(crc32c(bytes.data() + offset, size, 0x1234u), detail::crc32c_software(bytes.data() + offset, size, 0x1234u))
          << "offset " << offset << ", size " << size;
    }
  }
}

TEST(Crc32c, CombiningThePartsChecksumsIsTheWholesChecksum) {
  std::vector<unsigned char> bytes(300000);
  uint32_t state = 777;
  for (auto& b : bytes) b = static_cast<unsigned char>((state = state * 1103515245u + 12345u) >> 24);
  for (size_t split : {size_t{0}, size_t{1}, size_t{8}, size_t{4095}, size_t{262144}, bytes.size()}) {
    const uint32_t a = crc32c(bytes.data(), split), b = crc32c(bytes.data() + split, bytes.size() - split);
    EXPECT_EQ(crc32c_combine(a, b, bytes.size() - split), crc32c(bytes.data(), bytes.size())) << "split " << split;
  }
}

TEST(Crc32c, MaskIsTFRecords) {
  // masked_crc32c of the CRC of an empty string, as TensorFlow's record writer computes it.
  EXPECT_EQ(masked_crc32c(crc32c("", 0)), 0xA282EAD8u);
  EXPECT_EQ(masked_crc32c(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xA282EAD8u);
}

}  // namespace
}  // namespace volt
