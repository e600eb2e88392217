"""pagoda from Python, with vLLM's offline API.

    from pagoda import LLM, SamplingParams
    llm = LLM()  # the embedded default model, on the CPU
    for out in llm.generate(["In the beginning"], SamplingParams(temperature=0, max_tokens=16)):
        print(out.outputs[0].text)

Keyword arguments of LLM are the CLI's flags (max_num_seqs=8 is --max-num-seqs 8). The engine
runs with the GIL released, so other Python threads run meanwhile and may call the same LLM.
"""

import asyncio
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

from . import _pagoda
from ._pagoda import EngineError

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "StreamDelta",
           "EngineError"]


class SamplingParams(_pagoda.SamplingParams):
    """vLLM's sampling fields, with the CLI's and the server's defaults (temperature 1, max_tokens
    16). Keyword arguments only; a value out of range raises ValueError with the engine's message.
    logprobs=None reports no log-probabilities, k reports the chosen token's and k alternatives."""

    def __init__(self, *, logprobs: Optional[int] = None, **kwargs):
        super().__init__(logprobs=logprobs, **kwargs)
        self.logprobs = logprobs


@dataclass
class Logprob:
    logprob: float
    rank: Optional[int] = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str]


@dataclass
class RequestOutput:
    prompt: Optional[str]
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]]
    outputs: List[CompletionOutput]
    finished: bool = True


@dataclass
class StreamDelta:
    """What one engine step added to a streamed request."""
    text: str
    token_ids: List[int]
    logprobs: Optional[List[Dict[int, Logprob]]] = None
    finish_reason: Optional[str] = None
    prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]] = field(default=None)


def _position(token_id, entry):
    """A position's log-probabilities as vLLM gives them: the chosen token and the top ones."""
    out = {token_id: Logprob(entry.logprob, entry.rank if entry.rank > 0 else None)}
    for rank, (top_id, top_logprob) in enumerate(entry.top, start=1):
        if top_id == token_id:
            out[token_id].rank = rank
        else:
            out[top_id] = Logprob(top_logprob, rank)
    return out


def _logprobs(params, token_ids, entries):
    if params.logprobs is None:
        return None
    return [_position(t, e) for t, e in zip(token_ids, entries)]


def _prompt_logprobs(params, prompt_ids, entries):
    if params.prompt_logprobs is None or not entries:
        return None
    return [None if e is None else _position(t, e) for t, e in zip(prompt_ids, entries)]


def _request_output(prompt, params, out):
    logprobs = _logprobs(params, out.token_ids, out.logprobs)
    completion = CompletionOutput(
        index=0,
        text=out.text,
        token_ids=list(out.token_ids),
        cumulative_logprob=sum(e.logprob for e in out.logprobs) if logprobs is not None else None,
        logprobs=logprobs,
        finish_reason=out.finish_reason or None)
    return RequestOutput(prompt=prompt if isinstance(prompt, str) else None,
                         prompt_token_ids=list(out.prompt_token_ids),
                         prompt_logprobs=_prompt_logprobs(params, out.prompt_token_ids,
                                                          out.prompt_logprobs),
                         outputs=[completion])


class Tokenizer:
    """The model's tokenizer: encode and decode."""

    def __init__(self, llm):
        self._llm = llm

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        return self._llm.encode(text, add_special_tokens)

    def decode(self, token_ids: List[int], skip_special_tokens: bool = True) -> str:
        return self._llm.decode(list(token_ids), skip_special_tokens)


