"""The workloads: deterministic prompts and how each scenario sends them.

Every scenario runs against a fresh server and returns a record with its
phases (start/end times) and one entry per request (the messages sent and the
client's result). Prompts come from a seeded generator, so every server gets
exactly the same text; only multiturn's later turns differ between servers,
because they contain each server's own replies.
"""

import queue
import random
import threading
import time

from client import chat_body, stream_chat

# Common English words that are one token (with their leading space) in the
# Qwen3 and Llama 3 vocabularies, so a prompt of N words is about N tokens.
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there one all we their has been would more when will who "
    "about if out so can what said them some could time other these two may then first any like "
    "now my such make over our even most after also made many did well only new where very "
    "through just way people long great little world own still found here both life being under "
    "never day same another know while last might us great old year off come since against go "
    "came right used take three small place work general number part water city house light "
    "money power state order point group family school music table river market garden window "
    "morning letter story report system paper price answer simple early"
).split()

DEFAULTS = {
    "idle_seconds": 10.0,
    "burst_system_chars": 16000, "burst_requests": 8, "burst_max_tokens": 128,
    "multiturn_turns": 8, "multiturn_user_chars": 1000, "multiturn_max_tokens": 128,
    "churn_prompts": 32, "churn_chars": 2000, "churn_max_tokens": 32,
    "distinct_requests": 8, "distinct_system_chars": 16000, "distinct_max_tokens": 32,
    "gsp_groups": 16, "gsp_prompts_per_group": 8, "gsp_system_tokens": 2048,
    "gsp_question_tokens": 128, "gsp_max_tokens": 128, "gsp_clients": 16,
    "smallpool_groups": 12, "smallpool_system_tokens": 1024, "smallpool_question_tokens": 32,
    "smallpool_max_tokens": 32, "smallpool_rounds": 3, "smallpool_clients": 4,
    "smallpool_bf16_share": 0.5,
}

# --quick: the same scenarios, small enough for a development loop.
QUICK = {
    "idle_seconds": 2.0,
    "burst_system_chars": 3000, "burst_requests": 4, "burst_max_tokens": 16,
    "multiturn_turns": 3, "multiturn_user_chars": 300, "multiturn_max_tokens": 16,
    "churn_prompts": 6, "churn_chars": 500, "churn_max_tokens": 8,
    "distinct_requests": 4, "distinct_system_chars": 3000, "distinct_max_tokens": 8,
    "gsp_groups": 3, "gsp_prompts_per_group": 4, "gsp_system_tokens": 256,
    "gsp_question_tokens": 32, "gsp_max_tokens": 16, "gsp_clients": 6,
    "smallpool_groups": 8, "smallpool_system_tokens": 384, "smallpool_question_tokens": 16,
    "smallpool_max_tokens": 8, "smallpool_rounds": 3, "smallpool_clients": 2,
    "smallpool_bf16_share": 0.5,
}

ALL = ["idle", "burst", "seqshare", "multiturn", "churn", "distinct_burst", "shared_prefix",
       "smallpool_burst"]

# Scenarios that size kvfork's KV pool themselves (kv_cache_mib below) and so
# run only on kvfork's paged configurations: llama.cpp's slots and the dense
# backend have no shared pool to size the same way.
POOL_SCENARIOS = {"smallpool_burst"}

