#include "tokenizer/post_processor.h"

#include <optional>

#include "core/error.h"

namespace pagoda {
namespace {

using Ids = std::vector<int32_t>;

// TemplateProcessing's `single` template: special tokens and the sequence "A" in order.
PostProcessor template_processing(const nlohmann::json& config, const TokenLookup& lookup) {
  std::vector<std::optional<int32_t>> items;  // nullopt stands for the sequence
  for (const nlohmann::json& item : config.at("single")) {
    if (item.contains("SpecialToken")) {
      items.emplace_back(lookup(item["SpecialToken"].at("id").get<std::string>()));
    } else if (item.contains("Sequence")) {
      items.emplace_back(std::nullopt);
    } else {
      fail("tokenizer.json: TemplateProcessing item {} is not a SpecialToken or a Sequence",
           item.dump());
    }
  }
  return [items](Ids ids, bool add_special_tokens) {
    Ids out;
    for (const std::optional<int32_t>& item : items) {
      if (!item) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else if (add_special_tokens) {
        out.push_back(*item);
      }
    }
    return out;
  };
}

// BertProcessing and RobertaProcessing: [cls] tokens [sep].
PostProcessor cls_sep(const nlohmann::json& config, const TokenLookup& lookup) {
  const int32_t cls = lookup(config.at("cls").at(0).get<std::string>());
  const int32_t sep = lookup(config.at("sep").at(0).get<std::string>());
  return [cls, sep](Ids ids, bool add_special_tokens) {
    if (!add_special_tokens) return ids;
    ids.insert(ids.begin(), cls);
    ids.push_back(sep);
    return ids;
  };
}

}  // namespace

PostProcessor make_post_processor(const nlohmann::json& config, const TokenLookup& lookup) {
  if (config.is_null()) return {};
  const std::string type = config.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<PostProcessor> steps;
    for (const nlohmann::json& step : config.value("processors", nlohmann::json::array())) {
      if (PostProcessor processor = make_post_processor(step, lookup)) {
        steps.push_back(std::move(processor));
      }
    }
    return [steps = std::move(steps)](Ids ids, bool add_special_tokens) {
      for (const PostProcessor& step : steps)
        ids = step(std::move(ids), add_special_tokens);
      return ids;
    };
  }
  if (type == "TemplateProcessing") return template_processing(config, lookup);
  if (type == "BertProcessing" || type == "RobertaProcessing") return cls_sep(config, lookup);
  if (type == "ByteLevel") return [](Ids ids, bool) { return ids; };
  fail("tokenizer.json: post-processor type '{}' is not supported", type);
}

}  // namespace pagoda
