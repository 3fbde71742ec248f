#include "checkpoint/checkpoint_format.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <atomic>
#include <cstring>
#include <algorithm>
#include <map>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/crc32c.h"

namespace volt {
namespace {

// Every CheckpointFileReader::read of this process (CheckpointFileReader::bytes_read_in_process).
std::atomic<uint64_t> process_bytes_read{0};

constexpr const char* kPickleRecord = "data.pkl";
std::string tensor_record(size_t index) { return "data/" + std::to_string(index); }

// The first line of a LibTorch error, without its C++ backtrace.
std::string brief(const c10::Error& error) {
  std::string text = error.what_without_backtrace();
  const auto newline = text.find('\n');
  return newline == std::string::npos ? text : text.substr(0, newline);
}

// What gets pickled: tensors detached and on the CPU, lists and tuples rebuilt as generic
// containers (a typed list would pickle as a call to torch.jit._pickle.build_*list, which
// torch.load(weights_only=True) refuses). Anything that is not plain data is an error.
c10::IValue plain_value(const c10::IValue& value, const std::string& where) {
  if (value.isTensor()) {
    const auto& tensor = value.toTensor();
    if (!tensor.defined()) return c10::IValue();
    return tensor.detach().to(torch::kCPU);
  }
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), c10::AnyType::get());
    for (const auto& entry : dict) {
      const std::string key = entry.key().isString() ? entry.key().toStringRef() : entry.key().tagKind();
      out.insert(entry.key(), plain_value(entry.value(), where + "['" + key + "']"));
    }
    return out;
  }
  if (value.isList()) {
    c10::impl::GenericList out(c10::AnyType::get());
    size_t i = 0;
    for (const auto& element : value.toListRef())
      out.push_back(plain_value(element, where + "[" + std::to_string(i++) + "]"));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& element : value.toTupleRef().elements()) elements.push_back(plain_value(element, where));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  check<CheckpointError>(value.isNone() || value.isBool() || value.isInt() || value.isDouble() || value.isString(),
                         "checkpoint: ", where, " holds a ", value.tagKind(),
                         "; a checkpoint stores only tensors, numbers, bools, strings, None, lists, tuples "
                         "and dicts");
  return value;
}

struct Integrity {
  int64_t format_version = -1;
  uint32_t crc32c = 0;
  uint64_t bytes = 0;
  uint64_t records = 0;
  // Note [Reading parts of a checkpoint]: the CRC of data.pkl alone and of every block of every
  // data record; absent from files of volt before them (then block_bytes is 0).
  uint32_t pickle_crc32c = 0;
  uint64_t block_bytes = 0;
  std::map<uint64_t, std::vector<uint32_t>> block_crcs;  // by record index
};

// The CRC of every block of `size` bytes; `whole` is extended by them (combined, not read twice).
std::vector<uint32_t> block_crcs_of(const void* data, size_t size, uint32_t& whole) {
  std::vector<uint32_t> crcs;
  const auto* bytes = static_cast<const char*>(data);
  for (size_t at = 0; at < size; at += kCheckpointBlockBytes) {
    const size_t length = std::min<size_t>(kCheckpointBlockBytes, size - at);
    crcs.push_back(crc32c(bytes + at, length));
    whole = crc32c_combine(whole, crcs.back(), length);
  }
  return crcs;
}

std::string encode(const Integrity& integrity) {
  std::ostringstream out;
  out << "format_version " << integrity.format_version << "\ncrc32c " << std::hex << integrity.crc32c << std::dec
      << "\nbytes " << integrity.bytes << "\nrecords " << integrity.records << "\npickle_crc32c " << std::hex
      << integrity.pickle_crc32c << std::dec << "\nblock_bytes " << integrity.block_bytes << "\n";
  // One token per record ("<crc>,<crc>,..."), so that a reader that skips unknown keys skips it whole.
  for (const auto& [record, crcs] : integrity.block_crcs) {
    out << "block_crc32c_" << record << " " << std::hex;
    for (size_t i = 0; i < crcs.size(); ++i) out << (i ? "," : "") << crcs[i];
    out << std::dec << (crcs.empty() ? "-" : "") << "\n";
  }
  return out.str();
}

