#include "cli/engine_flags.h"

#include <CLI/CLI.hpp>

namespace pagoda {

void add_chat_template_flag(CLI::App& command, ModelPaths& flags) {
  command.add_option("--chat-template", flags.chat_template,
                     "Chat template (Jinja) to use instead of the model's: a file, or the template "
                     "itself");
}

void add_model_flags(CLI::App& command, ModelPaths& flags) {
  command.add_option("--model", flags.model_dir,
                     "Model directory (default: the embedded models/kjv-gemma4)");
  command.add_option("--tokenizer", flags.tokenizer_dir,
                     "Directory of tokenizer.json (default: the model's)");
}

std::string refuse_negative(const std::string& text) {
  return text.find('-') == std::string::npos ? ""
                                             : "'" + text + "' is negative; expected 0 or more";
}

void add_engine_flags(CLI::App& command, EngineOptions& flags) {
  command.add_flag("--check-weights", flags.check_weights,
                   "Read every weight first and refuse NaN or infinite values, naming the tensors");
  command.add_option("--seed", flags.seed, "Seed of dummy weights and unseeded requests")
      ->check(refuse_negative)
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
      .add_option("--quantization", flags.quantization,
                  "Projection weights: auto (as the checkpoint stores them), fp8 (FP8 e4m3 in "
                  "128 x 128 blocks, quantized at load unless stored so), none")
      ->capture_default_str();
  command
      .add_option("--weight-dtype", flags.weight_dtype,
                  "Dtype of dummy weights: auto (the config's), float32, bfloat16, float16")
      ->capture_default_str();
  command.add_option(
      "--speculative-config", flags.speculative_config,
      "Speculative decoding, as vLLM spells it: '{\"method\": \"mtp\" | "
      "\"draft_model\", \"model\": DIR, \"num_speculative_tokens\": K}' (method and, "
      "for the model's own assistant, model may be left out)");
  command
      .add_option("--generation-config", flags.generation_config,
                  "Sampling defaults of requests that leave them out: auto (the model's "
                  "generation_config.json), vllm (the engine's), or a directory with one")
      ->capture_default_str();
  command
      .add_option("--tensor-parallel-size", flags.tensor_parallel_size,
                  "Ranks the model is split over (attention heads and MLP columns; on the CPU, "
                  "threads of this process)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command
      .add_option("--decode-context-parallel-size", flags.decode_context_parallel_size,
                  "Ranks each sequence's KV cache is dealt over (decode context parallelism; 1, or "
                  "the tensor-parallel size, or alone with whole weights on each rank)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command
      .add_option("--dcp-kv-cache-interleave-size", flags.dcp_kv_cache_interleave_size,
                  "Tokens dealt to one context-parallel rank at a time; divides --block-size")
      ->check(CLI::Range(1, 65536))
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

std::string describe_spec_stats(const GenerationStats& stats) {
  std::string per_position;
  for (size_t j = 0; j < stats.spec_accepted_per_position.size(); ++j) {
    per_position += fmt::format(
        "{}{:.3f}", j ? ", " : "",
        stats.spec_rounds == 0
            ? 0.0
            : static_cast<double>(stats.spec_accepted_per_position[j]) / stats.spec_rounds);
  }
  return fmt::format(
      "spec rounds         {} (mean acceptance length {:.3f})\n"
      "draft tokens        {} proposed, {} accepted ({:.1f}%)\n"
      "accepted/position   {}\n",
      stats.spec_rounds, stats.spec_mean_acceptance_length(), stats.spec_draft_tokens,
      stats.spec_accepted_tokens, 100.0 * stats.spec_acceptance_rate(), per_position);
}

}  // namespace pagoda
