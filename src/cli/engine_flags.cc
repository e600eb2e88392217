#include "cli/engine_flags.h"

#include <filesystem>

#include "cli/prompts.h"
#include "core/error.h"
#include "core/files.h"
#include "model/safetensors.h"

namespace pagoda {

std::string ModelFlags::model() const {
  return model_dir_or_default(model_dir);
}

std::string ModelFlags::tokenizer() const {
  return tokenizer_dir.empty() ? model() : tokenizer_dir;
}

Tokenizer ModelFlags::load_tokenizer() const {
  Tokenizer loaded = Tokenizer::load(tokenizer());
  if (chat_template.empty()) return loaded;
  // As vLLM reads the flag: a file when one exists, else the template itself if it looks like one.
  if (std::filesystem::is_regular_file(chat_template)) {
    loaded.set_chat_template(read_text_file(chat_template));
  } else if (chat_template.find('{') != std::string::npos) {
    loaded.set_chat_template(chat_template);
  } else {
    fail("--chat-template: no file '{}', and it is not a template (it has no '{{')", chat_template);
  }
  return loaded;
}

void add_chat_template_flag(CLI::App& command, ModelFlags& flags) {
  command.add_option("--chat-template", flags.chat_template,
                     "Chat template (Jinja) to use instead of the model's: a file, or the template "
                     "itself");
}

void add_model_flags(CLI::App& command, ModelFlags& flags) {
  command.add_option("--model", flags.model_dir,
                     "Model directory (default: the embedded models/kjv-gemma4)");
  command.add_option("--tokenizer", flags.tokenizer_dir,
                     "Directory of tokenizer.json (default: the model's)");
}

void add_engine_flags(CLI::App& command, EngineFlags& flags) {
  command.add_flag("--check-weights", flags.check_weights,
                   "Read every weight first and refuse NaN or infinite values, naming the tensors");
  command.add_option("--seed", flags.seed, "Seed of dummy weights and unseeded requests")
      ->capture_default_str();
  command
      .add_option("--max-num-seqs", flags.scheduler.max_num_seqs, "Most requests running at once")
      ->capture_default_str();
  command
      .add_option("--max-num-batched-tokens", flags.scheduler.max_num_batched_tokens,
                  "Token budget per step (longer prompts are chunked)")
      ->capture_default_str();
  command.add_flag("--no-enable-prefix-caching", flags.no_prefix_caching,
                   "Do not reuse cached prompt prefixes");
  command.add_option("--device", flags.device, "cpu, cuda or cuda:N")->capture_default_str();
  command
      .add_option("--gpu-memory-utilization", flags.gpu_memory_utilization,
                  "Share of the GPU's memory to use; the KV cache takes what the model leaves")
      ->check(CLI::Range(0.05, 1.0))
      ->capture_default_str();
  command.add_flag("--enforce-eager", flags.enforce_eager,
                   "On a GPU, run decode steps without CUDA graphs");
  command.add_option("--load-format", flags.load_format, "auto (safetensors) or dummy")
      ->capture_default_str();
  command
      .add_option("--weight-dtype", flags.weight_dtype,
                  "Dtype of dummy weights: auto (the config's), float32, bfloat16, float16")
      ->capture_default_str();
  add_cache_flags(command, flags.cache);
}

void add_sampling_filter_flags(CLI::App& command, SamplingParams& sampling) {
  command.add_option("--temperature", sampling.temperature, "0: greedy")->capture_default_str();
  command.add_option("--top-k", sampling.top_k, "Keep the k most likely tokens (0: all)")
      ->capture_default_str();
  command.add_option("--top-p", sampling.top_p, "Keep the most likely tokens up to this mass")
      ->capture_default_str();
  command.add_option("--min-p", sampling.min_p, "Drop tokens below this share of the top one")
      ->capture_default_str();
}

Device engine_device(const EngineFlags& flags) {
  const Device device = parse_device(flags.device);
  if (device.is_cpu()) return device;
  if (!built_with_cuda()) {
    fail("--device {}: this pagoda binary was built without CUDA", flags.device);
  }
  if (device.index >= cuda_device_count()) {
    fail("--device {}: this machine has {} CUDA device(s)", flags.device, cuda_device_count());
  }
  return device;
}

CacheConfig engine_cache_config(const EngineFlags& flags, const ModelConfig& target) {
  CacheConfig config = parse_cache_flags(flags.cache);
  config.max_num_batched_tokens = flags.scheduler.max_num_batched_tokens;
  return resolve_cache_config(config, target, engine_device(flags));
}

namespace {

// Error naming the tensors (the first few) that hold NaN or infinite values.
void check_weights_finite(const std::string& model_dir) {
  const std::vector<NonFiniteTensor> bad = find_non_finite(Checkpoint::open(model_dir));
  if (bad.empty()) return;
  std::string list;
  for (size_t i = 0; i < std::min<size_t>(bad.size(), 3); ++i) {
    list += fmt::format("{}{} ({} values, the first at index {})", i ? ", " : "", bad[i].name,
                        bad[i].count, bad[i].first);
  }
  fail("--check-weights: {} tensor{} of {} hold NaN or infinite values: {}{}", bad.size(),
       bad.size() == 1 ? "" : "s", model_dir, list, bad.size() > 3 ? ", ..." : "");
}

}  // namespace

std::unique_ptr<CausalLm> load_model(const ModelConfig& config, const std::string& model_dir,
                                     const EngineFlags& flags) {
  const Device device = engine_device(flags);
  WeightSource weights =
      parse_load_format(flags.load_format) == LoadFormat::kDummy
          ? WeightSource::dummy(flags.weight_dtype == "auto" ? config.dtype.value_or(DType::kBF16)
                                                             : parse_dtype(flags.weight_dtype),
                                flags.seed)
          : WeightSource::from_checkpoint(model_dir);
  if (flags.check_weights && parse_load_format(flags.load_format) != LoadFormat::kDummy) {
    check_weights_finite(model_dir);
  }
  weights.set_device(device);
  return build_causal_lm(config, weights);
}

EngineConfig engine_config(const ModelConfig& config, const KvCachePlan& plan,
                           const EngineFlags& flags) {
  EngineConfig engine{.vocab_size = config.vocab_size,
                      .max_model_len = plan.max_model_len,
                      .eos_token_ids = config.eos_token_ids,
                      .seed = flags.seed,
                      .scheduler = flags.scheduler,
                      .enforce_eager = flags.enforce_eager};
  engine.scheduler.enable_prefix_caching = !flags.no_prefix_caching;
  return engine;
}

}  // namespace pagoda
