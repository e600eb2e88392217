#include "cli/inspect.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>

#include "attention/backend.h"
#include "core/error.h"
#include "core/units.h"
#include "engine/cache_config.h"
#include "model/architectures.h"
#include "model/config_reader.h"
#include "model/tensor_parallel.h"

namespace pagoda {
namespace {

// Left-aligned columns sized to their widest cell.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string render(const std::string& indent) const {
    std::vector<size_t> widths(rows_.front().size(), 0);
    for (const auto& row : rows_) {
      for (size_t c = 0; c < row.size(); ++c)
        widths[c] = std::max(widths[c], row[c].size());
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line = indent;
      for (size_t c = 0; c < row.size(); ++c) {
        line += row[c];
        if (c + 1 < row.size()) line += std::string(widths[c] - row[c].size() + 2, ' ');
      }
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string window_text(const KvSpec& spec) {
  return spec.kind == AttentionKind::kSliding ? std::to_string(spec.sliding_window) : "-";
}

// Layer indices (the # column) as ranges: "0-3, 5, 7-9".
std::string layer_list(const std::vector<int64_t>& indices) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < indices.size();) {
    size_t j = i;
    while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1)
      ++j;
    parts.push_back(j == i ? std::to_string(indices[i])
                           : fmt::format("{}-{}", indices[i], indices[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

nlohmann::json layer_names_json(const KvCachePlan& plan, const std::vector<int64_t>& indices) {
  nlohmann::json names = nlohmann::json::array();
  for (int64_t i : indices)
    names.push_back(plan.layers[i].name);
  return names;
}

nlohmann::json model_json(const ModelConfig& model) {
  return {{"config", model.source},
          {"architecture", model.architecture},
          {"model_type", model.model_type},
          {"num_layers", model.layers.size()},
          {"max_position_embeddings", model.max_position_embeddings}};
}

nlohmann::json spec_json(const KvSpec& spec) {
  return {{"type", attention_kind_name(spec.kind)},
          {"sliding_window",
           spec.kind == AttentionKind::kSliding ? nlohmann::json(spec.sliding_window) : nullptr},
          {"block_size", spec.page.block_size},
          {"num_kv_heads", spec.page.num_kv_heads},
          {"head_size_k", spec.page.head_size_k},
          {"head_size_v", spec.page.head_size_v},
          {"dtype", dtype_name(spec.page.dtype)},
          {"real_page_bytes", spec.real_page_bytes()},
          {"page_bytes", spec.page_bytes()},
          {"indexes_kv_by_block_stride", spec.indexes_kv_by_block_stride}};
}

int64_t layer_bytes_per_token(const KvLayer& layer) {
  return layer.owns_kv() ? layer.spec->page.bytes_per_token() : 0;
}

int64_t kv_bytes_per_token(const KvCachePlan& plan) {
  int64_t bytes = 0;
  for (const KvLayer& layer : plan.layers)
    bytes += layer_bytes_per_token(layer);
  return bytes;
}

// Tokens of a sequence one GiB of one rank's KV holds: under decode context parallelism a rank
// holds one in context_parallel_size of them. Nullopt without KV.
std::optional<int64_t> rank_tokens_per_gib(const KvCachePlan& plan) {
  const int64_t bytes = kv_bytes_per_token(plan);
  if (bytes == 0) return std::nullopt;
  return (int64_t{1} << 30) / bytes * plan.context_parallel_size;
}

}  // namespace

InspectReport build_inspect_report(const InspectOptions& options) {
  InspectReport report;
  report.target = load_model_config(options.model_dir);
  if (!options.speculative_config.empty() && !options.draft_model_dir.empty()) {
    fail("give --speculative-config or --draft-model, not both");
  }
  if (!options.speculative_config.empty()) {
    report.speculative =
        parse_speculative_config(options.speculative_config, options.model_dir, report.target);
    report.drafter = report.speculative->drafter;
  } else if (!options.draft_model_dir.empty()) {
    report.drafter = load_model_config(options.draft_model_dir);
  }
  // Planned for the device the backend runs on: the CPU unless --attention-backend names another.
  CacheConfig cache = parse_cache_options(options.cache);
  cache.max_num_batched_tokens = options.max_num_batched_tokens;
  if (report.speculative) cache.draft_dtype = report.speculative->kv_cache_dtype;
  const Device device{cache.backend ? cache.backend->device_type() : DeviceType::kCpu};
  cache = resolve_cache_config(cache, report.target, device);
  const int64_t tp = options.tensor_parallel_size;
  const int64_t dcp = options.decode_context_parallel_size;
  check_tensor_parallel(report.target, tp);
  check_context_parallel(tp, dcp, options.dcp_kv_cache_interleave_size);
  if (report.drafter) check_tensor_parallel(*report.drafter, tp);
  cache.context_parallel_size = dcp;
  cache.context_interleave = options.dcp_kv_cache_interleave_size;
  report.tensor_parallel_size = tp;
  report.decode_context_parallel_size = dcp;
  const WeightEstimate weights = estimate_rank_weights(report.target, tp);
  report.rank_params = weights.params;
  report.rank_weight_bytes = static_cast<int64_t>(estimate_weight_bytes(
      weights.params, weights.projection_params, report.target.dtype.value_or(DType::kBF16),
      report.target.quantization));
  const std::optional<ModelConfig> rank_drafter =
      report.drafter ? std::optional(rank_model_config(*report.drafter, tp, dcp)) : std::nullopt;
  const ModelConfig rank_target = rank_model_config(report.target, tp, dcp);
  report.plan = plan_cache(rank_target, rank_drafter ? &*rank_drafter : nullptr, cache);
  report.dtype = *cache.dtype;
  if (report.dtype != DType::kBF16 || cache.draft_dtype) {
    CacheConfig bf16 = cache;
    bf16.dtype = DType::kBF16;
    bf16.draft_dtype.reset();
    bf16.dtype_skips = {};
    report.bf16_tokens_per_gib =
        rank_tokens_per_gib(plan_cache(rank_target, rank_drafter ? &*rank_drafter : nullptr, bf16));
  }
  report.attention_backend = cache.backend->name();
  return report;
}

nlohmann::json inspect_report_json(const InspectReport& report) {
  const KvCachePlan& plan = report.plan;
  nlohmann::json out;
  out["model"] = model_json(report.target);
  out["draft_model"] = report.drafter ? model_json(*report.drafter) : nlohmann::json(nullptr);
  out["speculative"] =
      report.speculative
          ? nlohmann::json{{"method", speculative_method_name(report.speculative->method)},
                           {"model", report.speculative->model_dir},
                           {"num_speculative_tokens", report.speculative->num_speculative_tokens},
                           {"kv_cache_dtype",
                            report.speculative->kv_cache_dtype
                                ? nlohmann::json(dtype_name(*report.speculative->kv_cache_dtype))
                                : nlohmann::json(nullptr)}}
          : nlohmann::json(nullptr);
  out["dtype"] = dtype_name(report.dtype);
  out["attention_backend"] = report.attention_backend;
  out["max_model_len"] = plan.max_model_len;
  out["buffer_layout"] = kv_buffer_layout_name(plan.layout);

  nlohmann::json layers = nlohmann::json::array();
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const KvLayer& layer = plan.layers[i];
    const LayerAttentionConfig& a = layer.attention;
    const KvLayerPlacement& placement = plan.placements[i];
    layers.push_back(
        {{"index", i},
         {"name", layer.name},
         {"role", layer.is_drafter() ? "drafter" : "target"},
         {"type", attention_kind_name(a.kind)},
         {"sliding_window",
          a.kind == AttentionKind::kSliding ? nlohmann::json(a.sliding_window) : nullptr},
         {"num_q_heads", a.num_q_heads},
         {"num_kv_heads", a.num_kv_heads},
         {"head_size_k", a.head_size_k},
         {"head_size_v", a.head_size_v},
         {"kv_source", layer.owns_kv() ? nlohmann::json(nullptr)
                                       : nlohmann::json(plan.layers[layer.source].name)},
         {"bytes_per_token", layer_bytes_per_token(layer)},
         {"group", placement.group},
         {"slot", placement.slot},
         {"buffer", placement.buffer},
         {"offset_bytes", placement.pages.offset_bytes},
         {"block_stride_bytes", placement.pages.block_stride_bytes}});
  }
  out["layers"] = layers;

  nlohmann::json decisions = nlohmann::json::array();
  for (const PageDecision& d : plan.unification.decisions) {
    decisions.push_back({{"layers", layer_names_json(plan, d.layers)},
                         {"action", page_action_name(d.action)},
                         {"scale", d.scale},
                         {"before", spec_json(d.before)},
                         {"after", spec_json(d.after)},
                         {"waste_fraction", d.waste_fraction()}});
  }
  out["page_sizes"] = decisions;

  nlohmann::json groups = nlohmann::json::array();
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    groups.push_back({{"index", g},
                      {"spec", spec_json(plan.groups[g].spec)},
                      {"layers", layer_names_json(plan, plan.groups[g].layers)}});
  }
  out["groups"] = groups;

  nlohmann::json buffers = nlohmann::json::array();
  for (const KvBuffer& buffer : plan.buffers) {
    buffers.push_back(
        {{"size_bytes", buffer.size_bytes}, {"layers", layer_names_json(plan, buffer.layers)}});
  }
  out["buffers"] = buffers;

  const int64_t bytes_per_token = kv_bytes_per_token(plan);
  const std::optional<int64_t> max_tokens = plan.max_sequence_tokens();
  const std::optional<int64_t> tokens_per_gib = rank_tokens_per_gib(plan);
  out["tensor_parallel"] = {
      {"size", report.tensor_parallel_size},
      {"params_per_rank", report.rank_params},
      {"weight_bytes_per_rank", report.rank_weight_bytes},
      {"kv_tokens_per_gib_per_rank", tokens_per_gib ? nlohmann::json(*tokens_per_gib) : nullptr},
      {"kv_tokens_per_gib_per_rank_at_bfloat16",
       report.bf16_tokens_per_gib ? nlohmann::json(*report.bf16_tokens_per_gib) : nullptr}};
  out["decode_context_parallel"] = {{"size", plan.context_parallel_size},
                                    {"interleave", plan.context_interleave}};
  out["kv_cache"] = {
      {"page_bytes", plan.page_bytes()},
      {"slots_per_block", plan.slots_per_block},
      {"bytes_per_block_id", plan.bytes_per_block_id()},
      {"num_blocks", plan.num_blocks},
      {"null_blocks", kNullBlocks},
      {"total_bytes", plan.total_bytes()},
      {"bytes_per_token", bytes_per_token},
      {"max_tokens_per_step", plan.max_tokens_per_step},
      {"blocks_per_max_model_len_sequence", plan.blocks_for_sequence(plan.max_model_len)},
      {"max_sequence_tokens", max_tokens ? nlohmann::json(*max_tokens) : nlohmann::json(nullptr)},
      {"max_concurrency", plan.max_concurrency()}};
  return out;
}

std::string inspect_report_text(const InspectReport& report) {
  const KvCachePlan& plan = report.plan;
  std::string out;
  auto describe = [](const ModelConfig& m) {
    return fmt::format("{} ({}, {} layers) from {}", m.architecture, m.model_type, m.layers.size(),
                       m.source);
  };
  out += fmt::format("model        {}\n", describe(report.target));
  if (report.drafter) out += fmt::format("draft model  {}\n", describe(*report.drafter));
  if (report.speculative) {
    out += fmt::format("speculative  {}, {} draft tokens a step\n",
                       speculative_method_name(report.speculative->method),
                       report.speculative->num_speculative_tokens);
  }
  out += fmt::format("kv dtype     {}    attention backend {}    max_model_len {}\n",
                     dtype_name(report.dtype), report.attention_backend, plan.max_model_len);
  const int64_t bytes_per_token = kv_bytes_per_token(plan);
  const std::optional<int64_t> tokens_per_gib = rank_tokens_per_gib(plan);
  const std::string sizes =
      fmt::format("weights {} ({:.3f} B params), KV {} bytes/token held ({} tokens per GiB)",
                  format_bytes(report.rank_weight_bytes), report.rank_params / 1e9, bytes_per_token,
                  tokens_per_gib ? std::to_string(*tokens_per_gib) : "-");
  if (tokens_per_gib && report.bf16_tokens_per_gib) {
    out += fmt::format(
        "kv gain      {} tokens per GiB against {} in bfloat16 ({:.2f}x)\n", *tokens_per_gib,
        *report.bf16_tokens_per_gib,
        static_cast<double>(*tokens_per_gib) / static_cast<double>(*report.bf16_tokens_per_gib));
  }
  const int64_t ranks =
      world_size(report.tensor_parallel_size, report.decode_context_parallel_size);
  if (ranks == 1) {
    out += fmt::format("memory       {}\n\n", sizes);
  } else {
    out += fmt::format(
        "parallel     {} ranks (TP {}, DCP {}, interleave {}), each: {}; the tables are one "
        "rank's\n\n",
        ranks, report.tensor_parallel_size, report.decode_context_parallel_size,
        plan.context_interleave, sizes);
  }

  out += "layers\n";
  TextTable layers({"#", "layer", "type", "window", "q_heads", "kv_heads", "head_k", "head_v",
                    "kv source", "bytes/token", "group"});
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const KvLayer& layer = plan.layers[i];
    const LayerAttentionConfig& a = layer.attention;
    layers.add({std::to_string(i), layer.name, std::string(attention_kind_name(a.kind)),
                a.kind == AttentionKind::kSliding ? std::to_string(a.sliding_window) : "-",
                std::to_string(a.num_q_heads), std::to_string(a.num_kv_heads),
                std::to_string(a.head_size_k), std::to_string(a.head_size_v),
                layer.owns_kv() ? "own" : "shares " + plan.layers[layer.source].name,
                std::to_string(layer_bytes_per_token(layer)),
                std::to_string(plan.placements[i].group)});
  }
  out += layers.render("  ") + "\n";

