#pragma once
// The serializable state of anything that has one (optimizer, scheduler, scaler, callback,
// strategy section, the checkpoint itself): an ordered map from names to IValues (tensors,
// numbers, strings, lists, nested dicts). Such trees pickle to plain Python dicts, which is what
// keeps volt's checkpoints readable by torch.load.
#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace volt {

class StateDict {
 public:
  StateDict();
  // Wraps a dict IValue with string keys; throws CheckpointError for anything else, naming `what`.
  static StateDict from_ivalue(const c10::IValue& value, const std::string& what = "state");

  // Inserts or replaces.
  void set(const std::string& key, c10::IValue value);
  void set(const std::string& key, const StateDict& nested) { set(key, nested.to_ivalue()); }
  bool contains(const std::string& key) const;
  // Throws CheckpointError naming the key and the keys present when it is missing.
  c10::IValue at(const std::string& key) const;
  // A nested dict; throws CheckpointError when missing or not a dict.
  StateDict child(const std::string& key) const;
  // Typed reads that throw CheckpointError naming the key and the type found. Lists are accepted
  // in either form: typed (as built in C++) or generic (as read back from a checkpoint file,
  // which stores plain Python lists). get_double also accepts an int.
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  at::Tensor get_tensor(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;
  std::vector<double> get_doubles(const std::string& key) const;
  void erase(const std::string& key);
  size_t size() const { return dict_.size(); }
  bool empty() const { return dict_.size() == 0; }
  std::vector<std::string> keys() const;

  // A new dict holding the same entries: setting or erasing a key in one leaves the other as it
  // is; the values (tensors, nested dicts) are shared.
  StateDict shallow_copy() const { return StateDict(dict_.copy()); }

  // Shares storage with this StateDict (IValue dicts are reference types).
  c10::IValue to_ivalue() const { return c10::IValue(dict_); }

 private:
  explicit StateDict(c10::impl::GenericDict dict) : dict_(std::move(dict)) {}
  c10::impl::GenericDict dict_;
};

}  // namespace volt