Integrity decode(const std::string& text, const std::string& source) {
  Integrity integrity;
  std::istringstream in(text);
  std::string key;
  bool crc_seen = false, bytes_seen = false, records_seen = false;
  while (in >> key) {
    if (key == "format_version") {
      in >> integrity.format_version;
    } else if (key == "crc32c") {
      in >> std::hex >> integrity.crc32c >> std::dec;
      crc_seen = true;
    } else if (key == "bytes") {
      in >> integrity.bytes;
      bytes_seen = true;
    } else if (key == "records") {
      in >> integrity.records;
      records_seen = true;
    } else if (key == "pickle_crc32c") {
      in >> std::hex >> integrity.pickle_crc32c >> std::dec;
    } else if (key == "block_bytes") {
      in >> integrity.block_bytes;
    } else if (key.rfind("block_crc32c_", 0) == 0) {
      std::string list;
      in >> list;
      try {
        auto& crcs = integrity.block_crcs[std::stoull(key.substr(13))];
        std::istringstream items(list == "-" ? std::string() : list);
        for (std::string item; std::getline(items, item, ',');)
          crcs.push_back(static_cast<uint32_t>(std::stoul(item, nullptr, 16)));
      } catch (const std::logic_error&) {  // std::stoul's invalid_argument and out_of_range
        in.setstate(std::ios::failbit);
      }
    } else {
      std::string ignored;
      in >> ignored;  // a key from a later format version that this one does not need
    }
    check<CheckpointError>(!in.fail(), source, ": the integrity record is damaged (bad value for '", key,
                           "'); the file is corrupt");
  }
  check<CheckpointError>(integrity.format_version >= 1 && crc_seen && bytes_seen && records_seen, source,
                         ": the integrity record is damaged (incomplete: '", text, "'); the file is corrupt");
  return integrity;
}

}  // namespace

void write_checkpoint_archive(const StateDict& state, const ArchiveSink& sink, int64_t format_version) {
  const c10::IValue value = plain_value(state.to_ivalue(), "state");
  try {
    std::string pickle;
    torch::jit::Pickler pickler([&](const char* data, size_t size) { pickle.append(data, size); },
                                /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
                                /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
                                /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(value);
    pickler.stop();

    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) { return sink(data, size); });
    Integrity integrity;
    integrity.format_version = format_version;
    writer.writeRecord(kPickleRecord, pickle.data(), pickle.size());
    integrity.crc32c = crc32c(pickle.data(), pickle.size());
    integrity.pickle_crc32c = integrity.crc32c;
    integrity.block_bytes = kCheckpointBlockBytes;
    integrity.bytes = pickle.size();
    const auto& tensors = pickler.tensorData();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto data = torch::jit::getWriteableTensorData(tensors[i]);
      writer.writeRecord(tensor_record(i), data.data(), data.sizeInBytes());
      integrity.block_crcs[i] = block_crcs_of(data.data(), data.sizeInBytes(), integrity.crc32c);
      integrity.bytes += data.sizeInBytes();
    }
    integrity.records = tensors.size();
    const std::string record = encode(integrity);
    writer.writeRecord(kIntegrityRecord, record.data(), record.size());
    writer.writeEndOfFile();
  } catch (const c10::Error& error) {
    throw CheckpointError("checkpoint: serializing failed: " + brief(error));
  }
}

