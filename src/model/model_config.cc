#include "model/model_config.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "model/arch/arch_configs.h"
#include "model/architectures.h"

namespace pagoda {
namespace {

// The row of the architecture a config names: its first "architectures" entry, else the one its
// model_type implies.
const Architecture& architecture_of(const ConfigReader& config) {
  std::string name;
  if (auto names = config.optional_string_list("architectures"); names && !names->empty()) {
    name = names->front();
    for (const Architecture& arch : architectures()) {
      if (name == arch.name) return arch;
    }
  } else if (auto model_type = config.optional_string("model_type")) {
    name = "model_type " + *model_type;
    for (const Architecture& arch : architectures()) {
      if (*model_type == arch.model_type) return arch;
    }
  } else {
    fail(
        "{}: neither 'architectures' nor 'model_type' is set, so the architecture is unknown; "
        "supported: {}",
        config.source(), fmt::join(supported_architectures(), ", "));
  }
  fail("{}: unsupported architecture '{}'; supported: {}", config.source(), name,
       fmt::join(supported_architectures(), ", "));
}

std::optional<DType> read_dtype(const ConfigReader& config) {
  for (const char* key : {"dtype", "torch_dtype"}) {
    if (auto name = config.optional_string(key)) {
      std::optional<DType> dtype;
      try {
        dtype = parse_dtype(*name);
      } catch (const Error&) {
      }
      if (!dtype || !is_floating(*dtype)) {
        config.fail_field(key, "is '" + *name + "'; expected float32, float16 or bfloat16");
      }
      return dtype;
    }
  }
  return std::nullopt;
}

// Per-layer heads and head sizes come from several fields and overrides; bound them once here.
void check_layer_shape(const ConfigReader& config, const LayerAttentionConfig& layer) {
  for (const int64_t value :
       {layer.num_q_heads, layer.num_kv_heads, layer.head_size_k, layer.head_size_v}) {
    if (value < 1 || value > kMaxHeadsOrHeadSize) {
      fail("{}: layer {} has heads {}/{} and head sizes {}/{}; each must be in [1, {}]",
           config.source(), layer.name, layer.num_q_heads, layer.num_kv_heads, layer.head_size_k,
           layer.head_size_v, kMaxHeadsOrHeadSize);
    }
  }
  // Kernels take a window as a 32-bit count; no context comes near this one.
  constexpr int64_t kMaxSlidingWindow = int64_t{1} << 30;
  if (layer.kind == AttentionKind::kSliding &&
      (layer.sliding_window < 1 || layer.sliding_window > kMaxSlidingWindow)) {
    fail("{}: layer {} has a sliding window of {} tokens; it must be in [1, 2^30]", config.source(),
         layer.name, layer.sliding_window);
  }
}

// Adds `config`'s eos_token_id (an id or a list) to model.eos_token_ids, each id once. Error for
// an id outside the vocabulary.
void add_eos_token_ids(const ConfigReader& config, ModelConfig& model) {
  if (!config.has("eos_token_id")) return;
  const std::vector<int64_t> ids = config.raw().at("eos_token_id").is_array()
                                       ? *config.optional_integer_list("eos_token_id")
                                       : std::vector<int64_t>{config.integer("eos_token_id")};
  for (const int64_t id : ids) {
    if (id < 0 || id >= model.vocab_size) {
      fail("{}: eos_token_id {} is outside the vocabulary (ids 0..{})", config.source(), id,
           model.vocab_size - 1);
    }
    if (std::find(model.eos_token_ids.begin(), model.eos_token_ids.end(), id) ==
        model.eos_token_ids.end()) {
      model.eos_token_ids.push_back(id);
    }
  }
}

}  // namespace

std::string_view attention_kind_name(AttentionKind kind) {
  return kind == AttentionKind::kFull ? "full" : "sliding";
}

bool ModelConfig::needs_target() const {
  for (const LayerAttentionConfig& layer : layers) {
    if (layer.kv_source == KvSource::kTargetLastOfKind) return true;
  }
  return false;
}

bool QuantizationConfig::quantizes(const std::string& name) const {
  if (!fp8) return false;
  for (const std::string& entry : ignored) {
    if (entry.empty()) continue;
    // entry names the module, an enclosing one, or a trailing part of its dotted name.
    for (size_t at = name.find(entry); at != std::string::npos; at = name.find(entry, at + 1)) {
      const size_t end = at + entry.size();
      if ((at == 0 || name[at - 1] == '.') && (end == name.size() || name[end] == '.')) {
        return false;
      }
    }
  }
  return true;
}

QuantizationConfig parse_quantization(const nlohmann::json& json, const std::string& source) {
  QuantizationConfig quantization;
  const ConfigReader config(json, source);
  if (!config.has("quantization_config")) return quantization;
  const ConfigReader q = config.child("quantization_config");
  const std::string method = q.string("quant_method");
  if (method != "fp8") {
    q.fail_field("quant_method", "is '" + method + "'; pagoda runs only \"fp8\" checkpoints");
  }
  if (const auto fmt = q.optional_string("fmt"); fmt && *fmt != "e4m3") {
    q.fail_field("fmt", "is '" + *fmt + "'; pagoda runs FP8 as e4m3 only");
  }
  if (const auto scheme = q.optional_string("activation_scheme");
      scheme && *scheme != "dynamic" && *scheme != "static") {
    q.fail_field("activation_scheme", "is '" + *scheme + "'; expected dynamic or static");
  } else {
    quantization.static_activations = scheme == "static";
  }
  quantization.fp8 = true;
  quantization.stored = true;
  if (const auto block = q.optional_integer_list("weight_block_size")) {
    // Published blocks are 128 x 128; the bound keeps the kernels' 32-bit block arithmetic exact.
    constexpr int64_t kMaxBlock = int64_t{1} << 16;
    if (block->size() != 2 || (*block)[0] < 1 || (*block)[1] < 1 || (*block)[0] > kMaxBlock ||
        (*block)[1] > kMaxBlock) {
      q.fail_field("weight_block_size", "must be two integers [rows, columns] in [1, 65536]");
    }
    quantization.block_rows = (*block)[0];
    quantization.block_cols = (*block)[1];
  } else {
    quantization.per_tensor = true;
  }
  for (const char* key : {"modules_to_not_convert", "ignored_layers"}) {
    if (const auto names = q.optional_string_list(key)) {
      quantization.ignored.insert(quantization.ignored.end(), names->begin(), names->end());
    }
  }
  return quantization;
}

QuantizationConfig resolve_quantization(const QuantizationConfig& checkpoint,
                                        const std::string& flag) {
  if (flag.empty() || flag == "auto") return checkpoint;
  if (flag == "none") {
    if (checkpoint.stored) fail("--quantization none: the checkpoint's weights are stored in FP8");
    return QuantizationConfig{};
  }
  if (flag != "fp8") fail("unknown --quantization '{}'; expected auto, fp8 or none", flag);
  if (checkpoint.fp8) return checkpoint;
  QuantizationConfig quantization;
  quantization.fp8 = true;
  quantization.ignored = checkpoint.ignored;
  return quantization;
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const Architecture& arch : architectures())
    names.emplace_back(arch.name);
  return names;
}

ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source) {
  const ConfigReader config(json, source);
  const Architecture& arch = architecture_of(config);
  const ConfigReader text =
      arch.nested_text_config || config.has("text_config") ? config.child("text_config") : config;
  ModelConfig model;
  model.source = source;
  model.architecture = arch.name;
  model.model_type = config.optional_string("model_type")
                         .value_or(text.optional_string("model_type").value_or(arch.model_type));
  model.dtype = read_dtype(text);
  if (!model.dtype) model.dtype = read_dtype(config);
  model.max_position_embeddings = text.positive("max_position_embeddings");
  model.vocab_size = text.positive("vocab_size", INT32_MAX);  // token ids are int32
  model.hidden_size = text.positive("hidden_size");
  model.text_config = text.raw();
  model.file_config = json;
  model.quantization = parse_quantization(json, source);
  for (const ConfigReader* reader : {&text, &config}) {
    if (model.eos_token_ids.empty()) add_eos_token_ids(*reader, model);
  }
  arch.read_layers(text, model);
  for (const LayerAttentionConfig& layer : model.layers)
    check_layer_shape(config, layer);
  return model;
}

