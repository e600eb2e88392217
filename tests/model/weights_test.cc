#include "model/weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace pagoda {
namespace {

std::string fixture(const std::string& name) {
  return std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name;
}

TEST(WeightsTest, BindsByNameAndShape) {
  WeightSource weights = WeightSource::from_checkpoint(fixture("llama-tiny"));
  const Tensor norm = weights.get("model.norm.weight", {64});
  EXPECT_EQ(norm.dtype(), DType::kF32);
  EXPECT_TRUE(weights.has("lm_head.weight"));
  try {
    weights.get("model.layers.0.self_attn.q_proj.weight", {32, 64});
    FAIL() << "expected a shape error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("q_proj.weight"), std::string::npos) << message;
    EXPECT_NE(message.find("[64, 64]"), std::string::npos) << message;
    EXPECT_NE(message.find("[32, 64]"), std::string::npos) << message;
  }
  try {
    weights.get("model.layers.9.mlp.up_proj.weight", {128, 64});
    FAIL() << "expected a missing-tensor error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("model.layers.9.mlp.up_proj.weight"),
              std::string::npos);
  }
  // Everything not asked for is reported as unused.
  const std::vector<std::string> unused = weights.unused();
  EXPECT_EQ(std::count(unused.begin(), unused.end(), "model.norm.weight"), 0);
  EXPECT_EQ(std::count(unused.begin(), unused.end(), "lm_head.weight"), 1);
}

TEST(WeightsTest, DummyWeightsAreSeededAndShaped) {
  WeightSource a = WeightSource::dummy(DType::kBF16, 42);
  WeightSource b = WeightSource::dummy(DType::kBF16, 42);
  WeightSource c = WeightSource::dummy(DType::kBF16, 43);
  const Tensor x = a.get("w", {300, 700});
  const Tensor y = b.get("w", {300, 700});
  const Tensor z = c.get("w", {300, 700});
  const Tensor other = a.get("v", {300, 700});
  EXPECT_EQ(x.shape(), (Shape{300, 700}));
  EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.numel() * 2), 0);
  EXPECT_NE(std::memcmp(x.raw_data(), z.raw_data(), x.numel() * 2), 0);
  EXPECT_NE(std::memcmp(x.raw_data(), other.raw_data(), x.numel() * 2), 0);
  float max = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    max = std::max(max, std::abs(bf16_to_f32(x.data<uint16_t>()[i])));
  EXPECT_GT(max, 0.01f);
  EXPECT_LE(max, 0.0201f);
  EXPECT_FALSE(a.has("w"));
  EXPECT_THROW(WeightSource::dummy(DType::kI32, 1), Error);
  EXPECT_THROW(parse_load_format("gguf"), Error);
  EXPECT_EQ(parse_load_format("dummy"), LoadFormat::kDummy);
}

}  // namespace
}  // namespace pagoda