namespace {

// An archive opened and its integrity record checked (not yet its data).
struct OpenedArchive {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  std::optional<Integrity> integrity;  // none: a plain torch.save file read unverified
  at::DataPtr pickle;
  size_t pickle_size = 0;
};

OpenedArchive open_archive(const std::shared_ptr<caffe2::serialize::ReadAdapterInterface>& input,
                           const std::string& source, bool require_integrity) {
  OpenedArchive archive;
  try {
    archive.reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(input);
  } catch (const c10::Error& error) {
    throw CheckpointError(source + ": not a readable checkpoint: its zip directory is missing or damaged, as in a "
                          "truncated or partly overwritten file (" + brief(error) +
                          "); use another checkpoint or restore this one from a copy");
  }
  try {
    const bool has_integrity = archive.reader->hasRecord(kIntegrityRecord);
    check<CheckpointError>(has_integrity || !require_integrity, source,
                           ": has no volt integrity record, so it was not written by volt or it is damaged; "
                           "volt loads only checkpoints it can verify");
    std::tie(archive.pickle, archive.pickle_size) = archive.reader->getRecord(kPickleRecord);
    if (has_integrity) {
      auto [text_data, text_size] = archive.reader->getRecord(kIntegrityRecord);
      archive.integrity = decode(std::string(static_cast<const char*>(text_data.get()), text_size), source);
      check<CheckpointError>(archive.integrity->format_version <= kCheckpointFormatVersion, source,
                             ": written in checkpoint format version ", archive.integrity->format_version,
                             " by a newer volt; this build reads format versions up to ", kCheckpointFormatVersion,
                             ". Load it with a newer volt");
    }
  } catch (const c10::Error& error) {
    throw CheckpointError(source + ": damaged checkpoint: " + brief(error) +
                          "; use another checkpoint or restore this one from a copy");
  }
  return archive;
}

// Checks the whole file against its CRC; `keep` receives each data record's bytes (it may drop them).
void verify_whole(OpenedArchive& archive, const std::string& source,
                  const std::function<void(uint64_t, at::DataPtr)>& keep) {
  const Integrity& integrity = *archive.integrity;
  try {
    uint32_t crc = crc32c(archive.pickle.get(), archive.pickle_size);
    uint64_t bytes = archive.pickle_size;
    for (uint64_t i = 0; i < integrity.records; ++i) {
      const std::string name = tensor_record(i);
      check<CheckpointError>(archive.reader->hasRecord(name), source, ": record '", name, "' of ", integrity.records,
                             " is missing; the file is damaged");
      auto [data, size] = archive.reader->getRecord(name);
      crc = crc32c(data.get(), size, crc);
      bytes += size;
      keep(i, std::move(data));
    }
    check<CheckpointError>(crc == integrity.crc32c && bytes == integrity.bytes, source,
                           ": checksum mismatch, the content is damaged (crc32c recorded ", std::hex, integrity.crc32c,
                           ", computed ", crc, std::dec, " over ", bytes, " bytes, ", integrity.bytes,
                           " recorded); use another checkpoint or restore this one from a copy");
  } catch (const c10::Error& error) {
    throw CheckpointError(source + ": damaged checkpoint: " + brief(error) +
                          "; use another checkpoint or restore this one from a copy");
  }
}

c10::IValue unpickle(OpenedArchive& archive, const std::string& source,
                     const std::function<at::DataPtr(const std::string&)>& read_record) {
  try {
    size_t position = 0;
    const char* bytes = static_cast<const char*>(archive.pickle.get());
    torch::jit::Unpickler unpickler(
        [&](char* buffer, size_t size) -> size_t {
          size = std::min(size, archive.pickle_size - position);
          std::memcpy(buffer, bytes + position, size);
          position += size;
          return size;
        },
        /*type_resolver=*/nullptr, /*obj_loader=*/nullptr, read_record, c10::Device(torch::kCPU));
    unpickler.set_version(archive.reader->version());
    return unpickler.parse_ivalue();
  } catch (const c10::Error& error) {
    throw CheckpointError(source + ": cannot decode the checkpoint's content: " + brief(error) +
                          "; the file was not written by torch.save or volt, or it is damaged");
  }
}

}  // namespace

StateDict read_checkpoint_archive(const std::shared_ptr<caffe2::serialize::ReadAdapterInterface>& input,
                                  const std::string& source, bool require_integrity) {
  OpenedArchive archive = open_archive(input, source, require_integrity);
  std::map<std::string, at::DataPtr> records;  // data/<i> → bytes, read while verifying
  if (archive.integrity) {
    verify_whole(archive, source,
                 [&](uint64_t i, at::DataPtr data) { records.emplace(std::to_string(i), std::move(data)); });
  }
  const c10::IValue value = unpickle(archive, source, [&](const std::string& name) -> at::DataPtr {
    auto found = records.find(name);
    if (found != records.end()) return std::move(found->second);
    return std::get<0>(archive.reader->getRecord("data/" + name));
  });
  return StateDict::from_ivalue(value, source);
}

CheckpointFileReader::CheckpointFileReader(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> input,
                                           std::string source, uint64_t block_bytes)
    : input_(std::move(input)), source_(std::move(source)), block_bytes_(block_bytes) {}

uint64_t CheckpointFileReader::bytes_read_in_process() { return process_bytes_read.load(); }

