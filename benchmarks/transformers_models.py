"""Whole-model speed of fuel_cy as a transformers attention backend against `sdpa`.

A Llama-shaped model built from a config (random weights, no download) runs prefill and greedy
generation under `attn_implementation="sdpa"` and `"fuel_cy"`, the two interleaved (sdpa, fuel_cy,
sdpa, ...) so drift hits both; each cell is the median of the runs, with its range.  The numbers
on the "Use with transformers" page come from this script:

    pip install -e '.[transformers]'
    python benchmarks/transformers_models.py [--runs 5] [--json out.json]

Time nothing else on the machine meanwhile (a build or a test run halves the ratios).
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from typing import Any, Callable

import torch
import transformers

import fuel_cy.transformers  # noqa: F401  (registers "fuel_cy")


def cpu_model() -> str:
    """/proc/cpuinfo's model name and family/model numbers (the CPU changes between machines)."""
    info: dict[str, str] = {}
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        return "unknown"
    return f"{info.get('model name', '?')} (family {info.get('cpu family', '?')} model {info.get('model', '?')})"


def model_pair(dtype: torch.dtype) -> tuple[Any, Any]:
    config = transformers.LlamaConfig(vocab_size=1024, hidden_size=512, intermediate_size=1376,
                                      num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                                      max_position_embeddings=4096)
    torch.manual_seed(0)
    sdpa = transformers.LlamaForCausalLM._from_config(copy.deepcopy(config), attn_implementation="sdpa")
    ours = transformers.LlamaForCausalLM._from_config(copy.deepcopy(config), attn_implementation="fuel_cy")
    sdpa, ours = sdpa.to(dtype).eval(), ours.to(dtype).eval()
    ours.load_state_dict(sdpa.state_dict())
    return sdpa, ours


def cases() -> dict[str, Callable[[Any], Any]]:
    g = torch.Generator().manual_seed(1)
    one = torch.randint(0, 1024, (1, 1024), generator=g)
    four = torch.randint(0, 1024, (4, 1024), generator=g)
    pad = torch.ones(4, 1024, dtype=torch.long)
    for b, n in enumerate((0, 200, 500, 700)):
        pad[b, :n] = 0
    prompt = torch.randint(0, 1024, (1, 256), generator=g)
    return {
        "prefill, 1 × 1024 tokens": lambda m: m(one),
        "prefill, 4 × 1024 tokens, left-padded by 0/200/500/700": lambda m: m(four, attention_mask=pad),
        "`generate`, 32 tokens after a 256-token prompt": lambda m: m.generate(
            prompt, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0),
    }


def seconds(fn: Callable[[Any], Any], model: Any) -> float:
    with torch.no_grad():
        t = time.perf_counter()
        fn(model)
        return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("--dtypes", default="float32,bfloat16",
                    help="comma-separated torch dtypes of the model pairs (float16 too)")
    args = ap.parse_args()
    rows = []
    print(f"CPU: {cpu_model()}; torch {torch.__version__}, "
          f"transformers {transformers.__version__}, {torch.get_num_threads()} threads")
    print("| dtype | call | sdpa | fuel_cy | sdpa / fuel_cy |\n| --- | --- | --- | --- | --- |")
    for dtype in (getattr(torch, name) for name in args.dtypes.split(",")):
        sdpa, ours = model_pair(dtype)
        for name, fn in cases().items():
            seconds(fn, sdpa), seconds(fn, ours)   # warm-up
            a, b = [], []
            for _ in range(args.runs):
                a.append(seconds(fn, sdpa))
                b.append(seconds(fn, ours))
            ma, mb = statistics.median(a), statistics.median(b)
            rows.append({"dtype": str(dtype).removeprefix("torch."), "call": name, "sdpa_s": a, "fuel_cy_s": b})
            print(f"| {rows[-1]['dtype']} | {name} | {ma * 1e3:.1f} ms ({min(a) * 1e3:.0f}–{max(a) * 1e3:.0f}) | "
                  f"{mb * 1e3:.1f} ms ({min(b) * 1e3:.0f}–{max(b) * 1e3:.0f}) | {ma / mb:.2f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
