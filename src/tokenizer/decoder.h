// tokenizer.json decoders: token strings → text pieces, then joined.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace pagoda {

// Turns token strings into text pieces (a chain of decoders each maps pieces to pieces).
using Decoder = std::function<std::vector<std::string>(std::vector<std::string>)>;

// The decoder a tokenizer.json `decoder` object describes; an empty function for null. The
// byte-level decoder passes `added_tokens` through unchanged. Error naming the type for one that
// is not supported.
Decoder make_decoder(const nlohmann::json& config,
                     const std::unordered_set<std::string>& added_tokens);

// Removes the spaces English tokenizers put before punctuation and contractions (" ." → ".",
// " n't" → "n't", ...), as `clean_up_tokenization_spaces` asks.
std::string clean_up_tokenization_spaces(std::string_view text);

}  // namespace pagoda
