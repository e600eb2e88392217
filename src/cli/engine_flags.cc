#include "cli/engine_flags.h"

#include "cli/prompts.h"
#include "core/error.h"

namespace pagoda {

std::string ModelFlags::model() const {
  return model_dir_or_default(model_dir);
}

std::string ModelFlags::tokenizer() const {
  return tokenizer_dir.empty() ? model() : tokenizer_dir;
}

void add_model_flags(CLI::App& command, ModelFlags& flags) {
  command.add_option("--model", flags.model_dir,
                     "Model directory (default: the embedded models/kjv-gemma4)");
  command.add_option("--tokenizer", flags.tokenizer_dir,
                     "Directory of tokenizer.json (default: the model's)");
}

void add_engine_flags(CLI::App& command, EngineFlags& flags) {
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
  command.add_option("--device", flags.device, "cpu")->capture_default_str();
  command.add_option("--load-format", flags.load_format, "auto (safetensors) or dummy")
      ->capture_default_str();
  command
      .add_option("--weight-dtype", flags.weight_dtype,
                  "Dtype of dummy weights: auto (the config's), float32, bfloat16, float16")
      ->capture_default_str();
  add_cache_flags(command, flags.cache);
}

std::unique_ptr<CausalLm> load_model(const ModelConfig& config, const std::string& model_dir,
                                     const EngineFlags& flags) {
  if (flags.device != "cpu") {
    fail("--device {}: only the cpu device runs models so far", flags.device);
  }
  WeightSource weights =
      parse_load_format(flags.load_format) == LoadFormat::kDummy
          ? WeightSource::dummy(flags.weight_dtype == "auto" ? config.dtype.value_or(DType::kBF16)
                                                             : parse_dtype(flags.weight_dtype),
                                flags.seed)
          : WeightSource::from_checkpoint(model_dir);
  return build_causal_lm(config, weights);
}

GeneratorConfig generator_config(const ModelConfig& config, const KvCachePlan& plan,
                                 const EngineFlags& flags) {
  GeneratorConfig generator{.vocab_size = config.vocab_size,
                            .max_model_len = plan.max_model_len,
                            .eos_token_ids = config.eos_token_ids,
                            .seed = flags.seed,
                            .scheduler = flags.scheduler};
  generator.scheduler.enable_prefix_caching = !flags.no_prefix_caching;
  return generator;
}

}  // namespace pagoda