class Stream:
    """One streamed request: iterate for StreamDelta objects; abort() ends it early."""

    def __init__(self, native, params):
        self._native = native
        self._params = params

    def __iter__(self):
        return self

    def __next__(self) -> StreamDelta:
        delta = self._next_or_none()
        if delta is None:
            raise StopIteration
        return delta

    def _next_or_none(self) -> Optional[StreamDelta]:
        delta = self._native.next()
        if delta is None:
            return None
        return StreamDelta(text=delta.text,
                           token_ids=list(delta.token_ids),
                           logprobs=_logprobs(self._params, delta.token_ids, delta.logprobs),
                           finish_reason=delta.finish_reason or None,
                           prompt_logprobs=_prompt_logprobs(self._params,
                                                            self._native.prompt_token_ids,
                                                            delta.prompt_logprobs))

    def __aiter__(self):
        return self

    async def __anext__(self) -> StreamDelta:
        # The wait runs in a worker thread, so the event loop keeps running. (A StopIteration
        # cannot cross a future, hence the None.)
        delta = await asyncio.get_running_loop().run_in_executor(None, self._next_or_none)
        if delta is None:
            raise StopAsyncIteration
        return delta

    def abort(self):
        self._native.abort()

    @property
    def prompt_token_ids(self) -> List[int]:
        return list(self._native.prompt_token_ids)


Prompts = Union[str, List[int], dict, List[Union[str, List[int], dict]]]


def _prompt_list(prompts, prompt_token_ids):
    if prompts is None and prompt_token_ids is None:
        raise ValueError("generate() needs prompts or prompt_token_ids")
    if prompts is not None and prompt_token_ids is not None:
        raise ValueError("give prompts or prompt_token_ids, not both")
    if prompt_token_ids is not None:
        if prompt_token_ids and isinstance(prompt_token_ids[0], int):
            return [list(prompt_token_ids)]
        return [list(ids) for ids in prompt_token_ids]
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if prompts and isinstance(prompts[0], int):
        return [list(prompts)]
    return list(prompts)


def _params_list(sampling_params, count):
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * count
    params = list(sampling_params)
    if len(params) != count:
        raise ValueError(f"{len(params)} sampling params for {count} prompts")
    return params


class LLM:
    """An engine: the model, its KV cache, tokenizer and chat template, and the engine thread."""

    def __init__(self, model: Optional[str] = None, device: str = "cpu", **engine_options):
        self._native = _pagoda._Llm(model=model, device=device, **engine_options)

    def generate(self, prompts: Prompts = None, sampling_params=None,
                 prompt_token_ids=None, use_tqdm: bool = False) -> List[RequestOutput]:
        """Runs every prompt to completion in shared batches; outputs in prompt order."""
        items = _prompt_list(prompts, prompt_token_ids)
        params = _params_list(self._params_or_default(sampling_params), len(items))
        outs = self._native.generate(items, params)
        return [_request_output(item, p, out) for item, p, out in zip(items, params, outs)]

    def chat(self, messages, sampling_params=None, use_tqdm: bool = False) -> List[RequestOutput]:
        """One conversation (a list of {role, content} dicts) or a list of them."""
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        params = _params_list(self._params_or_default(sampling_params), len(conversations))
        outs = self._native.chat(list(conversations), params)
        return [_request_output(None, p, out) for p, out in zip(params, outs)]

    def stream(self, prompt, sampling_params: Optional[SamplingParams] = None) -> Stream:
        """Starts one request; iterate (or async-iterate) the result for its deltas."""
        params = self._params_or_default(sampling_params)
        return Stream(self._native.stream(prompt, params), params)

    def chat_stream(self, messages, sampling_params: Optional[SamplingParams] = None) -> Stream:
        params = self._params_or_default(sampling_params)
        return Stream(self._native.chat_stream(messages, params), params)

    def get_default_sampling_params(self) -> SamplingParams:
        """What a call without sampling_params runs with: SamplingParams() with the model's
        generation_config.json defaults in place (temperature, top_k, top_p, min_p,
        repetition_penalty, max_new_tokens as max_tokens), unless generation_config="vllm"."""
        return SamplingParams(**self._native.generation_defaults)

    def _params_or_default(self, sampling_params):
        if sampling_params is None:
            return self.get_default_sampling_params()
        return sampling_params

    def get_tokenizer(self) -> Tokenizer:
        return Tokenizer(self._native)

    def stats(self):
        """Running and waiting requests, KV cache usage and token counters, as of the last step."""
        return self._native.stats()

    @property
    def max_model_len(self) -> int:
        return self._native.max_model_len
