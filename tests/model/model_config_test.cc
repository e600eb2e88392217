#include "model/model_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "scratch_dir.h"
#include "source_paths.h"

namespace pagoda {
namespace {

using testing::example_config;

// Expects parse_model_config(config) to throw an Error whose message contains every fragment.
void expect_error(const nlohmann::json& config, const std::vector<std::string>& fragments) {
  try {
    parse_model_config(config, "test.json");
    ADD_FAILURE() << "expected an error for " << config.dump();
  } catch (const Error& error) {
    for (const std::string& fragment : fragments) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos)
          << "'" << error.what() << "' lacks '" << fragment << "'";
    }
  }
}

nlohmann::json tiny_llama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 64},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"num_hidden_layers", 2},
          {"max_position_embeddings", 128},
          {"vocab_size", 100}};
}

TEST(ModelConfigTest, Llama3_8B) {
  const ModelConfig model = load_model_config(example_config("llama-3-8b"));
  EXPECT_EQ(model.architecture, "LlamaForCausalLM");
  EXPECT_EQ(model.dtype, DType::kBF16);
  EXPECT_EQ(model.max_position_embeddings, 8192);
  ASSERT_EQ(model.layers.size(), 32u);
  for (const LayerAttentionConfig& layer : model.layers) {
    EXPECT_EQ(layer.kind, AttentionKind::kFull);
    EXPECT_EQ(layer.num_q_heads, 32);
    EXPECT_EQ(layer.num_kv_heads, 8);
    EXPECT_EQ(layer.head_size_k, 128);  // hidden_size / num_attention_heads
    EXPECT_EQ(layer.head_size_v, 128);
    EXPECT_EQ(layer.kv_source, KvSource::kOwn);
  }
  EXPECT_EQ(model.layers[7].name, "model.layers.7.self_attn");
}

TEST(ModelConfigTest, Gemma4E2B) {
  const ModelConfig model = load_model_config(example_config("gemma-4-e2b"));
  EXPECT_EQ(model.architecture, "Gemma4ForConditionalGeneration");
  EXPECT_EQ(model.model_type, "gemma4");
  ASSERT_EQ(model.layers.size(), 35u);
  // 4 sliding : 1 full; sliding head 256, full head 512, one KV head each.
  for (int i = 0; i < 35; ++i) {
    const LayerAttentionConfig& layer = model.layers[i];
    const bool full = (i + 1) % 5 == 0;
    EXPECT_EQ(layer.kind, full ? AttentionKind::kFull : AttentionKind::kSliding) << i;
    EXPECT_EQ(layer.head_size_k, full ? 512 : 256) << i;
    EXPECT_EQ(layer.num_kv_heads, 1);
    EXPECT_EQ(layer.sliding_window, full ? 0 : 512);
    // The last 20 layers are shared: sliding ones read layer 13, full ones layer 14.
    if (i < 15) {
      EXPECT_EQ(layer.kv_source, KvSource::kOwn) << i;
    } else {
      EXPECT_EQ(layer.kv_source, KvSource::kEarlierLayer) << i;
      EXPECT_EQ(layer.kv_source_layer, full ? 14 : 13) << i;
    }
  }
  EXPECT_FALSE(model.needs_target());
}

TEST(ModelConfigTest, Gemma4E4BAndAssistant) {
  const ModelConfig target = load_model_config(example_config("gemma-4-e4b"));
  ASSERT_EQ(target.layers.size(), 42u);
  EXPECT_EQ(target.layers[5].kind, AttentionKind::kFull);
  EXPECT_EQ(target.layers[5].head_size_k, 512);
  EXPECT_EQ(target.layers[5].num_kv_heads, 2);
  EXPECT_EQ(target.layers[24].kv_source_layer, 22);  // first shared layer, sliding
  EXPECT_EQ(target.layers[41].kv_source_layer, 23);  // last layer, full

  const ModelConfig assistant = load_model_config(example_config("gemma-4-e4b-assistant"));
  EXPECT_EQ(assistant.architecture, "Gemma4AssistantForCausalLM");
  ASSERT_EQ(assistant.layers.size(), 4u);
  EXPECT_TRUE(assistant.needs_target());
  for (const LayerAttentionConfig& layer : assistant.layers) {
    EXPECT_EQ(layer.kv_source, KvSource::kTargetLastOfKind);
  }
  EXPECT_EQ(assistant.layers[3].kind, AttentionKind::kFull);
  EXPECT_EQ(assistant.layers[3].head_size_k, 512);
}

