// tokenizer.json post-processors: the special tokens wrapped around an encoded text.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pagoda {

// Adds the special tokens around the ids of an encoded text when `add_special_tokens`.
using PostProcessor =
    std::function<std::vector<int32_t>(std::vector<int32_t> ids, bool add_special_tokens)>;
// A token's id; Error when the vocabulary lacks it.
using TokenLookup = std::function<int32_t(const std::string& token)>;

// The post-processor a tokenizer.json `post_processor` object describes; an empty function for
// null. Error naming the type for one that is not supported or a token the vocabulary lacks.
PostProcessor make_post_processor(const nlohmann::json& config, const TokenLookup& lookup);

}  // namespace pagoda
