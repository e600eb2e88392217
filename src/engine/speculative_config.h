// --speculative-config, in vLLM's spelling: which drafter proposes tokens, and how many a step.
// Read and checked against the target before any weight loads, so that a pair that cannot run is
// refused at startup with one line naming the reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "model/model_config.h"

namespace pagoda {

enum class SpeculativeMethod {
  kMtp,         // a drafter that reads the target's KV cache and owns none (the Gemma 4 assistant)
  kDraftModel,  // a drafter with KV layers of its own in the target's pool
};

std::string_view speculative_method_name(SpeculativeMethod method);  // "mtp", "draft_model"

inline constexpr int64_t kMaxSpeculativeTokens = 16;

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kMtp;
  std::string model_dir;  // the drafter's checkpoint directory
  ModelConfig drafter;
  int64_t num_speculative_tokens = 0;  // K: drafts proposed per step, 1..kMaxSpeculativeTokens
  // A draft model's KV dtype where it differs from the target's (a bf16 drafter beside an FP8
  // target, in one pool); nullopt: the target's.
  std::optional<DType> kv_cache_dtype;
};

// Parses `json` ({"method": "mtp" | "draft_model", "model": DIR, "num_speculative_tokens": K,
// "kv_cache_dtype": D}) for the target in `target_dir`. "method" is inferred from the drafter's
// config when absent (a drafter that reads the target's cache is "mtp"); "model" may be left out
// for "mtp" when the assistant is `target_dir`/assistant or the sibling `target_dir`-assistant.
// Error naming the reason for: malformed JSON, unknown fields, K outside 1..16, a missing drafter,
// a method that contradicts the drafter, vocabularies that differ, an assistant built for another
// hidden size, or a KV dtype that is not one (or is given for an assistant, which keeps no KV of
// its own).
SpeculativeConfig parse_speculative_config(std::string_view json, const std::string& target_dir,
                                           const ModelConfig& target);

}  // namespace pagoda