TEST(ModelConfigTest, MiMoV2FlashPublishedSpelling) {
  const ModelConfig model = load_model_config(example_config("mimo-v2-flash"));
  ASSERT_EQ(model.layers.size(), 48u);
  const LayerAttentionConfig& full = model.layers[0];
  const LayerAttentionConfig& sliding = model.layers[1];
  EXPECT_EQ(full.kind, AttentionKind::kFull);
  EXPECT_EQ(full.num_kv_heads, 4);
  EXPECT_EQ(full.head_size_k, 192);
  EXPECT_EQ(full.head_size_v, 128);
  EXPECT_EQ(sliding.kind, AttentionKind::kSliding);
  EXPECT_EQ(sliding.num_kv_heads, 8);
  EXPECT_EQ(sliding.head_size_k, 192);
  EXPECT_EQ(sliding.head_size_v, 128);
  EXPECT_EQ(sliding.sliding_window, 128);
  int full_layers = 0;
  for (const LayerAttentionConfig& layer : model.layers)
    full_layers += layer.kind == AttentionKind::kFull;
  EXPECT_EQ(full_layers, 9);
}

TEST(ModelConfigTest, MiMoV2FlashTransformersSpelling) {
  const nlohmann::json config = {
      {"architectures", {"MiMoV2FlashForCausalLM"}},
      {"hidden_size", 64},
      {"num_attention_heads", 8},
      {"num_key_value_heads", 2},
      {"head_dim", 24},
      {"v_head_dim", 16},
      {"num_hidden_layers", 3},
      {"layer_types", {"full_attention", "sliding_attention", "sliding_attention"}},
      {"sliding_window", 32},
      {"max_position_embeddings", 256},
      {"vocab_size", 100}};
  const ModelConfig model = parse_model_config(config, "mimo.json");
  EXPECT_EQ(model.layers[0].num_kv_heads, 2);
  EXPECT_EQ(model.layers[1].num_kv_heads, 4);  // twice the full layers' KV heads
  EXPECT_EQ(model.layers[2].head_size_v, 16);
  EXPECT_EQ(model.layers[2].sliding_window, 32);
}

TEST(ModelConfigTest, Gemma4PerLayerConfigAndKEqV) {
  nlohmann::json text = {
      {"model_type", "gemma4_text"},
      {"hidden_size", 64},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 16},
      {"num_hidden_layers", 4},
      {"layer_types",
       {"sliding_attention", "full_attention", "sliding_attention", "full_attention"}},
      {"sliding_window", 8},
      {"num_kv_shared_layers", 2},
      {"per_layer_config",
       {{"1", {{"head_dim", 32}, {"num_key_value_heads", 1}}},
        {"3", {{"head_dim", 32}, {"num_key_value_heads", 1}}}}},
      {"max_position_embeddings", 64},
      {"vocab_size", 50}};
  const nlohmann::json config = {{"architectures", {"Gemma4ForCausalLM"}}, {"text_config", text}};
  const ModelConfig model = parse_model_config(config, "gemma.json");
  EXPECT_EQ(model.layers[0].head_size_k, 16);
  EXPECT_EQ(model.layers[1].head_size_k, 32);
  EXPECT_EQ(model.layers[1].num_kv_heads, 1);
  EXPECT_EQ(model.layers[2].kv_source_layer, 0);
  EXPECT_EQ(model.layers[3].kv_source_layer, 1);

  // The flat spelling: k_eq_v gives full layers num_global_key_value_heads.
  text.erase("per_layer_config");
  text["global_head_dim"] = 48;
  text["attention_k_eq_v"] = true;
  text["num_global_key_value_heads"] = 1;
  text["num_kv_shared_layers"] = 0;
  const ModelConfig flat = parse_model_config(
      {{"architectures", {"Gemma4ForCausalLM"}}, {"text_config", text}}, "gemma.json");
  EXPECT_EQ(flat.layers[1].head_size_k, 48);
  EXPECT_EQ(flat.layers[1].head_size_v, 48);
  EXPECT_EQ(flat.layers[1].num_kv_heads, 1);
  EXPECT_EQ(flat.layers[0].num_kv_heads, 2);

  // Without layer_types: every sixth layer and the last are full.
  text.erase("layer_types");
  text["num_hidden_layers"] = 8;
  const ModelConfig derived = parse_model_config(text, "gemma.json");
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(derived.layers[i].kind,
              i == 5 || i == 7 ? AttentionKind::kFull : AttentionKind::kSliding)
        << i;
  }
}