void CheckpointFileReader::read(int64_t record, uint64_t offset, uint64_t size, void* destination) const {
  if (size == 0) return;
  const auto found = records_.find(record);
  check<CheckpointError>(found != records_.end() && offset + size <= found->second.size, source_, ": no bytes [",
                         offset, ", ", offset + size, ") in record data/", record, "; the file is damaged");
  const Record& r = found->second;
  auto* out = static_cast<char*>(destination);
  const auto read_exactly = [&](uint64_t at, uint64_t n, char* into) {
    const size_t got = input_->read(r.file_offset + at, into, n, "checkpoint range");
    bytes_read_ += got;
    process_bytes_read += got;
    check<CheckpointError>(got == n, source_, ": ends inside record data/", record,
                           "; the file is truncated: use another checkpoint or restore this one from a copy");
  };
  if (r.block_crcs.empty()) {  // verified whole when opened
    read_exactly(offset, size, out);
    return;
  }
  std::lock_guard<std::mutex> lock(last_mutex_);
  for (uint64_t b = offset / block_bytes_; b * block_bytes_ < offset + size; ++b) {
    const uint64_t begin = b * block_bytes_, length = std::min(block_bytes_, r.size - begin);
    if (last_block_ != std::make_pair(record, b)) {
      last_block_ = {-1, 0};
      last_bytes_.resize(static_cast<size_t>(length));
      read_exactly(begin, length, last_bytes_.data());
      const uint32_t crc = crc32c(last_bytes_.data(), length);
      check<CheckpointError>(crc == r.block_crcs[b], source_, ": checksum mismatch in block ", b, " of record data/",
                             record, " (crc32c recorded ", std::hex, r.block_crcs[b], ", computed ", crc, std::dec,
                             "); the content is damaged: use another checkpoint or restore this one from a copy");
      last_block_ = {record, b};
    }
    const uint64_t from = std::max(begin, offset), to = std::min(begin + length, offset + size);
    std::memcpy(out + (from - offset), last_bytes_.data() + (from - begin), to - from);
  }
}

// Fills a reader's record table (a friend of the reader).
struct LazyArchiveParts {
  static CheckpointFileReader::Record* find(CheckpointFileReader& file, int64_t record) {
    auto it = file.records_.find(record);
    return it == file.records_.end() ? nullptr : &it->second;
  }
  static void add(CheckpointFileReader& file, int64_t record, uint64_t file_offset, uint64_t size,
                  std::vector<uint32_t> block_crcs) {
    file.records_[record] = {file_offset, size, std::move(block_crcs)};
  }
};

