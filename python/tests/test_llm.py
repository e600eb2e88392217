"""The Python API against the CLI and the transformers fixtures, on the CPU."""

import asyncio
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from pagoda import LLM, EngineError, SamplingParams

SOURCE = os.environ.get("PAGODA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PAGODA = os.environ.get("PAGODA_BIN", os.path.join(SOURCE, "build", "release", "src", "pagoda"))
LLAMA_TINY = os.path.join(SOURCE, "tests", "fixtures", "llama-tiny")
PROMPT = "In the beginning God created"


@pytest.fixture(scope="module")
def llm():
    return LLM(kv_cache_memory="64MiB")  # the embedded default model


def cli_generate(*args):
    """`pagoda generate --json` on the embedded model: one JSON object per request."""
    done = subprocess.run([PAGODA, "generate", "--json", *args], capture_output=True, text=True,
                          check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def wait_idle(llm):
    for _ in range(500):
        stats = llm.stats()
        if stats.running + stats.waiting == 0:
            return True
        time.sleep(0.01)
    return False


def test_tokens_and_logprobs_match_the_cli(llm):
    expected = cli_generate(PROMPT, "--max-tokens", "20", "--logprobs", "2",
                            "--prompt-logprobs", "0")[0]
    params = SamplingParams(temperature=0, max_tokens=20, logprobs=2, prompt_logprobs=0)
    out = llm.generate(PROMPT, params)[0]
    assert out.prompt == PROMPT
    assert out.prompt_token_ids == expected["prompt_token_ids"]
    completion = out.outputs[0]
    assert completion.token_ids == expected["token_ids"]
    assert completion.text == expected["text"]
    assert completion.finish_reason == expected["finish_reason"]
    for position, reference in zip(completion.logprobs, expected["logprobs"]):
        assert position[reference["token_id"]].logprob == pytest.approx(reference["logprob"],
                                                                         abs=1e-5)
        for top in reference["top_logprobs"]:
            assert position[top["token_id"]].logprob == pytest.approx(top["logprob"], abs=1e-5)
    assert out.prompt_logprobs[0] is None
    for position, token, reference in zip(out.prompt_logprobs[1:], out.prompt_token_ids[1:],
                                          expected["prompt_logprobs"][1:]):
        assert position[token].logprob == pytest.approx(reference["logprob"], abs=1e-5)
    # Token ids in, the same tokens out; no logprobs unless asked for.
    again = llm.generate(prompt_token_ids=[out.prompt_token_ids],
                         sampling_params=SamplingParams(temperature=0, max_tokens=20))[0]
    assert again.outputs[0].token_ids == completion.token_ids
    assert again.outputs[0].logprobs is None and again.prompt_logprobs is None


def test_chat_matches_the_cli(llm):
    expected = cli_generate("--chat", "Who made the light?", "--max-tokens", "12")[0]
    messages = [{"role": "user", "content": "Who made the light?"}]
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=12))[0]
    assert out.prompt_token_ids == expected["prompt_token_ids"]
    assert out.outputs[0].token_ids == expected["token_ids"]


def test_greedy_tokens_match_transformers():
    tiny = LLM(model=LLAMA_TINY, dtype="float32", kv_cache_memory="16MiB")
    with open(os.path.join(LLAMA_TINY, "reference.json")) as f:
        reference = json.load(f)
    prompts = [p["prompt_token_ids"] for p in reference["prompts"]]
    params = [SamplingParams(temperature=0, max_tokens=len(p["greedy_token_ids"]), ignore_eos=True)
              for p in reference["prompts"]]
    outs = tiny.generate(prompt_token_ids=prompts, sampling_params=params)
    for out, expected in zip(outs, reference["prompts"]):
        assert out.outputs[0].token_ids == expected["greedy_token_ids"]
        assert out.outputs[0].finish_reason == "length"