  out += fmt::format("page sizes (pool page {} bytes)\n", plan.page_bytes());
  TextTable pages({"layers", "type", "block", "page bytes", "decision", "physical page", "waste"});
  for (const PageDecision& d : plan.unification.decisions) {
    std::string decision(page_action_name(d.action));
    if (d.action == PageAction::kScaled) {
      decision = fmt::format("scaled x{} (block {} -> {})", d.scale, d.before.page.block_size,
                             d.after.page.block_size);
    } else if (d.action == PageAction::kPadded) {
      decision = fmt::format("padded to {}", d.after.page_bytes());
    }
    pages.add({layer_list(d.layers), std::string(attention_kind_name(d.before.kind)),
               std::to_string(d.before.page.block_size), std::to_string(d.before.page_bytes()),
               decision, std::to_string(d.after.page_bytes()),
               fmt::format("{:.1f}%", 100.0 * d.waste_fraction())});
  }
  out += pages.render("  ") + "\n";

  out += fmt::format("groups ({} tensors share each block id)\n", plan.slots_per_block);
  TextTable groups({"group", "type", "window", "block", "kv_heads", "head_k/v", "dtype",
                    "page real", "page padded", "block stride idx", "layers"});
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const KvSpec& spec = plan.groups[g].spec;
    groups.add({std::to_string(g), std::string(attention_kind_name(spec.kind)), window_text(spec),
                std::to_string(spec.page.block_size), std::to_string(spec.page.num_kv_heads),
                fmt::format("{}/{}", spec.page.head_size_k, spec.page.head_size_v),
                std::string(dtype_name(spec.page.dtype)), std::to_string(spec.real_page_bytes()),
                std::to_string(spec.page_bytes()), spec.indexes_kv_by_block_stride ? "yes" : "no",
                layer_list(plan.groups[g].layers)});
  }
  out += groups.render("  ") + "\n";