void read_generation_config(const nlohmann::json& json, const std::string& source,
                            ModelConfig& model) {
  if (!json.is_object()) fail("{}: expected a JSON object", source);
  const ConfigReader config(json, source);
  add_eos_token_ids(config, model);
  GenerationDefaults& defaults = model.generation;
  const auto number = [&](const char* key, double low, double high) -> std::optional<double> {
    if (!config.has(key)) return std::nullopt;
    return config.number_in(key, low, low, high);
  };
  defaults.temperature = number("temperature", 0.0, 1e6);
  defaults.top_p = number("top_p", 1e-9, 1.0);
  defaults.min_p = number("min_p", 0.0, 1.0);
  defaults.repetition_penalty = number("repetition_penalty", 1e-9, 1e6);
  if (const std::optional<int64_t> top_k = config.optional_integer("top_k")) {
    if (*top_k < -1) config.fail_field("top_k", "must be -1, 0 (every token) or positive");
    defaults.top_k = *top_k;
  }
  if (config.has("max_new_tokens")) defaults.max_new_tokens = config.positive("max_new_tokens");
}

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  ModelConfig model = parse_model_config(read_json_file(path), path);
  const std::string generation = model_dir + "/generation_config.json";
  if (path_exists(generation))
    read_generation_config(read_json_file(generation), generation, model);
  return model;
}

std::string attention_layer_name(int64_t index) {
  return fmt::format("model.layers.{}.self_attn", index);
}

std::vector<AttentionKind> parse_layer_types(const ConfigReader& text, int64_t num_layers) {
  const auto types = text.optional_string_list("layer_types");
  PAGODA_CHECK(types.has_value(), "parse_layer_types needs layer_types");
  if (static_cast<int64_t>(types->size()) != num_layers) {
    text.fail_field("layer_types", fmt::format("has {} entries; num_hidden_layers is {}",
                                               types->size(), num_layers));
  }
  std::vector<AttentionKind> kinds;
  for (const std::string& type : *types) {
    if (type == "full_attention") {
      kinds.push_back(AttentionKind::kFull);
    } else if (type == "sliding_attention") {
      kinds.push_back(AttentionKind::kSliding);
    } else {
      text.fail_field("layer_types",
                      "has entry '" + type + "'; expected full_attention or sliding_attention");
    }
  }
  return kinds;
}

int64_t read_num_layers(const ConfigReader& text) {
  return text.positive("num_hidden_layers", kMaxLayers);
}

HeadCounts read_head_counts(const ConfigReader& text, const std::string& q_key,
                            const std::string& kv_key) {
  HeadCounts heads;
  heads.num_q_heads = text.positive(q_key);
  heads.num_kv_heads = text.positive_or(kv_key, heads.num_q_heads);
  if (heads.num_q_heads % heads.num_kv_heads != 0) {
    text.fail_field(q_key, fmt::format("is {}, which is not a multiple of {} = {}",
                                       heads.num_q_heads, kv_key, heads.num_kv_heads));
  }
  return heads;
}

}  // namespace pagoda
