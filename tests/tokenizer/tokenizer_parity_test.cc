// pagoda's tokenizer against Hugging Face's JavaScript tokenizers on real tokenizer files: the
// same ids, with and without special tokens, and the same decoded text for 100% of the corpus.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/tokenizer/peer_data.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

using testing::peer_output;

class TokenizerParityTest : public ::testing::TestWithParam<const char*> {};

std::string show(const std::vector<int32_t>& ids) {
  return nlohmann::json(ids).dump();
}

TEST_P(TokenizerParityTest, MatchesThePeerOnTheCorpus) {
  const std::string name = GetParam();
  const std::string data = peer_output("tokenize-" + name + ".jsonl");
  std::ifstream file(data);
  ASSERT_TRUE(file) << data;
  const Tokenizer& tokenizer = testing::peer_tokenizer(name);
  int64_t cases = 0, failures = 0;
  std::string line;
  while (std::getline(file, line)) {
    const nlohmann::json expected = nlohmann::json::parse(line);
    const std::string text = expected["text"].get<std::string>();
    const auto ids = expected["ids"].get<std::vector<int32_t>>();
    const auto plain = expected["ids_plain"].get<std::vector<int32_t>>();
    ++cases;
    const std::vector<int32_t> got = tokenizer.encode(text);
    const std::vector<int32_t> got_plain = tokenizer.encode(text, {.add_special_tokens = false});
    std::string problem;
    if (got != ids) {
      problem = "ids " + show(got) + " != " + show(ids);
    } else if (got_plain != plain) {
      problem = "ids without special tokens " + show(got_plain) + " != " + show(plain);
    } else if (tokenizer.decode(ids) != expected["decoded"].get<std::string>()) {
      problem = "decoded " + nlohmann::json(tokenizer.decode(ids)).dump() +
                " != " + expected["decoded"].dump();
    } else if (tokenizer.decode(ids, {.skip_special_tokens = true}) !=
               expected["decoded_skip"].get<std::string>()) {
      problem = "decoded skipping special tokens " +
                nlohmann::json(tokenizer.decode(ids, {.skip_special_tokens = true})).dump() +
                " != " + expected["decoded_skip"].dump();
    }
    if (!problem.empty() && ++failures <= 5) {
      ADD_FAILURE() << name << ": text " << nlohmann::json(text).dump() << ": " << problem;
    }
  }
  EXPECT_GE(cases, 2000);
  EXPECT_EQ(failures, 0) << "of " << cases << " strings";
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, TokenizerParityTest,
                         ::testing::ValuesIn(testing::kPeerTokenizers));

}  // namespace
}  // namespace pagoda
