#pragma once

namespace volt {

// How values from several ranks combine. Mean is Sum divided by the number of ranks.
enum class ReduceOp { Sum, Mean, Max, Min };

// "sum", "mean", "max" or "min": how errors and descriptions name `op`.
inline const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

}  // namespace volt
