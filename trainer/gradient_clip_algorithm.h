#pragma once
// How gradients are clipped (TrainerOptions::gradient_clip_algorithm, Module::clip_gradients):
// by their total norm, or each value.

namespace volt {

enum class GradientClipAlgorithm { Norm, Value };

}  // namespace volt
