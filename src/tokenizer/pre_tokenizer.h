// tokenizer.json pre-tokenizers: a normalized section of text → the words the model encodes.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

// Splits `text` and appends the pieces to `out`. `section` is the index of the text's section
// among the pieces the added tokens cut the input into (Metaspace's "first" scheme reads it).
using PreTokenizer =
    std::function<void(std::string_view text, int64_t section, std::vector<std::string>& out)>;

// The pre-tokenizer a tokenizer.json `pre_tokenizer` object describes; an empty function for null.
// Error naming the type for one that is not supported.
PreTokenizer make_pre_tokenizer(const nlohmann::json& config);

// The byte-level alphabet: byte b as the code point GPT-2's byte-level BPE writes it as (UTF-8).
const std::string& byte_level_char(uint8_t byte);

}  // namespace pagoda
