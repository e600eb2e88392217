#include "model/layers/rope_config.h"

#include <cmath>

#include "core/error.h"

namespace pagoda {
namespace {

double number_or(const nlohmann::json& object, const char* key, double fallback) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number()) fail("rope field '{}' must be a number; got {}", key, it->dump());
  return it->get<double>();
}

}  // namespace

RopeParams read_rope_params(const ConfigReader& text, int64_t head_size, double default_theta) {
  nlohmann::json rope = nlohmann::json::object();
  if (text.has("rope_parameters")) {
    rope = text.raw().at("rope_parameters");
  } else if (text.has("rope_scaling")) {
    rope = text.raw().at("rope_scaling");
  }
  return parse_rope_object(text, rope, head_size, default_theta);
}

RopeParams parse_rope_object(const ConfigReader& text, const nlohmann::json& scaling,
                             int64_t head_size, double default_theta) {
  if (!scaling.is_object()) {
    fail("{}: rope parameters must be an object; got {}", text.source(), scaling.dump());
  }
  RopeParams params;
  params.head_size = head_size;
  params.theta =
      number_or(scaling, "rope_theta", number_or(text.raw(), "rope_theta", default_theta));
  const double partial = number_or(scaling, "partial_rotary_factor",
                                   number_or(text.raw(), "partial_rotary_factor", 1.0));
  if (!(partial > 0.0 && partial <= 1.0)) {
    fail("{}: partial_rotary_factor is {}; it must be in (0, 1]", text.source(), partial);
  }
  params.partial_rotary_factor = partial;
  params.rotary_dim = static_cast<int64_t>(std::floor(head_size * partial));
  params.rotary_dim -= params.rotary_dim % 2;
  if (params.rotary_dim < 2) {
    fail("{}: no dims left to rotate (head size {})", text.source(), head_size);
  }
  if (!(params.theta > 0.0)) {
    fail("{}: rope_theta is {}; it must be positive", text.source(), params.theta);
  }

  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (scaling.contains(key) && scaling.at(key).is_string()) {
      type = scaling.at(key).get<std::string>();
      break;
    }
  }
  if (type == "default") {
    params.scaling = RopeScaling::kNone;
  } else if (type == "linear") {
    params.scaling = RopeScaling::kLinear;
    params.factor = number_or(scaling, "factor", 1.0);
  } else if (type == "proportional") {
    params.scaling = RopeScaling::kProportional;
    params.factor = number_or(scaling, "factor", 1.0);
    params.rotary_dim = head_size;  // pairs span the whole head; the unrotated ones get angle 0
  } else if (type == "llama3") {
    params.scaling = RopeScaling::kLlama3;
    params.factor = number_or(scaling, "factor", 8.0);
    params.low_freq_factor = number_or(scaling, "low_freq_factor", 1.0);
    params.high_freq_factor = number_or(scaling, "high_freq_factor", 4.0);
    params.original_max_position = number_or(scaling, "original_max_position_embeddings", 8192.0);
    if (!(params.high_freq_factor > params.low_freq_factor)) {
      fail("{}: llama3 rope needs high_freq_factor > low_freq_factor; got {} and {}", text.source(),
           params.high_freq_factor, params.low_freq_factor);
    }
  } else {
    fail(
        "{}: rope_type '{}' is not supported; pagoda supports default, linear, llama3 and "
        "proportional",
        text.source(), type);
  }
  if (!(params.factor > 0.0)) {
    fail("{}: rope factor is {}; it must be positive", text.source(), params.factor);
  }
  // Rotation turns pairs of dims: proportional rope spans the whole head, which must pair up.
  if (params.rotary_dim % 2 != 0) {
    fail("{}: {} rope rotates the whole head, whose size {} is odd", text.source(), type,
         head_size);
  }
  return params;
}

}  // namespace pagoda