namespace {

LazyCheckpoint read_lazily(const std::shared_ptr<caffe2::serialize::ReadAdapterInterface>& input,
                           const std::string& source, const std::vector<std::string>& lazy_sections) {
  {
    OpenedArchive archive = open_archive(input, source, /*require_integrity=*/true);
    Integrity& integrity = *archive.integrity;
    const bool has_blocks = integrity.block_bytes > 0;
    if (has_blocks) {
      const uint32_t crc = crc32c(archive.pickle.get(), archive.pickle_size);
      check<CheckpointError>(crc == integrity.pickle_crc32c, source,
                             ": checksum mismatch in data.pkl (crc32c recorded ", std::hex, integrity.pickle_crc32c,
                             ", computed ", crc, std::dec,
                             "); the content is damaged: use another checkpoint or restore this one from a copy");
    } else {
      verify_whole(archive, source, [](uint64_t, at::DataPtr) {});
    }
    auto file = std::make_shared<CheckpointFileReader>(input, source,
                                                       has_blocks ? integrity.block_bytes : kCheckpointBlockBytes);
    // Every storage comes out of the unpickler without data: its DataPtr's context names its record.
    const c10::IValue value = unpickle(archive, source, [&](const std::string& name) -> at::DataPtr {
      return at::DataPtr(
          nullptr, new std::string(name), [](void* context) { delete static_cast<std::string*>(context); },
          c10::Device(torch::kCPU));
    });
    LazyCheckpoint lazy;
    lazy.file = file;
    std::map<int64_t, torch::Tensor> read_storages;  // records read at once, by record
    const auto record_of = [&](const torch::Tensor& tensor) -> int64_t {
      const auto* name = static_cast<const std::string*>(tensor.storage().data_ptr().get_context());
      VOLT_INTERNAL_ASSERT(name != nullptr, "every storage of a lazily read checkpoint names its record");
      const int64_t record = std::stoll(*name);
      if (LazyArchiveParts::find(*file, record) == nullptr) {
        uint64_t file_offset = 0;
        const uint64_t size = tensor.storage().nbytes();
        try {
          file_offset = archive.reader->getRecordOffset(tensor_record(static_cast<size_t>(record)));
        } catch (const c10::Error& error) {
          throw CheckpointError(source + ": record data/" + *name + " is missing; the file is damaged (" +
                                brief(error) + ")");
        }
        std::vector<uint32_t> block_crcs;
        if (has_blocks) {
          auto crcs = integrity.block_crcs.find(static_cast<uint64_t>(record));
          const uint64_t blocks = (size + integrity.block_bytes - 1) / integrity.block_bytes;
          check<CheckpointError>(crcs != integrity.block_crcs.end() && crcs->second.size() == blocks, source,
                                 ": the integrity record has no block CRCs for record data/", record,
                                 "; the file is damaged");
          block_crcs = crcs->second;
        }
        LazyArchiveParts::add(*file, record, file_offset, size, std::move(block_crcs));
      }
      return record;
    };
    std::function<c10::IValue(const c10::IValue&, bool)> rebuild = [&](const c10::IValue& item,
                                                                       bool lazy_here) -> c10::IValue {
      if (item.isTensor()) {
        const auto& tensor = item.toTensor();
        if (!tensor.defined()) return item;
        const int64_t record = record_of(tensor);
        const auto element = static_cast<uint64_t>(tensor.element_size());
        if (lazy_here && tensor.is_contiguous() && tensor.numel() > 0) {
          auto placeholder = torch::empty(tensor.sizes(), tensor.options().device(torch::kMeta));
          lazy.placeholders.emplace(placeholder.unsafeGetTensorImpl(),
                                    TensorInFile{file, record, static_cast<uint64_t>(tensor.storage_offset()) * element,
                                                 tensor.numel(), tensor.scalar_type()});
          return placeholder;
        }
        auto& storage = read_storages[record];
        if (!storage.defined()) {
          const auto bytes = static_cast<int64_t>(tensor.storage().nbytes());
          storage = torch::empty({bytes}, torch::kUInt8);
          file->read(record, 0, static_cast<uint64_t>(bytes), storage.data_ptr());
        }
        return torch::empty({0}, tensor.options()).set_(storage.storage(), tensor.storage_offset(), tensor.sizes(),
                                                        tensor.strides());
      }
      if (item.isGenericDict()) {
        const auto dict = item.toGenericDict();
        c10::impl::GenericDict out(dict.keyType(), dict.valueType());
        for (const auto& entry : dict) out.insert(entry.key(), rebuild(entry.value(), lazy_here));
        return out;
      }
      if (item.isList()) {
        const auto list = item.toList();
        c10::impl::GenericList out(list.elementType());
        for (const auto& element : list) out.push_back(rebuild(element, lazy_here));
        return out;
      }
      if (item.isTuple()) {
        std::vector<c10::IValue> elements;
        for (const auto& element : item.toTupleRef().elements()) elements.push_back(rebuild(element, lazy_here));
        return c10::ivalue::Tuple::create(std::move(elements));
      }
      return item;
    };
    check<CheckpointError>(value.isGenericDict(), source, ": does not hold a dict");
    c10::impl::GenericDict top = value.toGenericDict();
    c10::impl::GenericDict out(top.keyType(), top.valueType());
    for (const auto& entry : top) {
      const bool lazy_here = entry.key().isString() &&
                             std::find(lazy_sections.begin(), lazy_sections.end(), entry.key().toStringRef()) !=
                                 lazy_sections.end();
      out.insert(entry.key(), rebuild(entry.value(), lazy_here));
    }
    lazy.content = StateDict::from_ivalue(out, source);
    return lazy;
  }
}

}  // namespace

LazyCheckpoint read_checkpoint_archive_lazily(const std::shared_ptr<caffe2::serialize::ReadAdapterInterface>& input,
                                              const std::string& source,
                                              const std::vector<std::string>& lazy_sections) {
  return read_lazily(input, source, lazy_sections);
}

}  // namespace volt
