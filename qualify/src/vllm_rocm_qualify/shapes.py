"""The batch shapes each mode is compared on, token for token against the reference. Each shape drives a
different graph family: prefills of each capture size alone, decode batches of several sizes, prefills and
decodes in one batch, and the first request after ready and after idle (cold replays, vllm#52150)."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from .client import Client, Output, RequestFailed
from .config import QualifyConfig

_SUBJECTS = (
    "The engineer",
    "A small cat",
    "The river",
    "Our neighbour",
    "The old library",
    "A careful pilot",
    "The committee",
    "My grandmother",
    "The new compiler",
    "A quiet student",
    "The harbour master",
    "The orchestra",
    "A tired runner",
    "The museum guide",
    "The village baker",
    "A curious child",
)
_VERBS = (
    "described",
    "repaired",
    "painted",
    "measured",
    "ignored",
    "remembered",
    "carried",
    "explained",
    "counted",
    "visited",
    "opened",
    "studied",
    "borrowed",
    "cleaned",
    "followed",
    "discovered",
)
_OBJECTS = (
    "the broken clock",
    "a letter from Spain",
    "three green apples",
    "the northern bridge",
    "an unusual map",
    "the wooden boat",
    "a list of questions",
    "the morning train",
    "two silver keys",
    "the garden wall",
    "a forgotten song",
    "the weather report",
    "a heavy suitcase",
    "the final exam",
)
_TAILS = (
    "before noon.",
    "after the storm.",
    "with great care.",
    "for the second time.",
    "without a word.",
    "in the rain.",
    "near the station.",
    "during the holidays.",
    "at the end of the day.",
    "slowly.",
)


def text(seed: int, words: int) -> str:
    """Plain, varied English: each prompt its own, so prefix caching cannot shorten a prefill."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < words:
        out.extend(f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}".split())
    return " ".join(out)


@dataclass
class Req:
    prompt: list[int]
    max_tokens: int


def _prompt(client: Client, seed: int, length: int) -> list[int]:
    words = length + 8
    while True:
        ids = client.tokenize(text(seed, words))
        if len(ids) >= length:
            return ids[:length]
        words *= 2


def plan(client: Client, cfg: QualifyConfig, max_model_len: int) -> dict[str, list[Req]]:
    """The requests of every shape (built once, on the reference; every mode gets the same token ids)."""
    g = cfg.gen_tokens
    used = [0]

    def reqs(lengths: list[int]) -> list[Req]:
        first = used[0]
        used[0] += len(lengths)
        with ThreadPoolExecutor(8) as pool:
            prompts = list(pool.map(lambda i: _prompt(client, 7919 * (first + i + 1), lengths[i]), range(len(lengths))))
        return [Req(p, g) for p in prompts]

    def short(i: int) -> int:
        return 16 + (i * 7) % 25  # 16..40 tokens

    shapes: dict[str, list[Req]] = {"first": reqs([24]), "single": reqs(cfg.lengths(max_model_len))}
    for b in cfg.decode_bursts:
        shapes[f"decode_{b}"] = reqs([short(i) for i in range(b)])
    if cfg.mixed_long and cfg.mixed_short:
        long_len = min(cfg.long_len, max_model_len - g - 1)
        shapes["mixed"] = reqs([short(i) for i in range(cfg.mixed_short)] + [long_len] * cfg.mixed_long)
    shapes["after_idle"] = reqs([24])
    return shapes


def _one(client: Client, r: Req, top: int) -> Output:
    try:
        return client.greedy(r.prompt, r.max_tokens, top)
    except RequestFailed as e:
        return Output(error=str(e))


def _together(client: Client, reqs: list[Req], top: int, delay_after: int = 0, delay: float = 0.0) -> list[Output]:
    """All at once; requests from index `delay_after` on are sent `delay` seconds later."""
    pool = ThreadPoolExecutor(max(1, len(reqs)))
    try:
        futs: list[Future[Output]] = []
        for i, r in enumerate(reqs):
            if delay and i == delay_after:
                time.sleep(delay)
            futs.append(pool.submit(_one, client, r, top))
        return [f.result() for f in futs]
    finally:
        # On Ctrl-C do not wait for requests in flight: the caller stops the server, which ends them.
        pool.shutdown(wait=False, cancel_futures=True)


def run(
    client: Client, shapes: dict[str, list[Req]], cfg: QualifyConfig, progress: Callable[[str], None]
) -> dict[str, list[Output]]:
    top = cfg.top_logprobs
    out: dict[str, list[Output]] = {}
    latencies: list[float] = []
    for name, reqs in shapes.items():
        if name == "after_idle":
            progress(f"idle {cfg.idle_seconds:.0f} s, then one request")
            time.sleep(cfg.idle_seconds)
        if name in ("first", "single", "after_idle"):
            res = []
            for r in reqs:
                t0 = time.monotonic()
                res.append(_one(client, r, top))
                latencies.append(time.monotonic() - t0)
            out[name] = res
        elif name == "mixed":
            # Long prefills arrive while the short requests decode: a few decode steps in, measured from the
            # single requests' latency (no fixed seconds: the machine's speed decides).
            step = statistics.median(latencies) / max(1, cfg.gen_tokens) if latencies else 0.0
            out[name] = _together(client, reqs, top, delay_after=cfg.mixed_short, delay=4 * step)
        else:
            out[name] = _together(client, reqs, top)
        errors = sum(1 for o in out[name] if o.error)
        progress(f"shape {name}: {len(reqs)} requests" + (f", {errors} failed" if errors else ""))
    return out
