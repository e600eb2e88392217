#include "engine/speculative_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "engine/cache_config.h"

namespace pagoda {
namespace {

constexpr std::string_view kFlag = "--speculative-config";

// Where the assistant of `target_dir` is when the config names none.
std::string find_assistant(const std::string& target_dir) {
  std::string dir = target_dir;
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  for (const std::string& candidate : {dir + "/assistant", dir + "-assistant"}) {
    if (path_exists(candidate + "/config.json")) return candidate;
  }
  fail("{}: no \"model\" given, and no assistant at '{}/assistant' or '{}-assistant'", kFlag, dir,
       dir);
}

SpeculativeMethod parse_method(const nlohmann::json& value) {
  if (value == "mtp") return SpeculativeMethod::kMtp;
  if (value == "draft_model") return SpeculativeMethod::kDraftModel;
  fail("{}: \"method\" must be \"mtp\" or \"draft_model\", not {}", kFlag,
       value.is_primitive() ? value.dump().substr(0, 40) : std::string(value.type_name()));
}

}  // namespace

std::string_view speculative_method_name(SpeculativeMethod method) {
  return method == SpeculativeMethod::kMtp ? "mtp" : "draft_model";
}

SpeculativeConfig parse_speculative_config(std::string_view json, const std::string& target_dir,
                                           const ModelConfig& target) {
  const nlohmann::json fields = parse_json_text(json, kFlag);
  if (!fields.is_object()) fail("{}: must be a JSON object", kFlag);
  for (const auto& [key, value] : fields.items()) {
    if (key != "method" && key != "model" && key != "num_speculative_tokens" &&
        key != "kv_cache_dtype") {
      fail(
          "{}: unknown field \"{}\" (known: method, model, num_speculative_tokens, "
          "kv_cache_dtype)",
          kFlag, key.substr(0, 60));
    }
  }
  SpeculativeConfig config;
  if (!fields.contains("num_speculative_tokens")) {
    fail("{}: give \"num_speculative_tokens\", the drafts per step (1..{})", kFlag,
         kMaxSpeculativeTokens);
  }
  config.num_speculative_tokens =
      json_integer(fields["num_speculative_tokens"], 1, kMaxSpeculativeTokens,
                   std::string(kFlag) + ": \"num_speculative_tokens\"");
  std::optional<SpeculativeMethod> method;
  if (fields.contains("method")) method = parse_method(fields["method"]);
  if (fields.contains("model")) {
    if (!fields["model"].is_string()) fail("{}: \"model\" must be a directory", kFlag);
    config.model_dir = fields["model"].get<std::string>();
  } else if (method.value_or(SpeculativeMethod::kMtp) == SpeculativeMethod::kMtp) {
    config.model_dir = find_assistant(target_dir);
  } else {
    fail("{}: \"draft_model\" needs \"model\", the draft model's directory", kFlag);
  }
  config.drafter = load_model_config(config.model_dir);

  // A drafter that reads the target's cache drafts from its hidden states: that is "mtp".
  const SpeculativeMethod inferred =
      config.drafter.needs_target() ? SpeculativeMethod::kMtp : SpeculativeMethod::kDraftModel;
  if (method && *method != inferred) {
    fail("{}: \"method\" is \"{}\", but {} ({}) is {}", kFlag, speculative_method_name(*method),
         config.model_dir, config.drafter.architecture,
         inferred == SpeculativeMethod::kMtp
             ? "an \"mtp\" drafter: it reads the target's KV cache"
             : "a \"draft_model\" drafter: it has KV layers of its own");
  }
  config.method = inferred;
  if (fields.contains("kv_cache_dtype")) {
    const std::string what = std::string(kFlag) + ": \"kv_cache_dtype\"";
    if (!fields["kv_cache_dtype"].is_string()) fail("{} must be a string", what);
    config.kv_cache_dtype = parse_kv_cache_dtype(fields["kv_cache_dtype"].get<std::string>(), what);
    if (config.kv_cache_dtype && config.method == SpeculativeMethod::kMtp) {
      fail("{}: {} reads the target's KV cache and keeps none of its own, so it has no KV dtype",
           what, config.model_dir);
    }
  }
  if (config.drafter.vocab_size != target.vocab_size) {
    fail("{}: the vocabularies differ: the target has {} tokens, the drafter {}", kFlag,
         target.vocab_size, config.drafter.vocab_size);
  }
  if (config.method == SpeculativeMethod::kMtp) {
    // The assistant reads the target's last hidden state: it is built for one hidden size.
    const nlohmann::json& backbone = config.drafter.file_config.value(
        "backbone_hidden_size", nlohmann::json(config.drafter.hidden_size));
    if (!backbone.is_number_integer() || backbone.get<int64_t>() != target.hidden_size) {
      fail("{}: the assistant is built for a target of hidden size {}, the target's is {}", kFlag,
           backbone.dump().substr(0, 40), target.hidden_size);
    }
  }
  return config;
}

}  // namespace pagoda