DESCRIPTIONS = {
    "idle": "load only, {idle_seconds:g} s",
    "burst": "1 warm-up, then {burst_requests} concurrent requests behind one "
             "{burst_system_chars}-char system prompt, {burst_max_tokens} output tokens each",
    "seqshare": "the same warm-up and {burst_requests} requests, one after another",
    "multiturn": "one conversation of {multiturn_turns} turns, {multiturn_user_chars}-char user "
                 "turns, replies appended, {multiturn_max_tokens} output tokens a turn",
    "churn": "{churn_prompts} distinct {churn_chars}-char prompts in sequence, "
             "{churn_max_tokens} output tokens each",
    "distinct_burst": "{distinct_requests} concurrent requests, each with its own "
                      "{distinct_system_chars}-char system prompt, {distinct_max_tokens} output tokens",
    "shared_prefix": "{gsp_groups} groups x {gsp_prompts_per_group} prompts, {gsp_system_tokens}-word "
                     "system prompt per group, {gsp_question_tokens}-word question, "
                     "{gsp_max_tokens} output tokens, {gsp_clients} concurrent clients",
    "smallpool_burst": "{smallpool_groups} groups, each with its own {smallpool_system_tokens}-word system "
                       "prompt, one request per group per round ({smallpool_question_tokens}-word question, "
                       "{smallpool_max_tokens} output tokens) in a seeded shuffled order, {smallpool_rounds} "
                       "rounds (the first one cold, as warm-up), {smallpool_clients} concurrent clients; a "
                       "{smallpool_kv_cache_mib} MiB KV pool (--kv-cache-mib) for every configuration, which "
                       "holds {smallpool_bf16_share:.0%} of the system prompts in bf16 KV",
}


def text_of_chars(rng, chars):
    """Sentences of random words, cut at a word boundary near `chars` characters."""
    out, n, sentence = [], 0, 0
    while n < chars:
        w = rng.choice(WORDS)
        if sentence == 0:
            w = w.capitalize()
        sentence += 1
        if sentence >= rng.randint(8, 16):
            w += "."
            sentence = 0
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def text_of_words(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words))


