#include "trainer/state_dict.h"

#include "trainer/error.h"

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

void StateDict::erase(const std::string& key) { dict_.erase(key); }

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  for (const auto& entry : dict_) out.push_back(entry.key().toStringRef());
  return out;
}

}  // namespace volt
