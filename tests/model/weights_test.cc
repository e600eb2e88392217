#include "model/weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "ops/cpu/ops.h"
#include "scratch_dir.h"
#include "source_paths.h"

namespace pagoda {
namespace {

using testing::fixture;

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

// Integer tensors are read as such, and refused where a weight is wanted: at load, naming the
// tensor, not inside a kernel.
TEST(WeightsTest, DtypesAreCheckedAtLoad) {
  const testing::ScratchDir scratch("weights_dtypes");
  const std::string& dir = scratch.path();
  const nlohmann::json header = {
      {"ids", {{"dtype", "I64"}, {"shape", {3}}, {"data_offsets", {0, 24}}}},
      {"mask", {{"dtype", "I32"}, {"shape", {2}}, {"data_offsets", {24, 32}}}}};
  const std::string text = header.dump();
  const uint64_t length = text.size();
  const int64_t ids[3] = {2, 0, 1};
  const int32_t mask[2] = {1, 0};
  {
    std::ofstream file(dir + "/model.safetensors", std::ios::binary);
    file.write(reinterpret_cast<const char*>(&length), 8);
    file << text;
    file.write(reinterpret_cast<const char*>(ids), sizeof(ids));
    file.write(reinterpret_cast<const char*>(mask), sizeof(mask));
  }
  WeightSource weights = WeightSource::from_checkpoint(dir);
  EXPECT_EQ(weights.get_int64("ids", {3}), (std::vector<int64_t>{2, 0, 1}));
  try {
    weights.get("mask", {2});
    ADD_FAILURE() << "an I32 weight was accepted";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'mask' is int32"), std::string::npos) << message;
  }
  EXPECT_EQ(WeightSource::dummy(DType::kBF16, 1).get_int64("ids", {3}),
            (std::vector<int64_t>{0, 1, 2}));
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

// A slice (a rank's shard) holds exactly that part of the whole tensor, from a checkpoint and from
// dummy weights alike; a slice outside the shape is refused naming the tensor.
TEST(WeightsTest, SlicesAreThatPartOfTheWholeTensor) {
  const auto equal = [](const Tensor& a, const Tensor& b) {
    const Tensor x = a.contiguous(), y = b.contiguous();
    return x.shape() == y.shape() && x.dtype() == y.dtype() &&
           std::memcmp(x.raw_data(), y.raw_data(), x.numel() * x.element_size()) == 0;
  };
  const std::string name = "model.layers.0.self_attn.o_proj.weight";
  WeightSource whole = WeightSource::from_checkpoint(fixture("llama-tiny"));
  const Tensor full = whole.get(name, {64, 64});
  for (const WeightSlice slice : {WeightSlice{0, 16, 32}, WeightSlice{1, 48, 16}}) {
    WeightSource part = WeightSource::from_checkpoint(fixture("llama-tiny"));
    const Tensor got = part.get(name, {64, 64}, slice);
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_TRUE(equal(got, full.narrow(slice.dim, slice.begin, slice.length)))
        << "dim " << slice.dim;
  }
  WeightSource dummy_whole = WeightSource::dummy(DType::kBF16, 5);
  const Tensor dummy_full = dummy_whole.get("w", {3, 70000, 4});
  for (const WeightSlice slice :
       {WeightSlice{0, 1, 2}, WeightSlice{1, 65530, 20}, WeightSlice{2, 3, 1}}) {
    WeightSource dummy_part = WeightSource::dummy(DType::kBF16, 5);
    EXPECT_TRUE(equal(dummy_part.get("w", {3, 70000, 4}, slice),
                      dummy_full.narrow(slice.dim, slice.begin, slice.length)))
        << "dim " << slice.dim;
  }
  WeightSource bad = WeightSource::from_checkpoint(fixture("llama-tiny"));
  try {
    bad.get(name, {64, 64}, {1, 60, 8});
    FAIL() << "expected a slice error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(name), std::string::npos) << error.what();
  }
  EXPECT_THROW(bad.get("model.norm.weight", {64}, {1, 0, 8}), Error);
}

// An FP8 checkpoint's projection comes back as stored: e4m3 values and their block scales, also
// for a rank's rows (scales expanded per row where the cut is inside a block) and columns (on a
// block boundary only); read as a plain weight, it is refused.
TEST(WeightsTest, ReadsFp8Projections) {
  const std::string dir = fixture("llama-fp8-tiny");
  const ModelConfig config = load_model_config(dir);
  ASSERT_TRUE(config.quantization.stored);
  const std::string name = "model.layers.0.self_attn.o_proj.weight";
  WeightSource weights = WeightSource::from_checkpoint(dir);
  weights.set_quantization(config.quantization);
  const Weight whole = weights.get_weight(name, {64, 64});
  ASSERT_TRUE(whole.quantized());
  EXPECT_EQ(whole.values.dtype(), DType::kF8E4M3);
  EXPECT_EQ(whole.scales.shape(), (Shape{2, 2}));
  EXPECT_EQ(whole.block_rows, 32);
  std::vector<float> expected(64 * 64);
  dequantize_rows(whole, 0, 64, expected.data());
  const auto check = [&](const Weight& part, const WeightSlice& slice) {
    std::vector<float> got(part.rows() * part.cols());
    dequantize_rows(part, 0, part.rows(), got.data());
    for (int64_t r = 0; r < part.rows(); ++r) {
      for (int64_t c = 0; c < part.cols(); ++c) {
        const int64_t row = r + (slice.dim == 0 ? slice.begin : 0);
        const int64_t col = c + (slice.dim == 1 ? slice.begin : 0);
        ASSERT_EQ(got[r * part.cols() + c], expected[row * 64 + col]) << r << ", " << c;
      }
    }
  };
  for (const WeightSlice slice : {WeightSlice{0, 16, 32}, WeightSlice{1, 32, 32}}) {
    WeightSource part = WeightSource::from_checkpoint(dir);
    part.set_quantization(config.quantization);
    check(part.get_weight(name, {64, 64}, slice), slice);
  }
  WeightSource misaligned = WeightSource::from_checkpoint(dir);
  misaligned.set_quantization(config.quantization);
  try {
    misaligned.get_weight(name, {64, 64}, {1, 16, 16});
    ADD_FAILURE() << "a column slice inside a block was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("inside a block of 32 columns"), std::string::npos)
        << error.what();
  }
  WeightSource plain = WeightSource::from_checkpoint(dir);
  try {
    plain.get(name, {64, 64});
    ADD_FAILURE() << "an FP8 tensor was read as a plain weight";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("FP8"), std::string::npos) << error.what();
  }
}

// --quantization fp8 on a plain checkpoint: each projection is quantize_fp8 of the stored tensor
// in the config's blocks, on the host; modules the config leaves out, and plain get(), stay as
// stored.
TEST(WeightsTest, QuantizesProjectionsAtLoad) {
  QuantizationConfig quantization = resolve_quantization({}, "fp8");
  quantization.block_rows = quantization.block_cols = 32;
  quantization.ignored = {"model.layers.1"};
  WeightSource weights = WeightSource::from_checkpoint(fixture("llama-tiny"));
  weights.set_quantization(quantization);
  WeightSource reference = WeightSource::from_checkpoint(fixture("llama-tiny"));
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  const Weight got = weights.get_weight(name, {64, 128});
  const Weight expected = quantize_fp8(reference.get(name, {64, 128}), 32, 32);
  ASSERT_TRUE(got.quantized());
  EXPECT_EQ(std::memcmp(got.values.raw_data(), expected.values.raw_data(), 64 * 128), 0);
  EXPECT_EQ(std::memcmp(got.scales.raw_data(), expected.scales.raw_data(), 2 * 4 * 4), 0);
  EXPECT_FALSE(weights.get_weight("model.layers.1.mlp.down_proj.weight", {64, 128}).quantized());
  EXPECT_EQ(weights.get("model.norm.weight", {64}).dtype(), DType::kF32);
  // Dummy weights of an FP8 config are quantized too (benchmarks of FP8 checkpoints' shapes).
  WeightSource dummy = WeightSource::dummy(DType::kBF16, 3);
  dummy.set_quantization(quantization);
  EXPECT_TRUE(dummy.get_weight(name, {64, 128}).quantized());
}

// A checkpoint's FP8 tensor needs its scale, of the shape its blocks give.
TEST(WeightsTest, Fp8ScalesAreChecked) {
  const testing::ScratchDir scratch("weights_fp8");
  const std::string& dir = scratch.path();
  // The header, then `bytes` of data: zeros, but the last `scales` f32 values are 1.
  const auto write = [&](const nlohmann::json& header, int64_t bytes, int64_t scales = 0) {
    const std::string text = header.dump();
    const uint64_t length = text.size();
    std::ofstream file(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(&length), 8);
    file << text << std::string(bytes - 4 * scales, '\0');
    const float one = 1.0f;
    for (int64_t i = 0; i < scales; ++i)
      file.write(reinterpret_cast<const char*>(&one), 4);
  };
  QuantizationConfig quantization = resolve_quantization({}, "fp8");
  quantization.stored = true;
  quantization.block_rows = quantization.block_cols = 16;
  const nlohmann::json weight = {
      {"dtype", "F8_E4M3"}, {"shape", {32, 16}}, {"data_offsets", {0, 512}}};
  const auto expect_error = [&](const std::string& fragment) {
    WeightSource weights = WeightSource::from_checkpoint(dir);
    weights.set_quantization(quantization);
    try {
      weights.get_weight("w.weight", {32, 16});
      ADD_FAILURE() << "expected an error with '" << fragment << "'";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  write({{"w.weight", weight}}, 512);
  expect_error("has no scale");
  write(
      {{"w.weight", weight},
       {"w.weight_scale_inv", {{"dtype", "F32"}, {"shape", {1, 1}}, {"data_offsets", {512, 516}}}}},
      516);
  expect_error("needs [2, 1] f32 scales");
  const nlohmann::json two_scales = {
      {"w.weight", weight},
      {"w.weight_scale_inv", {{"dtype", "F32"}, {"shape", {2, 1}}, {"data_offsets", {512, 520}}}}};
  write(two_scales, 520);
  expect_error("holds 0 at index 0; FP8 scales must be finite and positive");
  write(two_scales, 520, 2);
  WeightSource good = WeightSource::from_checkpoint(dir);
  good.set_quantization(quantization);
  EXPECT_EQ(good.get_weight("w.weight", {32, 16}).scales.shape(), (Shape{2, 1}));
}

// Per-tensor FP8 (no weight_block_size): one scalar weight_scale, as such checkpoints store it,
// scales the whole weight, and a tensor-parallel slice of either dimension keeps it.
TEST(WeightsTest, ReadsPerTensorFp8) {
  const testing::ScratchDir scratch("weights_fp8_tensor");
  const std::string& dir = scratch.path();
  std::string values(32 * 16, '\0');
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<char>(i % 0x7f);  // every finite positive e4m3 code
  const float scale = 0.375f;
  const std::string header =
      nlohmann::json{
          {"w.weight", {{"dtype", "F8_E4M3"}, {"shape", {32, 16}}, {"data_offsets", {0, 512}}}},
          {"w.weight_scale",
           {{"dtype", "F32"}, {"shape", nlohmann::json::array()}, {"data_offsets", {512, 516}}}}}
          .dump();
  {
    const uint64_t length = header.size();
    std::ofstream file(dir + "/model.safetensors", std::ios::binary);
    file.write(reinterpret_cast<const char*>(&length), 8);
    file << header << values;
    file.write(reinterpret_cast<const char*>(&scale), 4);
  }
  nlohmann::json config = {{"quant_method", "fp8"}, {"activation_scheme", "static"}};
  const QuantizationConfig quantization =
      parse_quantization({{"quantization_config", config}}, "config.json");
  ASSERT_TRUE(quantization.per_tensor && quantization.stored);
  const auto expected = [&](int64_t row, int64_t col) {
    return cpu::load_float(reinterpret_cast<const std::byte*>(values.data() + row * 16 + col),
                           DType::kF8E4M3) *
           scale;
  };
  for (const WeightSlice slice : {WeightSlice{}, WeightSlice{0, 8, 16}, WeightSlice{1, 4, 8}}) {
    WeightSource weights = WeightSource::from_checkpoint(dir);
    weights.set_quantization(quantization);
    const Weight weight = weights.get_weight("w.weight", {32, 16}, slice);
    ASSERT_TRUE(weight.quantized());
    // A row slice that starts inside the tensor's one block takes a scale a row.
    EXPECT_EQ(weight.scales.numel(), slice.length != 0 && slice.dim == 0 ? slice.length : 1);
    std::vector<float> got(weight.rows() * weight.cols());
    dequantize_rows(weight, 0, weight.rows(), got.data());
    for (int64_t r = 0; r < weight.rows(); ++r) {
      for (int64_t c = 0; c < weight.cols(); ++c) {
        const int64_t row = r + (slice.length != 0 && slice.dim == 0 ? slice.begin : 0);
        const int64_t col = c + (slice.length != 0 && slice.dim == 1 ? slice.begin : 0);
        ASSERT_EQ(got[r * weight.cols() + c], expected(row, col)) << r << ", " << c;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
