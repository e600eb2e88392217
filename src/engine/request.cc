#include "engine/request.h"

namespace pagoda {

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

double SamplerRng::uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1p-53;
}

Request::Request(int64_t id, std::vector<int32_t> prompt_token_ids, SamplingParams params,
                 uint64_t stream_seed)
    : id(id),
      params(std::move(params)),
      token_ids(std::move(prompt_token_ids)),
      num_prompt_tokens(static_cast<int64_t>(token_ids.size())),
      rng(stream_seed),
      draft_rng(stream_seed ^ 0x5bd1e9955bd1e995ull) {
  if (this->params.prompt_logprobs) prompt_logprobs.assign(1, std::nullopt);
}

std::vector<SampledToken> Request::output_tokens() const {
  std::vector<SampledToken> tokens;
  const std::span<const int32_t> ids = output_token_ids();
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    tokens.push_back({ids[i], output_logprobs[i].logprob, output_logprobs[i].top});
  return tokens;
}

}  // namespace pagoda