  out += fmt::format("buffers ({})\n", kv_buffer_layout_name(plan.layout));
  TextTable buffers({"buffer", "size", "layers"});
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    buffers.add({std::to_string(b), format_bytes(plan.buffers[b].size_bytes),
                 layer_list(plan.buffers[b].layers)});
  }
  out += buffers.render("  ") + "\n";

  const std::optional<int64_t> max_tokens = plan.max_sequence_tokens();
  out += "kv cache\n";
  out += fmt::format("  page size          {} bytes, x{} per block id = {}\n", plan.page_bytes(),
                     plan.slots_per_block, format_bytes(plan.bytes_per_block_id()));
  out += fmt::format("  blocks             {} (block 0 is the null block)\n", plan.num_blocks);
  out += fmt::format("  total KV memory    {} ({} bytes)\n", format_bytes(plan.total_bytes()),
                     plan.total_bytes());
  out += fmt::format("  one sequence       up to {} tokens\n",
                     max_tokens ? std::to_string(*max_tokens) : "unbounded (sliding layers only)");
  out += fmt::format(
      "  at max_model_len   {} blocks per sequence, {:.2f} sequences at once (steps of up to {} "
      "tokens)\n",
      plan.blocks_for_sequence(plan.max_model_len), plan.max_concurrency(),
      plan.max_tokens_per_step);
  return out;
}