def test_generation_config_gives_the_default_sampling_params(llm, tmp_path):
    defaults = llm.get_default_sampling_params()  # the embedded model's file has none
    assert (defaults.temperature, defaults.top_k, defaults.max_tokens) == (1.0, 0, 16)
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"temperature": 0, "top_k": 5, "max_new_tokens": 3}))
    greedy = LLM(model=LLAMA_TINY, kv_cache_memory="16MiB", generation_config=str(tmp_path))
    defaults = greedy.get_default_sampling_params()
    assert (defaults.temperature, defaults.top_k, defaults.max_tokens) == (0.0, 5, 3)
    # A call without sampling_params runs them: greedy, three tokens.
    out = greedy.generate(prompt_token_ids=[5, 6, 7])[0].outputs[0]
    explicit = greedy.generate(prompt_token_ids=[5, 6, 7],
                               sampling_params=SamplingParams(temperature=0, max_tokens=3))
    assert out.token_ids == explicit[0].outputs[0].token_ids
    assert len(out.token_ids) == 3 or out.finish_reason == "stop"
    engine = LLM(model=LLAMA_TINY, kv_cache_memory="16MiB", generation_config="vllm")
    assert engine.get_default_sampling_params().max_tokens == 16


def test_streams_add_up_and_abort(llm):
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    whole = llm.generate([PROMPT], params)[0].outputs[0]
    deltas = list(llm.stream(PROMPT, params))
    assert len(deltas) > 1
    assert "".join(d.text for d in deltas) == whole.text
    assert [t for d in deltas for t in d.token_ids] == whole.token_ids
    assert deltas[-1].finish_reason == "length"
    assert all(d.finish_reason is None for d in deltas[:-1])

    async def collect():
        return [d async for d in llm.stream(PROMPT, params)]

    assert "".join(d.text for d in asyncio.run(collect())) == whole.text

    stream = llm.stream(PROMPT, SamplingParams(temperature=0, max_tokens=2000, ignore_eos=True))
    next(stream)
    stream.abort()
    assert list(stream)[-1].finish_reason == "abort"
    assert wait_idle(llm)

    # A stream keeps its engine alive after the last other reference is gone.
    orphan = LLM(kv_cache_memory="16MiB").stream(PROMPT, params)
    assert "".join(d.text for d in orphan)

    stop = whole.text[len(whole.text) // 2:][:6]
    stopped = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True,
                                                  stop=[stop]))[0].outputs[0]
    assert stopped.finish_reason == "stop"
    assert stopped.text == whole.text[:whole.text.find(stop)]


def test_threads_share_the_engine(llm):
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    prompts = ["In the beginning", "And God said", "The LORD is my shepherd", "Blessed are"]
    expected = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    results = {}

    def work(index):
        results[index] = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    for tokens in results.values():
        assert tokens == expected


def test_seeded_sampling_repeats(llm):
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=7, max_tokens=16)
    first = llm.generate([PROMPT, PROMPT], params)
    assert first[0].outputs[0].token_ids == first[1].outputs[0].token_ids
    assert llm.generate(PROMPT, params)[0].outputs[0].token_ids == first[0].outputs[0].token_ids


def test_tokenizer(llm):
    tokenizer = llm.get_tokenizer()
    ids = tokenizer.encode(PROMPT)
    assert ids == llm.generate(PROMPT, SamplingParams(max_tokens=1))[0].prompt_token_ids
    assert tokenizer.decode(ids) == PROMPT


