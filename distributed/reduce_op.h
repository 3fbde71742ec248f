#pragma once

namespace volt {

// How values from several ranks combine. Mean is Sum divided by the number of ranks.
enum class ReduceOp { Sum, Mean, Max, Min };

}  // namespace volt
