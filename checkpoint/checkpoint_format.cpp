#include "checkpoint/checkpoint_format.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <cstring>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/crc32c.h"

namespace volt {
namespace {

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
    for (const auto& element : value.toListRef()) out.push_back(plain_value(element, where + "[" + std::to_string(i++) + "]"));
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
};

std::string encode(const Integrity& integrity) {
  std::ostringstream out;
  out << "format_version " << integrity.format_version << "\ncrc32c " << std::hex << integrity.crc32c << std::dec
      << "\nbytes " << integrity.bytes << "\nrecords " << integrity.records << "\n";
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
    integrity.bytes = pickle.size();
    const auto& tensors = pickler.tensorData();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto data = torch::jit::getWriteableTensorData(tensors[i]);
      writer.writeRecord(tensor_record(i), data.data(), data.sizeInBytes());
      integrity.crc32c = crc32c(data.data(), data.sizeInBytes(), integrity.crc32c);
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

StateDict read_checkpoint_archive(const std::shared_ptr<caffe2::serialize::ReadAdapterInterface>& input,
                                  const std::string& source, bool require_integrity) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(input);
  } catch (const c10::Error& error) {
    throw CheckpointError(source + ": not a readable checkpoint: its zip directory is missing or damaged, as in a "
                          "truncated or partly overwritten file (" + brief(error) +
                          "); use another checkpoint or restore this one from a copy");
  }
  std::map<std::string, at::DataPtr> records;  // data/<i> → bytes, read while verifying
  at::DataPtr pickle;
  size_t pickle_size = 0;
  try {
    const bool has_integrity = reader->hasRecord(kIntegrityRecord);
    check<CheckpointError>(has_integrity || !require_integrity, source,
                           ": has no volt integrity record, so it was not written by volt or it is damaged; "
                           "volt loads only checkpoints it can verify");
    std::tie(pickle, pickle_size) = reader->getRecord(kPickleRecord);
    if (has_integrity) {
      auto [text_data, text_size] = reader->getRecord(kIntegrityRecord);
      const Integrity integrity = decode(std::string(static_cast<const char*>(text_data.get()), text_size), source);
      check<CheckpointError>(integrity.format_version <= kCheckpointFormatVersion, source,
                             ": written in checkpoint format version ", integrity.format_version,
                             " by a newer volt; this build reads format versions up to ", kCheckpointFormatVersion,
                             ". Load it with a newer volt");
      uint32_t crc = crc32c(pickle.get(), pickle_size);
      uint64_t bytes = pickle_size;
      for (uint64_t i = 0; i < integrity.records; ++i) {
        const std::string name = tensor_record(i);
        check<CheckpointError>(reader->hasRecord(name), source, ": record '", name, "' of ", integrity.records,
                               " is missing; the file is damaged");
        auto [data, size] = reader->getRecord(name);
        crc = crc32c(data.get(), size, crc);
        bytes += size;
        records.emplace(std::to_string(i), std::move(data));
      }
      check<CheckpointError>(crc == integrity.crc32c && bytes == integrity.bytes, source,
                             ": checksum mismatch, the content is damaged (crc32c recorded ", std::hex,
                             integrity.crc32c, ", computed ", crc, std::dec, " over ", bytes, " bytes, ",
                             integrity.bytes, " recorded); use another checkpoint or restore this one from a copy");
    }
  } catch (const c10::Error& error) {
    throw CheckpointError(source + ": damaged checkpoint: " + brief(error) +
                          "; use another checkpoint or restore this one from a copy");
  }

  c10::IValue value;
  try {
    size_t position = 0;
    const char* bytes = static_cast<const char*>(pickle.get());
    torch::jit::Unpickler unpickler(
        [&](char* buffer, size_t size) -> size_t {
          size = std::min(size, pickle_size - position);
          std::memcpy(buffer, bytes + position, size);
          position += size;
          return size;
        },
        /*type_resolver=*/nullptr, /*obj_loader=*/nullptr,
        [&](const std::string& name) -> at::DataPtr {
          auto found = records.find(name);
          if (found != records.end()) return std::move(found->second);
          return std::get<0>(reader->getRecord("data/" + name));
        },
        c10::Device(torch::kCPU));
    unpickler.set_version(reader->version());
    value = unpickler.parse_ivalue();
  } catch (const c10::Error& error) {
    throw CheckpointError(source + ": cannot decode the checkpoint's content: " + brief(error) +
                          "; the file was not written by torch.save or volt, or it is damaged");
  }
  return StateDict::from_ivalue(value, source);
}

}  // namespace volt