def test_bad_arguments_raise(llm):
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(TypeError):
        SamplingParams(temprature=0.5)
    with pytest.raises(TypeError):
        SamplingParams(max_tokens="many")
    with pytest.raises(ValueError):
        LLM(no_such_option=1)
    with pytest.raises(ValueError, match="kv-cache-dtype"):
        LLM(kv_cache_dtype="int3")
    with pytest.raises(ValueError, match="kv-cache-dtype --enforce-eager"):
        LLM(kv_cache_dtype="--enforce-eager")  # a value, never a flag
    with pytest.raises(ValueError, match="not an engine option"):
        LLM(help=True)
    with pytest.raises(EngineError):
        LLM(model="/nonexistent/model")
    with pytest.raises(ValueError, match="prompt 1"):
        llm.generate(prompt_token_ids=[[1, 2], [1, 1 << 30]])
    with pytest.raises(ValueError):
        llm.generate(["a", "b"], [SamplingParams()])
    with pytest.raises(TypeError, match="float"):
        llm.generate([1.5])
    with pytest.raises(TypeError):
        llm.generate(prompt_token_ids=[[1, "two"]])
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate(PROMPT, SamplingParams(max_tokens=1 << 20))
    with pytest.raises(ValueError, match="logprobs"):
        SamplingParams(prompt_logprobs=10**9)
    with pytest.raises(ValueError):
        llm.chat([{"role": "user", "content": float("nan")}])
    nested = []
    for _ in range(300):
        nested = [nested]
    with pytest.raises(ValueError, match="nest"):
        llm.chat([{"role": "user", "content": nested}])
    tiny = LLM(model=LLAMA_TINY, kv_cache_memory="16MiB")
    with pytest.raises(ValueError, match="tokenizer"):
        tiny.generate("text needs a tokenizer")
    assert wait_idle(llm)


def test_ctrl_c_aborts_the_call(llm):
    # Python turns SIGINT into KeyboardInterrupt only where it was not ignored at startup (a job
    # started in the background by a non-interactive shell inherits it ignored): install the
    # handler Python would have.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=2000, ignore_eos=True))
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    assert wait_idle(llm)
    # The engine goes on serving.
    assert llm.generate(PROMPT, SamplingParams(max_tokens=4))[0].outputs[0].token_ids


def proc_status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def test_building_and_dropping_leaks_nothing():
    params = SamplingParams(temperature=0, max_tokens=8)

    def cycle():
        tiny = LLM(model=LLAMA_TINY, kv_cache_memory="16MiB")
        tiny.generate(prompt_token_ids=[[1, 2, 3]], sampling_params=params)
        del tiny

    cycle()  # first-use allocations (thread pools, BLAS) out of the way
    threads = proc_status("Threads")
    memory = proc_status("VmRSS")
    for _ in range(10):
        cycle()
    assert proc_status("Threads") == threads
    assert proc_status("VmRSS") - memory < 16 * 1024  # kB: well below one model and cache each


@pytest.mark.parametrize("options", [
    {"speculative_config": {"num_speculative_tokens": 3}},  # the embedded model's assistant
    {"tensor_parallel_size": 2},                             # two CPU ranks
])
def test_speculative_and_parallel_options_pass_through(llm, options):
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    prompts = ["In the beginning", "And God said"]
    expected = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    other = LLM(kv_cache_memory="64MiB", **options)
    assert [o.outputs[0].token_ids for o in other.generate(prompts, params)] == expected
    if "speculative_config" in options:
        assert other.stats().spec_draft_tokens > 0


def test_list_options_pass_comma_separated():
    """kv_cache_dtype_skip_layers=[0, 1] is --kv-cache-dtype-skip-layers=0,1: both of llama-tiny's
    layers kept out of the e4m3 cache, so the tokens and log-probabilities are the default
    cache's; an empty list passes nothing."""
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=0)

    def run(**options):
        out = LLM(model=LLAMA_TINY, kv_cache_memory="16MiB", **options).generate(
            prompt_token_ids=[5, 6, 7, 8], sampling_params=params)[0].outputs[0]
        return out.token_ids, [next(iter(p.values())).logprob for p in out.logprobs]

    plain = run()
    assert run(kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=[0, 1]) == plain
    assert run(kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=(1,)) != plain
    assert run(kv_cache_dtype_skip_layers=[]) == plain