TEST(ModelConfigTest, Qwen3SlidingLayers) {
  nlohmann::json config = tiny_llama();
  config["architectures"] = {"Qwen3ForCausalLM"};
  config["num_hidden_layers"] = 4;
  config["head_dim"] = 32;
  config["use_sliding_window"] = true;
  config["sliding_window"] = 16;
  config["max_window_layers"] = 2;
  const ModelConfig model = parse_model_config(config, "qwen3.json");
  EXPECT_EQ(model.layers[1].kind, AttentionKind::kFull);
  EXPECT_EQ(model.layers[2].kind, AttentionKind::kSliding);
  EXPECT_EQ(model.layers[3].sliding_window, 16);
  EXPECT_EQ(model.layers[3].head_size_k, 32);
  config["use_sliding_window"] = false;
  EXPECT_EQ(parse_model_config(config, "qwen3.json").layers[3].kind, AttentionKind::kFull);
}

TEST(ModelConfigTest, ModelTypeWithoutArchitectures) {
  nlohmann::json config = tiny_llama();
  config.erase("architectures");
  config["model_type"] = "llama";
  EXPECT_EQ(parse_model_config(config, "x.json").architecture, "LlamaForCausalLM");
}

TEST(ModelConfigTest, BadInputNamesTheProblem) {
  nlohmann::json config = tiny_llama();
  config["architectures"] = {"FalconForCausalLM"};
  expect_error(config, {"test.json", "FalconForCausalLM", "LlamaForCausalLM", "Gemma4ForCausalLM"});

  config = tiny_llama();
  config["num_attention_heads"] = "four";
  expect_error(config, {"num_attention_heads", "must be an integer", "\"four\""});

  config = tiny_llama();
  config["eos_token_id"] = {2, 1000000};
  expect_error(config, {"test.json", "eos_token_id 1000000", "outside the vocabulary"});

  config = tiny_llama();
  config["num_key_value_heads"] = 0;
  expect_error(config, {"num_key_value_heads", "is 0", "at least 1"});

  config = tiny_llama();
  config["num_key_value_heads"] = 3;
  expect_error(config, {"num_attention_heads", "not a multiple", "3"});

  config = tiny_llama();
  config.erase("num_hidden_layers");
  expect_error(config, {"num_hidden_layers", "missing"});

  config = tiny_llama();
  config["architectures"] = {"Qwen3ForCausalLM"};
  config["layer_types"] = {"full_attention"};
  expect_error(config, {"layer_types", "1 entries", "num_hidden_layers is 2"});
  config["layer_types"] = {"full_attention", "chunked_attention"};
  expect_error(config, {"layer_types", "chunked_attention"});

  // Absurd sizes are errors before anything is allocated or multiplied.
  config = tiny_llama();
  config["num_hidden_layers"] = int64_t{1} << 40;
  expect_error(config, {"num_hidden_layers", "at most 4096"});
  config = tiny_llama();
  config["head_dim"] = 1 << 20;
  expect_error(config, {"model.layers.0.self_attn", "head sizes 1048576/1048576"});
  config = tiny_llama();
  config["vocab_size"] = int64_t{1} << 50;
  expect_error(config, {"vocab_size", "at most"});

  expect_error(nlohmann::json::array(), {"must be a JSON object"});
  expect_error({{"hidden_size", 4}}, {"neither 'architectures' nor 'model_type'"});
}