void add_inspect_command(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* inspect = app.add_subcommand(
      "inspect", "Plan the KV cache of a model from its config.json (no weights needed)");
  inspect->add_option("--model", options->model_dir, "Model directory holding config.json")
      ->required();
  inspect->add_option("--speculative-config", options->speculative_config,
                      "The drafter, as vLLM spells it: '{\"method\": \"mtp\" | \"draft_model\", "
                      "\"model\": DIR, \"num_speculative_tokens\": K}'");
  inspect->add_option("--draft-model", options->draft_model_dir,
                      "Drafter directory (a Gemma 4 assistant or any supported model); the short "
                      "form of --speculative-config");
  add_cache_flags(*inspect, options->cache);
  inspect
      ->add_option("--max-num-batched-tokens", options->max_num_batched_tokens,
                   "Token budget per step, which bounds a sliding-window group's blocks")
      ->capture_default_str();
  inspect
      ->add_option("--tensor-parallel-size", options->tensor_parallel_size,
                   "Plan one rank of this many: its share of the KV heads and of the weights")
      ->capture_default_str();
  inspect
      ->add_option("--decode-context-parallel-size", options->decode_context_parallel_size,
                   "Plan one rank of this many that deal each sequence's KV between them")
      ->capture_default_str();
  inspect
      ->add_option("--dcp-kv-cache-interleave-size", options->dcp_kv_cache_interleave_size,
                   "Tokens dealt to one context-parallel rank at a time")
      ->capture_default_str();
  inspect->add_flag("--json", options->json, "Print the plan as JSON (docs/inspect-json.md)");
  inspect->callback([options] {
    const InspectReport report = build_inspect_report(*options);
    if (options->json) {
      fmt::print("{}\n", inspect_report_json(report).dump(2));
    } else {
      fmt::print("{}", inspect_report_text(report));
    }
  });
}

}  // namespace pagoda
