#!/usr/bin/env python3
"""`pagoda serve` answers as `pagoda generate` does, with FP8 weights and an FP8 KV cache.

For each case (a fixture and the flags both commands get): `pagoda generate --json` runs each
reference prompt alone, greedy, and `pagoda serve` (one process per case, on a free loopback port)
answers the same prompts, one `/v1/completions` request at a time, with `logprobs: 0`. The text
must be equal, and so must each token's log-probability (to 1e-4: JSON round trips). The same
engine runs both, one sequence at a time, so anything else is a difference in how serve reaches
it: flags that serve reads differently, weights quantized otherwise, another KV dtype.

Usage: serve_matches_generate.py --pagoda BINARY --source REPO [--device cpu|cuda]
Runs on the CPU in the test suite and on a GPU from tools/gpu_check.sh. Standard library only.
"""
import argparse
import json
import os
import queue
import re
import subprocess
import sys
import threading
import urllib.request

kTimeout = 120  # seconds for a command, a server start or a request
kTokens = 12  # generated per prompt


def cases(fixtures):
    """(label, model directory, flags) of each case."""
    return [
        ("FP8 checkpoint, e4m3 KV pages", os.path.join(fixtures, "llama-fp8-tiny"),
         ["--kv-cache-dtype", "fp8"]),
        ("bf16 checkpoint quantized at load", os.path.join(fixtures, "llama-tiny"),
         ["--quantization", "fp8"]),
    ]


def generate(pagoda, common, prompt):
    """`pagoda generate --json` of one prompt: its result object."""
    command = [pagoda, "generate", *common, "--prompt-ids", ",".join(map(str, prompt)),
               "--max-tokens", str(kTokens), "--ignore-eos", "--json"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=kTimeout)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {run.returncode}: {run.stderr[-2000:]}")
    return json.loads(run.stdout.splitlines()[0])


class Server:
    """`pagoda serve` on a free loopback port until closed."""

    def __init__(self, pagoda, common):
        self.process = subprocess.Popen(
            [pagoda, "serve", *common, "--host", "127.0.0.1", "--port", "0",
             "--shutdown-grace", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        ready = queue.Queue()

        def read():
            for line in self.process.stderr:
                self.lines.append(line.rstrip("\n"))
                found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if found:
                    ready.put(int(found.group(1)))
            ready.put(None)

        threading.Thread(target=read, daemon=True).start()
        try:
            self.port = ready.get(timeout=kTimeout)
        except queue.Empty:
            self.port = None
        if self.port is None:
            self.close()
            raise RuntimeError("pagoda serve did not start:\n" + "\n".join(self.lines[-30:]))

    def complete(self, body):
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/completions", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=kTimeout) as response:
            return json.load(response)

    def close(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def check(pagoda, label, model, flags, tokenizer, device):
    """Failures (strings) of one case."""
    common = ["--model", model, "--tokenizer", tokenizer, "--device", device, *flags]
    with open(os.path.join(model, "reference.json")) as file:
        prompts = [p["prompt_token_ids"] for p in json.load(file)["prompts"]]
    expected = [generate(pagoda, common, prompt) for prompt in prompts]
    failures = []
    server = Server(pagoda, common)
    try:
        for i, (prompt, want) in enumerate(zip(prompts, expected)):
            got = server.complete({"model": os.path.basename(model), "prompt": prompt,
                                   "max_tokens": kTokens, "temperature": 0, "ignore_eos": True,
                                   "logprobs": 0})
            choice = got["choices"][0]
            served = choice["logprobs"]["token_logprobs"]
            wanted = [entry["logprob"] for entry in want["logprobs"]]
            if choice["text"] != want["text"]:
                failures.append(f"{label}, prompt {i}: served {choice['text']!r}, "
                                f"generated {want['text']!r}")
            elif len(served) != len(wanted) or any(
                    abs(a - b) > 1e-4 for a, b in zip(served, wanted)):
                failures.append(f"{label}, prompt {i}: log-probabilities {served} served, "
                                f"{wanted} generated")
    finally:
        server.close()
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pagoda", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--device", default="cpu")
    options = parser.parse_args()
    fixtures = os.path.join(options.source, "tests", "fixtures")
    tokenizer = os.path.join(fixtures, "byte-tokenizer")
    failures = []
    for label, model, flags in cases(fixtures):
        found = check(options.pagoda, label, model, flags, tokenizer, options.device)
        print(f"{'FAIL' if found else 'PASS'} {label} ({options.device}): serve answers as "
              f"generate does")
        failures += found
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
