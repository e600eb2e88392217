// Rotary position embeddings: parameters, inverse frequencies, and the CPU rotation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace pagoda {

// kProportional (Gemma 4 full layers): every dim pairs with the one half a head away, exponents use
// the whole head size, and only the first partial_rotary_factor share of pairs has a non-zero
// frequency; the rest pass through.
enum class RopeScaling { kNone, kLinear, kLlama3, kProportional };

struct RopeParams {
  int64_t head_size = 0;
  int64_t rotary_dim = 0;  // the first rotary_dim dims of each head rotate (partial rotary)
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;                    // linear and llama3
  double low_freq_factor = 1.0;           // llama3
  double high_freq_factor = 4.0;          // llama3
  double original_max_position = 8192.0;  // llama3
  double partial_rotary_factor = 1.0;     // proportional: the share of pairs that rotate
};

// One inverse frequency per rotated pair, computed in f32 as the reference implementation does.
std::vector<float> rope_inverse_frequencies(const RopeParams& params);

// Rotates x [tokens, heads, head_size] in place by each token's position, NeoX style: the pair of
// dim i is (i, i + rotary_dim / 2). positions has one entry per token.
void apply_rope_cpu(const std::vector<float>& inverse_frequencies, int64_t rotary_dim,
                    const std::vector<int64_t>& positions, const Tensor& x);

}  // namespace pagoda
