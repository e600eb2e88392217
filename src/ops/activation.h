// Gated activations shared by the CPU and CUDA ops.
#pragma once

namespace pagoda {

// out = act(gate) * up, elementwise.
enum class Activation { kSilu, kGeluTanh };

}  // namespace pagoda
