// Reads rotary embedding parameters from a config: transformers v5's rope_parameters, or the older
// rope_theta + rope_scaling.
#pragma once

#include "model/config_reader.h"
#include "ops/rope.h"

namespace pagoda {

// `head_size` and the fraction that rotates (partial_rotary_factor) set the rotary dim. Throws
// Error naming an unsupported rope_type.
RopeParams read_rope_params(const ConfigReader& text, int64_t head_size, double default_theta);

// The same from one rope object, such as rope_parameters["full_attention"] of configs that give
// one per layer type. Fields missing there fall back to the top-level config.
RopeParams parse_rope_object(const ConfigReader& text, const nlohmann::json& rope,
                             int64_t head_size, double default_theta);

}  // namespace pagoda