TEST(ModelConfigTest, Gemma4SharingErrors) {
  const nlohmann::json base = {
      {"model_type", "gemma4_text"},
      {"hidden_size", 64},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"num_hidden_layers", 3},
      {"layer_types", {"sliding_attention", "sliding_attention", "full_attention"}},
      {"max_position_embeddings", 64},
      {"vocab_size", 50}};
  nlohmann::json config = base;
  config["num_kv_shared_layers"] = 1;  // the full layer 2 has no earlier full layer
  expect_error(config, {"model.layers.2.self_attn", "no earlier non-shared full layer"});
  config["num_kv_shared_layers"] = 3;
  expect_error(config, {"num_kv_shared_layers", "at least one layer"});
  config["num_kv_shared_layers"] = 9;
  expect_error(config, {"num_kv_shared_layers", "is 9"});
}

TEST(ModelConfigTest, FilesAndMalformedJson) {
  EXPECT_THROW(load_model_config("/nonexistent/model"), Error);
  const testing::ScratchDir scratch("config");
  const std::string& dir = scratch.path();
  {
    std::FILE* file = std::fopen((dir + "/config.json").c_str(), "w");
    std::fputs("{\"architectures\": [\"LlamaForCausalLM\"], ", file);
    std::fclose(file);
  }
  try {
    load_model_config(dir);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("malformed JSON"), std::string::npos);
  }
}