def system_user(system, user):
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class Run:
    """Collects the requests and phases of one scenario on one server."""

    def __init__(self, port, logprobs=False):
        self.port = port
        self.logprobs = logprobs
        self.requests = []
        self.phases = {}
        self._lock = threading.Lock()

    def send(self, phase, messages, max_tokens):
        entry = {"phase": phase, "messages": messages, "max_tokens": max_tokens}
        result = stream_chat(self.port, chat_body(messages, max_tokens, self.logprobs))
        entry["result"] = result
        with self._lock:
            self.requests.append(entry)
        return result

    def phase(self, name, fn):
        t0 = time.monotonic()
        fn()
        self.phases[name] = (t0, time.monotonic())

    def concurrent(self, phase, jobs, clients):
        """jobs: list of (messages, max_tokens), taken in order by `clients` threads."""
        q = queue.Queue()
        for j in jobs:
            q.put(j)
        start = threading.Barrier(min(clients, len(jobs)))

        def worker():
            start.wait()
            while True:
                try:
                    messages, max_tokens = q.get_nowait()
                except queue.Empty:
                    return
                self.send(phase, messages, max_tokens)

        threads = [threading.Thread(target=worker) for _ in range(min(clients, len(jobs)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def burst_requests(p):
    rng = random.Random(1001)
    system = text_of_chars(rng, p["burst_system_chars"])
    users = [f"Request {i}: " + text_of_chars(rng, 60) for i in range(p["burst_requests"] + 1)]
    return system, users


def kv_cache_mib(name, p, kv_bytes_per_token_bf16, block_size=16):
    """The --kv-cache-mib a pool scenario sets for every configuration, or None
    (the run's default). smallpool_burst: bf16 KV holds smallpool_bf16_share of
    the groups' system prompts (about one token per word, plus the template's
    and the "Group g." tokens), plus room for the requests in flight (question,
    output and a partial block at each end), so a format with fewer bytes per
    token keeps more of the prompts cached in the same MiB."""
    if name != "smallpool_burst":
        return None
    prompt = p["smallpool_system_tokens"] + 16
    in_flight = p["smallpool_clients"] * (p["smallpool_question_tokens"] + p["smallpool_max_tokens"] + 2 * block_size)
    tokens = p["smallpool_bf16_share"] * p["smallpool_groups"] * prompt + in_flight
    return max(1, round(tokens * kv_bytes_per_token_bf16 / (1 << 20)))


def smallpool_rounds(p):
    """[(round, [(messages, max_tokens)])]: every group once per round, in a
    seeded shuffled order (a cyclic order would make LRU eviction lose every
    prompt whenever the pool holds fewer than all of them; a shuffle lets the
    hit rate follow the share of prompts the pool holds)."""
    rng = random.Random(6006)
    systems = [f"Group {g}. " + text_of_words(rng, p["smallpool_system_tokens"])
               for g in range(p["smallpool_groups"])]
    rounds = []
    for r in range(p["smallpool_rounds"]):
        order = list(range(p["smallpool_groups"]))
        rng.shuffle(order)
        rounds.append((r, [(system_user(systems[g], f"Question {r}.{g}: " +
                                        text_of_words(rng, p["smallpool_question_tokens"])),
                            p["smallpool_max_tokens"]) for g in order]))
    return rounds


def run_scenario(name, port, p, logprobs_multiturn=True):
    """Runs one scenario against the server on `port`; returns the Run."""
    if name == "idle":
        run = Run(port)
        run.phase("measured", lambda: time.sleep(p["idle_seconds"]))
        return run
    if name in ("burst", "seqshare"):
        run = Run(port)
        system, users = burst_requests(p)
        mt = p["burst_max_tokens"]
        run.phase("warmup", lambda: run.send("warmup", system_user(system, users[0]), mt))
        jobs = [(system_user(system, u), mt) for u in users[1:]]
        clients = len(jobs) if name == "burst" else 1
        run.phase("measured", lambda: run.concurrent("measured", jobs, clients))
        return run
    if name == "multiturn":
        # Token ids of each reply (from logprobs bytes) give the exact ideal:
        # the next turn can reuse the previous prompt plus the reply's tokens.
        run = Run(port, logprobs=logprobs_multiturn)
        rng = random.Random(2002)

        def converse():
            messages = [{"role": "system", "content": "You are a helpful assistant."}]
            for turn in range(p["multiturn_turns"]):
                messages = messages + [{"role": "user", "content": f"Turn {turn}: " +
                                        text_of_chars(rng, p["multiturn_user_chars"])}]
                r = run.send("measured", messages, p["multiturn_max_tokens"])
                if not r["ok"]:
                    return
                messages = messages + [{"role": "assistant", "content": r["text"]}]

        run.phase("measured", converse)
        return run
    if name == "churn":
        run = Run(port)
        rng = random.Random(3003)
        prompts = [f"Prompt {i}: " + text_of_chars(rng, p["churn_chars"]) for i in range(p["churn_prompts"])]

        def go():
            for text in prompts:
                run.send("measured", [{"role": "user", "content": text}], p["churn_max_tokens"])

        run.phase("measured", go)
        return run
    if name == "distinct_burst":
        run = Run(port)
        rng = random.Random(4004)
        jobs = [(system_user(f"Document {i}. " + text_of_chars(rng, p["distinct_system_chars"]),
                             f"Summarize document {i}."), p["distinct_max_tokens"])
                for i in range(p["distinct_requests"])]
        run.phase("measured", lambda: run.concurrent("measured", jobs, len(jobs)))
        return run
    if name == "shared_prefix":
        # SGLang's generated-shared-prefix shape: groups of prompts behind one
        # long system prompt each, sent group after group to a client pool.
        run = Run(port)
        rng = random.Random(5005)
        jobs = []
        for g in range(p["gsp_groups"]):
            system = f"Group {g}. " + text_of_words(rng, p["gsp_system_tokens"])
            for k in range(p["gsp_prompts_per_group"]):
                question = f"Question {g}.{k}: " + text_of_words(rng, p["gsp_question_tokens"])
                jobs.append((system_user(system, question), p["gsp_max_tokens"]))
        run.phase("measured", lambda: run.concurrent("measured", jobs, p["gsp_clients"]))
        return run
    if name == "smallpool_burst":
        run = Run(port)
        rounds = smallpool_rounds(p)
        clients = p["smallpool_clients"]
        run.phase("warmup", lambda: run.concurrent("warmup", rounds[0][1], clients))

        def later_rounds():
            for _, jobs in rounds[1:]:
                run.concurrent("measured", jobs, clients)

        run.phase("measured", later_rounds)
        return run
    raise ValueError(f"unknown scenario {name!r} (known: {', '.join(ALL)})")
