// pagoda from C++: the embedded default model on the CPU, two prompts in one batch, then one
// streamed. Usage: generate_example [model directory]
#include <cstdio>
#include <exception>

#include "engine/llm.h"

int main(int argc, char** argv) {
  try {
    pagoda::EngineOptions options;  // the flags' defaults: the CPU, 512 MiB of KV cache
    if (argc > 1) options.paths.model_dir = argv[1];
    const auto llm = pagoda::Llm::load(options);

    const pagoda::SamplingParams greedy{.temperature = 0.0, .max_tokens = 24};
    const std::vector<pagoda::Prompt> prompts = {pagoda::Prompt::of_text("In the beginning"),
                                                 pagoda::Prompt::of_text("And God said")};
    for (const pagoda::RequestOutput& out : llm->generate(prompts, greedy))
      std::printf("%s [%s]\n", out.text.c_str(), std::string(to_string(out.finish_reason)).c_str());

    const auto stream = llm->stream(pagoda::Prompt::of_text("The LORD is my shepherd"), greedy);
    while (const auto delta = stream->next()) {
      std::printf("%s", delta->text.c_str());
      std::fflush(stdout);
    }
    std::printf("\n");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "generate_example: %s\n", error.what());
    return 1;
  }
  return 0;
}