// generation_config.json adds its EOS ids to config.json's (a chat model's end of turn is often
// there only) and gives the sampling defaults vLLM reads from it; a bad field names the file.
TEST(ModelConfigTest, GenerationConfigAddsEosIdsAndSamplingDefaults) {
  const testing::ScratchDir scratch("generation");
  const std::string& dir = scratch.path();
  nlohmann::json config = tiny_llama();
  config["eos_token_id"] = 2;
  std::ofstream(dir + "/config.json") << config.dump();
  EXPECT_EQ(load_model_config(dir).eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_TRUE(load_model_config(dir).generation.empty());

  const auto write_generation = [&](const nlohmann::json& generation) {
    std::ofstream(dir + "/generation_config.json") << generation.dump();
  };
  write_generation({{"eos_token_id", {2, 7, 7}},
                    {"temperature", 0.6},
                    {"top_k", 20},
                    {"top_p", 0.95},
                    {"do_sample", true},
                    {"max_new_tokens", 100}});
  const ModelConfig model = load_model_config(dir);
  EXPECT_EQ(model.eos_token_ids, (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(model.generation.temperature, 0.6);
  EXPECT_EQ(model.generation.top_k, 20);
  EXPECT_EQ(model.generation.top_p, 0.95);
  EXPECT_EQ(model.generation.min_p, std::nullopt);
  EXPECT_EQ(model.generation.repetition_penalty, std::nullopt);
  EXPECT_EQ(model.generation.max_new_tokens, 100);

  const std::string path = dir + "/generation_config.json";
  for (const auto& [bad, says] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"eos_token_id", 5000}}, "eos_token_id 5000 is outside the vocabulary"},
           {{{"temperature", -1}}, "'temperature' is -1; expected a number in [0, "},
           {{{"top_p", 0}}, "'top_p' is 0; expected a number in ["},
           {{{"top_k", -2}}, "'top_k' must be -1, 0 (every token) or positive"},
           {{{"repetition_penalty", "high"}}, "'repetition_penalty'"},
           {{{"max_new_tokens", 0}}, "'max_new_tokens'"},
           {nlohmann::json::array(), "expected a JSON object"}}) {
    SCOPED_TRACE(bad.dump());
    write_generation(bad);
    try {
      load_model_config(dir);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find(says), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

// Every field of every example config, removed or replaced by a value of another type or an
// absurd size, gives either a config or an Error: never another exception or a crash.
TEST(ModelConfigTest, MutatedExampleConfigsNeverCrash) {
  const nlohmann::json replacements[] = {nullptr,
                                         "text",
                                         -1,
                                         0,
                                         1e30,
                                         int64_t{1} << 62,
                                         nlohmann::json::array(),
                                         nlohmann::json::object(),
                                         true};
  int parsed = 0;
  int rejected = 0;
  for (const char* name : {"llama-3-8b", "gemma-4-e2b", "gemma-4-e4b", "gemma-4-e4b-assistant",
                           "mimo-v2-flash", "mimo-v2-flash-draft-128"}) {
    std::ifstream file(example_config(name) + "/config.json");
    const nlohmann::json original = nlohmann::json::parse(file);
    const bool nested = original.contains("text_config");
    const nlohmann::json& fields = nested ? original["text_config"] : original;
    for (const auto& [key, value] : fields.items()) {
      std::vector<nlohmann::json> variants;
      for (const nlohmann::json& replacement : replacements) {
        nlohmann::json mutated = original;
        (nested ? mutated["text_config"] : mutated)[key] = replacement;
        variants.push_back(mutated);
      }
      nlohmann::json removed = original;
      (nested ? removed["text_config"] : removed).erase(key);
      variants.push_back(removed);
      for (const nlohmann::json& variant : variants) {
        try {
          parse_model_config(variant, name);
          ++parsed;
        } catch (const Error&) {
          ++rejected;
        }
      }
    }
  }
  // Both outcomes occur: the mutations reach fields that matter and fields that do not.
  EXPECT_GT(parsed, 100);
  EXPECT_GT(rejected, 100);
}

// quantization_config: the fp8 scheme as DeepSeek and MiMo write it, per tensor without
// weight_block_size, and a clear error naming the field for anything else.
TEST(ModelConfigTest, Fp8Quantization) {
  nlohmann::json config = tiny_llama();
  EXPECT_FALSE(parse_model_config(config, "test.json").quantization.fp8);
  config["quantization_config"] = {{"quant_method", "fp8"},
                                   {"fmt", "e4m3"},
                                   {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {128, 64}},
                                   {"modules_to_not_convert", {"lm_head", "model.layers.1.mlp"}}};
  const QuantizationConfig q = parse_model_config(config, "test.json").quantization;
  EXPECT_TRUE(q.fp8 && q.stored && !q.per_tensor && !q.static_activations);
  EXPECT_EQ(q.block_rows, 128);
  EXPECT_EQ(q.block_cols, 64);
  EXPECT_FALSE(q.quantizes("lm_head"));
  EXPECT_FALSE(q.quantizes("model.layers.1.mlp.down_proj"));
  EXPECT_TRUE(q.quantizes("model.layers.11.mlp.down_proj"));  // "layers.1" is not "layers.11"
  EXPECT_TRUE(q.quantizes("model.layers.0.self_attn.q_proj"));
  config["quantization_config"].erase("weight_block_size");
  EXPECT_TRUE(parse_model_config(config, "test.json").quantization.per_tensor);
  config["quantization_config"]["activation_scheme"] = "static";  // as per-tensor FP8 ships
  EXPECT_TRUE(parse_model_config(config, "test.json").quantization.static_activations);

  nlohmann::json bad = config;
  bad["quantization_config"]["quant_method"] = "awq";
  expect_error(bad, {"test.json", "quantization_config.quant_method", "awq", "fp8"});
  bad = config;
  bad["quantization_config"]["fmt"] = "e5m2";
  expect_error(bad, {"quantization_config.fmt", "e5m2"});
  bad = config;
  bad["quantization_config"]["activation_scheme"] = "per_token";
  expect_error(bad, {"quantization_config.activation_scheme", "per_token"});
  bad = config;
  bad["quantization_config"]["weight_block_size"] = {128};
  expect_error(bad, {"quantization_config.weight_block_size", "two integers"});
  for (const int64_t rows : {int64_t{0}, int64_t{1} << 35}) {  // 2^35 would overflow the kernels
    bad["quantization_config"]["weight_block_size"] = {rows, 128};
    expect_error(bad, {"quantization_config.weight_block_size", "[1, 65536]"});
  }
  bad = config;
  bad["quantization_config"] = "fp8";
  expect_error(bad, {"quantization_config"});

  // --quantization: fp8 quantizes a plain checkpoint at load; none refuses an FP8 one.
  const QuantizationConfig plain;
  const QuantizationConfig at_load = resolve_quantization(plain, "fp8");
  EXPECT_TRUE(at_load.fp8 && !at_load.stored);
  EXPECT_EQ(at_load.block_rows, 128);
  EXPECT_FALSE(resolve_quantization(plain, "auto").fp8);
  EXPECT_TRUE(resolve_quantization(q, "fp8").stored);
  EXPECT_THROW(resolve_quantization(q, "none"), Error);
  EXPECT_THROW(resolve_quantization(plain, "int4"), Error);
}

}  // namespace
}  // namespace pagoda
