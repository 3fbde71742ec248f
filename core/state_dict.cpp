#include "core/state_dict.h"

#include "core/error.h"

namespace volt {

StateDict::StateDict() : dict_(c10::StringType::get(), c10::AnyType::get()) {}

StateDict StateDict::from_ivalue(const c10::IValue& value, const std::string& what) {
  check<CheckpointError>(value.isGenericDict(), what, ": expected a dict, got ", value.tagKind());
  auto dict = value.toGenericDict();
  for (const auto& entry : dict) {
    check<CheckpointError>(entry.key().isString(), what, ": expected string keys, got a ",
                           entry.key().tagKind(), " key");
  }
  return StateDict(dict);
}

void StateDict::set(const std::string& key, c10::IValue value) { dict_.insert_or_assign(key, std::move(value)); }

bool StateDict::contains(const std::string& key) const { return dict_.contains(key); }

c10::IValue StateDict::at(const std::string& key) const {
  auto found = dict_.find(key);
  if (found == dict_.end()) {
    std::string present;
    for (const auto& k : keys()) present += (present.empty() ? "" : ", ") + k;
    throw CheckpointError("state: expected key '" + key + "', present: [" + present + "]");
  }
  return found->value();
}

StateDict StateDict::child(const std::string& key) const { return from_ivalue(at(key), "state['" + key + "']"); }

namespace {

[[noreturn]] void wrong_type(const std::string& key, const char* expected, const c10::IValue& value) {
  throw CheckpointError(std::string("state['") + key + "']: expected " + expected + ", got " +
                        value.tagKind() + "; the checkpoint was written by other code or is damaged");
}

// The elements of a list IValue, typed (List[float]) or generic (a plain Python list).
template <typename T, typename Convert>
std::vector<T> list_elements(const std::string& key, const c10::IValue& value, const char* expected,
                             Convert convert) {
  if (!value.isList()) wrong_type(key, expected, value);
  std::vector<T> out;
  for (const c10::IValue& element : value.toListRef()) out.push_back(convert(element));
  return out;
}

}  // namespace

int64_t StateDict::get_int(const std::string& key) const {
  const auto value = at(key);
  if (!value.isInt()) wrong_type(key, "an int", value);
  return value.toInt();
}

double StateDict::get_double(const std::string& key) const {
  const auto value = at(key);
  if (value.isInt()) return static_cast<double>(value.toInt());
  if (!value.isDouble()) wrong_type(key, "a float", value);
  return value.toDouble();
}

bool StateDict::get_bool(const std::string& key) const {
  const auto value = at(key);
  if (!value.isBool()) wrong_type(key, "a bool", value);
  return value.toBool();
}

std::string StateDict::get_string(const std::string& key) const {
  const auto value = at(key);
  if (!value.isString()) wrong_type(key, "a string", value);
  return value.toStringRef();
}

at::Tensor StateDict::get_tensor(const std::string& key) const {
  const auto value = at(key);
  if (!value.isTensor()) wrong_type(key, "a tensor", value);
  return value.toTensor();
}

std::vector<int64_t> StateDict::get_ints(const std::string& key) const {
  const auto value = at(key);
  return list_elements<int64_t>(key, value, "a list of ints", [&](const c10::IValue& e) {
    if (!e.isInt()) wrong_type(key, "a list of ints", e);
    return e.toInt();
  });
}

std::vector<double> StateDict::get_doubles(const std::string& key) const {
  const auto value = at(key);
  return list_elements<double>(key, value, "a list of floats", [&](const c10::IValue& e) {
    if (e.isInt()) return static_cast<double>(e.toInt());
    if (!e.isDouble()) wrong_type(key, "a list of floats", e);
    return e.toDouble();
  });
}

void StateDict::erase(const std::string& key) { (void)dict_.erase(key); }

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  for (const auto& entry : dict_) out.push_back(entry.key().toStringRef());
  return out;
}

}  // namespace volt
