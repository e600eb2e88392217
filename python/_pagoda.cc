// The Python module's native half (_pagoda): the library facade (engine/llm.h) with its options
// read through the CLI's own flag definitions, so keyword names, defaults and errors are the
// CLI's. The engine runs with the GIL released; waits wake every 50 ms to let Ctrl-C through,
// which aborts what the call started. python/pagoda/__init__.py builds vLLM's API on top.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cli/engine_flags.h"
#include "core/error.h"
#include "core/files.h"
#include "engine/llm.h"

namespace py = pybind11;

namespace pagoda {
namespace {

constexpr auto kWake = std::chrono::milliseconds(50);

// Raises the pending Python exception (KeyboardInterrupt after Ctrl-C) in the waiting thread.
void check_signals() {
  const py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// EngineOptions from keyword arguments named as the CLI's flags (max_num_seqs=8 is
// --max-num-seqs 8): True sets a flag, False sets its --no- form where there is one, a dict is
// JSON (speculative_config), a list or tuple its items' str() comma-separated
// (kv_cache_dtype_skip_layers=["sliding_window", 3]; empty: not given), anything else its str().
// Unknown names and bad values raise ValueError with the CLI's message.
EngineOptions engine_options(const py::dict& kwargs) {
  EngineOptions options;
  CLI::App app("pagoda");
  add_model_flags(app, options.paths);
  add_chat_template_flag(app, options.paths);
  add_engine_flags(app, options);
  std::vector<std::string> args;
  const py::module_ json = py::module_::import("json");
  for (const auto& [key, value] : kwargs) {
    const std::string name = "--" + [&] {
      std::string flag = py::str(key);
      for (char& c : flag)
        c = c == '_' ? '-' : c;
      return flag;
    }();
    if (value.is_none()) continue;
    if (name == "--help" || name == "--help-all") {
      throw py::value_error(fmt::format("{} is not an engine option", std::string(py::str(key))));
    }
    if (py::isinstance<py::bool_>(value)) {
      if (value.cast<bool>()) {
        args.push_back(name);
      } else if (app.get_option_no_throw("--no-" + name.substr(2)) != nullptr) {
        args.push_back("--no-" + name.substr(2));
      }
      continue;
    }
    // One argument, --name=value: a value that starts with "--" is then never taken for a flag.
    if (py::isinstance<py::dict>(value)) {
      args.push_back(name + "=" + std::string(py::str(json.attr("dumps")(value))));
    } else if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
      if (py::len(value) == 0) continue;
      std::string items;
      for (const py::handle item : value)
        items += (items.empty() ? "" : ",") + std::string(py::str(item));
      args.push_back(name + "=" + items);
    } else {
      args.push_back(name + "=" + std::string(py::str(value)));
    }
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
  try {
    app.parse(args);
  } catch (const CLI::ParseError& error) {
    throw py::value_error(error.what());
  }
  return options;
}

// Prompts from Python: str, a list of token ids, or a dict with "prompt", "prompt_token_ids" or
// "messages".
Prompt to_prompt(const py::handle& item) {
  if (py::isinstance<py::str>(item)) return Prompt::of_text(item.cast<std::string>());
  if (py::isinstance<py::dict>(item)) {
    const py::dict dict = item.cast<py::dict>();
    if (dict.contains("prompt_token_ids")) {
      return Prompt::of_ids(dict["prompt_token_ids"].cast<std::vector<int32_t>>());
    }
    if (dict.contains("prompt")) return Prompt::of_text(dict["prompt"].cast<std::string>());
    throw py::value_error("a prompt dict needs 'prompt' or 'prompt_token_ids'");
  }
  try {
    return Prompt::of_ids(item.cast<std::vector<int32_t>>());
  } catch (const py::cast_error&) {
    throw py::type_error("a prompt is a str, a list of token ids (int) or a dict, not " +
                         std::string(py::str(py::type::of(item).attr("__name__"))));
  }
}

// A Python value (chat messages) as JSON, through the json module: NaN and infinities raise
// ValueError there, and the text then passes the nesting check every JSON input does.
nlohmann::ordered_json to_json(const py::handle& value) {
  const py::module_ json = py::module_::import("json");
  const std::string text = py::str(json.attr("dumps")(value, py::arg("allow_nan") = false));
  return parse_json_text<nlohmann::ordered_json>(text, "chat messages");
}

}  // namespace
}  // namespace pagoda

PYBIND11_MODULE(_pagoda, m) {
  using namespace pagoda;
  m.doc() = "pagoda's native engine (use the pagoda package)";
  py::register_exception<Error>(m, "EngineError", PyExc_ValueError);

  py::class_<SamplingParams>(m, "SamplingParams")
      .def(py::init([](double temperature, int64_t top_k, double top_p, double min_p,
                       std::optional<uint64_t> seed, int64_t max_tokens, int64_t min_tokens,
                       std::vector<int32_t> stop_token_ids, bool ignore_eos,
                       double presence_penalty, double frequency_penalty, double repetition_penalty,
                       std::optional<int64_t> logprobs, std::optional<int64_t> prompt_logprobs,
                       std::vector<std::string> stop) {
             SamplingParams params{.temperature = temperature,
                                   .top_k = top_k,
                                   .top_p = top_p,
                                   .min_p = min_p,
                                   .seed = seed,
                                   .max_tokens = max_tokens,
                                   .min_tokens = min_tokens,
                                   .stop_token_ids = std::move(stop_token_ids),
                                   .ignore_eos = ignore_eos,
                                   .presence_penalty = presence_penalty,
                                   .frequency_penalty = frequency_penalty,
                                   .repetition_penalty = repetition_penalty,
                                   .logprobs = logprobs.value_or(0),
                                   .prompt_logprobs = prompt_logprobs,
                                   .stop = std::move(stop)};
             // Ranges now; token ids against the model's vocabulary when a request is made.
             params.validate(std::numeric_limits<int32_t>::max());
             return params;
           }),
           py::kw_only(), py::arg("temperature") = 1.0, py::arg("top_k") = 0,
           py::arg("top_p") = 1.0, py::arg("min_p") = 0.0, py::arg("seed") = py::none(),
           py::arg("max_tokens") = 16, py::arg("min_tokens") = 0,
           py::arg("stop_token_ids") = std::vector<int32_t>{}, py::arg("ignore_eos") = false,
           py::arg("presence_penalty") = 0.0, py::arg("frequency_penalty") = 0.0,
           py::arg("repetition_penalty") = 1.0, py::arg("logprobs") = py::none(),
           py::arg("prompt_logprobs") = py::none(), py::arg("stop") = std::vector<std::string>{})
      .def_readonly("temperature", &SamplingParams::temperature)
      .def_readonly("top_k", &SamplingParams::top_k)
      .def_readonly("top_p", &SamplingParams::top_p)
      .def_readonly("min_p", &SamplingParams::min_p)
      .def_readonly("seed", &SamplingParams::seed)
      .def_readonly("max_tokens", &SamplingParams::max_tokens)
      .def_readonly("min_tokens", &SamplingParams::min_tokens)
      .def_readonly("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_readonly("ignore_eos", &SamplingParams::ignore_eos)
      .def_readonly("presence_penalty", &SamplingParams::presence_penalty)
      .def_readonly("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readonly("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readonly("prompt_logprobs", &SamplingParams::prompt_logprobs)
      .def_readonly("stop", &SamplingParams::stop)
      .def_property_readonly("_logprobs", [](const SamplingParams& p) { return p.logprobs; });

  py::class_<Logprobs>(m, "_Logprobs")
      .def_readonly("logprob", &Logprobs::logprob)
      .def_readonly("rank", &Logprobs::rank)
      .def_property_readonly("top", [](const Logprobs& l) {
        std::vector<std::pair<int32_t, float>> top;
        for (const TokenLogprob& entry : l.top)
          top.emplace_back(entry.token_id, entry.logprob);
        return top;
      });
  const auto reason = [](FinishReason r) { return std::string(to_string(r)); };
  py::class_<RequestOutput>(m, "_RequestOutput")
      .def_readonly("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_readonly("prompt_logprobs", &RequestOutput::prompt_logprobs)
      .def_readonly("text", &RequestOutput::text)
      .def_readonly("token_ids", &RequestOutput::token_ids)
      .def_readonly("logprobs", &RequestOutput::logprobs)
      .def_property_readonly("finish_reason",
                             [reason](const RequestOutput& o) { return reason(o.finish_reason); });
  py::class_<StreamDelta>(m, "_StreamDelta")
      .def_readonly("text", &StreamDelta::text)
      .def_readonly("token_ids", &StreamDelta::token_ids)
      .def_readonly("logprobs", &StreamDelta::logprobs)
      .def_readonly("prompt_logprobs", &StreamDelta::prompt_logprobs)
      .def_property_readonly("finish_reason", [reason](const StreamDelta& d) {
        return d.finish_reason == FinishReason::kNone ? std::string() : reason(d.finish_reason);
      });

  py::class_<LlmStream>(m, "_Stream")
      .def("next",
           [](LlmStream& stream) -> std::optional<StreamDelta> {
             // Waits with the GIL released, waking to let Ctrl-C abort the request.
             const py::gil_scoped_release released;
             while (!stream.finished()) {
               if (std::optional<StreamDelta> delta = stream.next(kWake)) return delta;
               try {
                 check_signals();
               } catch (...) {
                 stream.abort();
                 throw;
               }
             }
             return std::nullopt;
           })
      .def("abort", &LlmStream::abort)
      .def_property_readonly("finished", &LlmStream::finished)
      .def_property_readonly("prompt_token_ids", &LlmStream::prompt_token_ids);

  py::class_<EngineService::Snapshot>(m, "_Stats")
      .def_readonly("running", &EngineService::Snapshot::running)
      .def_readonly("waiting", &EngineService::Snapshot::waiting)
      .def_readonly("kv_cache_usage", &EngineService::Snapshot::kv_cache_usage)
      .def_property_readonly(
          "prompt_tokens", [](const EngineService::Snapshot& s) { return s.totals.prompt_tokens; })
      .def_property_readonly(
          "generated_tokens",
          [](const EngineService::Snapshot& s) { return s.totals.generated_tokens; })
      .def_property_readonly("preemptions",
                             [](const EngineService::Snapshot& s) { return s.totals.preemptions; })
      .def_property_readonly(
          "spec_draft_tokens",
          [](const EngineService::Snapshot& s) { return s.totals.spec_draft_tokens; })
      .def_property_readonly("spec_accepted_tokens", [](const EngineService::Snapshot& s) {
        return s.totals.spec_accepted_tokens;
      });

  py::class_<Llm>(m, "_Llm")
      .def(py::init([](const py::kwargs& kwargs) {
        const EngineOptions options = engine_options(kwargs);
        const py::gil_scoped_release released;
        return Llm::load(options);
      }))
      .def("generate",
           [](Llm& llm, const py::list& prompts, const std::vector<SamplingParams>& params) {
             std::vector<Prompt> inputs;
             for (const py::handle& item : prompts)
               inputs.push_back(to_prompt(item));
             const py::gil_scoped_release released;
             return llm.generate_each(inputs, params, check_signals);
           })
      .def("chat",
           [](Llm& llm, const py::list& conversations, const std::vector<SamplingParams>& params) {
             std::vector<Prompt> inputs;
             for (const py::handle& item : conversations)
               inputs.push_back(Prompt::of_messages(to_json(item)));
             const py::gil_scoped_release released;
             return llm.generate_each(inputs, params, check_signals);
           })
      // A stream keeps its Llm alive (it aborts its request through it when dropped).
      .def(
          "stream",
          [](Llm& llm, const py::handle& prompt, const SamplingParams& params) {
            const Prompt input = to_prompt(prompt);
            return llm.stream(input, params);
          },
          py::keep_alive<0, 1>())
      .def(
          "chat_stream",
          [](Llm& llm, const py::handle& messages, const SamplingParams& params) {
            return llm.stream(Prompt::of_messages(to_json(messages)), params);
          },
          py::keep_alive<0, 1>())
      .def("encode", &Llm::tokenize, py::arg("text"), py::arg("add_special_tokens") = true)
      .def(
          "decode",
          [](const Llm& llm, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            return llm.detokenize(ids, skip_special_tokens);
          },
          py::arg("ids"), py::arg("skip_special_tokens") = true)
      .def("stats", &Llm::stats)
      .def("metrics_text", &Llm::metrics_text)
      .def_property_readonly("model_dir", &Llm::model_dir)
      .def_property_readonly("max_model_len",
                             [](const Llm& llm) { return llm.plan().max_model_len; })
      .def_property_readonly("vocab_size", [](const Llm& llm) { return llm.config().vocab_size; })
      // The sampling fields --generation-config gives requests that leave them out, named as
      // SamplingParams names them.
      .def_property_readonly("generation_defaults",
                             [](const Llm& llm) {
                               const GenerationDefaults& d = llm.config().generation;
                               py::dict fields;
                               if (d.temperature) fields["temperature"] = *d.temperature;
                               if (d.top_k) fields["top_k"] = *d.top_k;
                               if (d.top_p) fields["top_p"] = *d.top_p;
                               if (d.min_p) fields["min_p"] = *d.min_p;
                               if (d.repetition_penalty) {
                                 fields["repetition_penalty"] = *d.repetition_penalty;
                               }
                               if (d.max_new_tokens) fields["max_tokens"] = *d.max_new_tokens;
                               return fields;
                             })
      .def_property_readonly("has_tokenizer",
                             [](const Llm& llm) { return llm.tokenizer() != nullptr; });
}
