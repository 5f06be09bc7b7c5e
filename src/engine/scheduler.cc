#include "engine/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "core/logging.h"
#include "core/timer.h"
#include "engine/logprobs.h"

namespace kvfork {
namespace {

// Most prefill tokens per step of a choice that wants prompt logprobs: each
// is a logits row (vocab floats, 0.6 MB for a 151,936-token vocabulary), so
// this bounds the step's logits buffer. Chunking never changes bits.
constexpr int64_t kMaxPromptLogitsRows = 64;

// With nothing to compute but prefixes loading from disk, a step waits this
// long for a load to finish before the engine looks at its inbox again.
constexpr int64_t kLoadWaitMs = 2;

// One line for a prompt whose prefix came from disk, when its prompt is done:
// the engine's queue before it, the reads, and the prefill after them (the
// split of a restarted server's first turn, docs/kv_cache.md).
void LogDiskLoadedPrompt(const ChoiceState& c, int64_t now_ns) {
  const Request& r = c.request->request;
  char line[320];
  std::snprintf(line, sizeof(line),
                "KV disk: request %s: %zu prompt tokens, %lld cached; %.1f ms to admission, "
                "%.1f ms loading, %.1f ms prefill after the load (to its last prompt logits)",
                r.id.c_str(), r.prompt_tokens.size(),
                static_cast<long long>(c.request->usage.cached_tokens),
                static_cast<double>(c.load_start_ns - c.taken_ns) * 1e-6,
                static_cast<double>(c.load_end_ns - c.load_start_ns) * 1e-6,
                static_cast<double>(now_ns - c.load_end_ns) * 1e-6);
  KVFORK_LOG(kInfo) << line;
}

int64_t ChunkLimit(const ChoiceState& c, int64_t budget) {
  return c.WantsPromptLogits() ? std::min(budget, kMaxPromptLogitsRows) : budget;
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, Model& model, KvCache& kv, ThreadPool& pool,
                     const Tokenizer& tokenizer)
    : options_(options),
      model_(model),
      kv_(kv),
      pool_(pool),
      tokenizer_(tokenizer),
      vocab_(model.config().vocab_size),
      constraints_(tokenizer, model.config().vocab_size),
      step_budget_(options.step_budget) {}

int64_t Scheduler::num_waiting() const { return static_cast<int64_t>(waiting_.size()); }

void Scheduler::PushFinalEvents() {
  for (auto& [stream, event] : deferred_) stream->Push(std::move(event));
  deferred_.clear();
}

std::vector<std::string> Scheduler::TakeFinishedIds() {
  std::vector<std::string> out;
  out.swap(finished_ids_);
  return out;
}

void Scheduler::Add(Request request, std::shared_ptr<RequestStream> stream, uint64_t arrival) {
  auto r = std::make_unique<RequestState>();
  r->request = std::move(request);
  r->stream = std::move(stream);
  r->arrival = arrival;
  r->usage.prompt_tokens = static_cast<int64_t>(r->request.prompt_tokens.size());
  const SamplingParams& sp = r->request.sampling;
  // Unseeded requests still get a fixed per-request seed, drawn once here.
  const uint64_t request_seed = sp.seed.has_value() ? *sp.seed : std::random_device{}();
  std::shared_ptr<const grammar::TokenGrammar> token_grammar;  // shared by the choices
  for (int64_t i = 0; i < sp.n; ++i) {
    auto c = std::make_unique<ChoiceState>();
    c->request = r.get();
    c->index = i;
    c->phase = i == 0 ? SeqPhase::kWaiting : SeqPhase::kUnforked;
    c->fresh = i == 0;
    c->sampler = std::make_unique<Sampler>(sp, r->request.prompt_tokens,
                                           Sampler::ChoiceSeed(sp, request_seed, i));
    c->stop = std::make_unique<StopMatcher>(sp.stop, sp.include_stop_str_in_output);
    if (sp.min_tokens > 0) {
      std::vector<int32_t> no_stop_yet = sp.stop_token_ids;
      if (!sp.ignore_eos)
        no_stop_yet.insert(no_stop_yet.end(), options_.eos_ids.begin(), options_.eos_ids.end());
      c->sampler->SuppressUntilMinTokens(std::move(no_stop_yet));
    }
    c->decoder = std::make_unique<StreamDecoder>(tokenizer_, /*skip_special=*/true);
    if (sp.grammar != nullptr) {
      if (token_grammar == nullptr) {
        std::vector<int32_t> end_ids = sp.stop_token_ids;
        end_ids.insert(end_ids.end(), options_.eos_ids.begin(), options_.eos_ids.end());
        token_grammar = constraints_.Get(sp.grammar, std::move(end_ids));
      }
      c->sampler->Constrain(std::make_unique<grammar::TokenConstraint>(token_grammar));
    }
    r->choices.push_back(std::move(c));
  }
  RequestState* raw = r.get();
  raw->choices[0]->taken_ns = NowNanos();
  requests_.push_back(std::move(r));
  if (sp.max_tokens == 0 && sp.prompt_logprobs < 0) {
    // Nothing to generate: no compute, the prompt is not even prefilled.
    for (auto& c : raw->choices) FinishChoice(c.get(), FinishReason::kLength);
    ReapDone();
    return;
  }
  waiting_.push_back(raw->choices[0].get());
}

void Scheduler::SetCachedTokens(ChoiceState* c, int64_t reused) {
  if (!c->fresh || c->request->cached_tokens_set) return;
  c->request->usage.cached_tokens = reused;
  c->request->cached_tokens_set = true;
}

void Scheduler::RemoveActive(ChoiceState* c) {
  auto it = std::find(active_.begin(), active_.end(), c);
  if (it != active_.end()) active_.erase(it);
}

void Scheduler::Preempt(ChoiceState* c) {
  KVFORK_CHECK(c->seq.has_value());
  kv_.Release(*c->seq);
  c->seq.reset();
  c->phase = SeqPhase::kWaiting;
  RemoveActive(c);
  waiting_.push_front(c);
  ++counters_.preemptions;
}

ChoiceState* Scheduler::NewestActive(const RequestState* except) const {
  for (auto it = active_.rbegin(); it != active_.rend(); ++it)
    if ((*it)->request != except) return *it;
  return nullptr;
}

void Scheduler::FinishChoice(ChoiceState* c, FinishReason reason) {
  if (c->phase == SeqPhase::kDone) return;
  if (c->seq.has_value()) {
    kv_.Release(*c->seq);
    c->seq.reset();
    // Cache control: the prompt's blocks are cached now; pin them.
    const Request& r = c->request->request;
    if (r.pin_tokens > 0 && r.pin_ttl_ms > 0) {
      const size_t n = std::min(r.prompt_tokens.size(), static_cast<size_t>(r.pin_tokens));
      kv_.Pin(std::span<const int32_t>(r.prompt_tokens.data(), n), r.cache_salt, r.pin_ttl_ms);
    }
  }
  RemoveActive(c);
  auto w = std::find(waiting_.begin(), waiting_.end(), c);
  if (w != waiting_.end()) waiting_.erase(w);
  c->phase = SeqPhase::kDone;
  RequestEvent e;
  e.kind = RequestEvent::Kind::kFinish;
  e.choice = c->index;
  e.finish_reason = reason;
  c->request->stream->Push(std::move(e));
}

void Scheduler::FailRequest(RequestState* r, const Status& error) {
  for (auto& c : r->choices) {
    if (c->seq.has_value()) {
      kv_.Release(*c->seq);
      c->seq.reset();
    }
    RemoveActive(c.get());
    auto w = std::find(waiting_.begin(), waiting_.end(), c.get());
    if (w != waiting_.end()) waiting_.erase(w);
    c->phase = SeqPhase::kDone;
  }
  RequestEvent e;
  e.kind = RequestEvent::Kind::kError;
  e.error = error;
  deferred_.emplace_back(r->stream, std::move(e));
  r->done = true;
}

void Scheduler::ReapDone() {
  for (auto it = requests_.begin(); it != requests_.end();) {
    RequestState* r = it->get();
    if (!r->done && r->AllChoicesDone()) {
      for (const auto& c : r->choices)
        r->usage.completion_tokens += static_cast<int64_t>(c->generated.size());
      RequestEvent e;
      e.kind = RequestEvent::Kind::kDone;
      e.usage = r->usage;
      deferred_.emplace_back(r->stream, std::move(e));
      r->done = true;
      counters_.prompt_tokens += r->usage.prompt_tokens;
      counters_.generation_tokens += r->usage.completion_tokens;
      ++counters_.requests_finished;
    }
    if (r->done) {
      finished_ids_.push_back(r->request.id);
      it = requests_.erase(it);
    } else {
      ++it;
    }
  }
}

void Scheduler::Cancel(const std::string& request_id) {
  for (auto& r : requests_) {
    if (r->request.id != request_id || r->done) continue;
    for (auto& c : r->choices) FinishChoice(c.get(), FinishReason::kCancelled);
  }
  ReapDone();
}

void Scheduler::AbortAll() {
  for (auto& r : requests_)
    if (!r->done)
      for (auto& c : r->choices) FinishChoice(c.get(), FinishReason::kCancelled);
  ReapDone();
}

bool Scheduler::WaitsForPrefilling(const ChoiceState& c, std::span<const int32_t> history,
                                   int64_t reused) const {
  const int64_t bs = kv_.layout().block_size;
  for (const ChoiceState* other : active_) {
    // A loading prefix registers its disk blocks too, once read.
    if (other->phase != SeqPhase::kPrefill && other->phase != SeqPhase::kLoading) continue;
    if (other->request->request.cache_salt != c.request->request.cache_salt) continue;
    const std::vector<int32_t>& o = other->request->request.prompt_tokens;
    const size_t n = std::min(o.size(), history.size());
    size_t common = 0;
    while (common < n && o[common] == history[common]) ++common;
    // Full blocks the other one will register that we cannot reuse yet.
    // At least one of our tokens is always recomputed, hence the - 1.
    const int64_t shareable =
        std::min<int64_t>(static_cast<int64_t>(common), static_cast<int64_t>(history.size()) - 1) /
        bs * bs;
    if (shareable > reused) return true;
  }
  return false;
}

int64_t Scheduler::PickWaiting(const std::vector<bool>& skipped) const {
  int64_t best = -1;
  int64_t best_reused = -1;
  for (size_t i = 0; i < waiting_.size(); ++i) {
    if (skipped[i]) continue;
    if (!options_.longest_prefix) return static_cast<int64_t>(i);
    const ChoiceState* c = waiting_[i];
    const int64_t reused =
        kv_.Match(c->History(), c->request->request.cache_salt).num_reused_tokens;
    if (reused > best_reused) {
      best = static_cast<int64_t>(i);
      best_reused = reused;
    }
  }
  return best;
}

bool Scheduler::Fork(ChoiceState* parent) {
  RequestState* r = parent->request;
  for (size_t i = 1; i < r->choices.size(); ++i) {
    ChoiceState* c = r->choices[i].get();
    for (;;) {
      StatusOr<SeqId> seq = kv_.Fork(*parent->seq);
      if (seq.ok()) {
        c->seq = *seq;
        break;
      }
      ChoiceState* victim = NewestActive(r);
      if (victim == nullptr) {
        FailRequest(r, ResourceExhaustedError("request " + r->request.id +
                                              ": n = " + std::to_string(r->request.sampling.n) +
                                              " choices do not fit the KV pool"));
        return false;
      }
      Preempt(victim);
    }
    c->phase = SeqPhase::kDecode;
    c->admit_order = ++admit_counter_;
    active_.push_back(c);
  }
  return true;
}

void Scheduler::SampleAndEmitQueued() {
  // A request that failed after its choice was queued (a sibling's KV
  // append) gets no more tokens.
  std::erase_if(jobs_, [](const SampleJob& j) {
    return j.choice->request->done || j.choice->phase == SeqPhase::kDone;
  });
  if (jobs_.empty()) return;
  if (options_.on_logits)
    for (const SampleJob& j : jobs_)
      options_.on_logits(j.choice->request->request.id, j.choice->index, j.row);
  const int64_t t0 = NowNanos();
  // Each job touches only its own choice's Sampler (n > 1 siblings read the
  // same row): independent, so any thread may run any of them. Greedy jobs
  // alone are cheaper to run here than to hand out.
  auto sample = [this](int64_t i) {
    jobs_[i].result = jobs_[i].choice->sampler->Sample(jobs_[i].row);
  };
  const bool all_cheap = std::all_of(jobs_.begin(), jobs_.end(),
                                     [](const SampleJob& j) { return j.choice->sampler->Cheap(); });
  if (all_cheap) {
    for (int64_t i = 0; i < static_cast<int64_t>(jobs_.size()); ++i) sample(i);
  } else {
    pool_.ParallelFor(static_cast<int64_t>(jobs_.size()), sample);
  }
  sample_ns_ += NowNanos() - t0;
  bool non_finite = false;
  for (SampleJob& j : jobs_) {
    RequestState* r = j.choice->request;
    if (r->done) continue;  // a sibling's row failed it
    if (!j.result.ok()) {
      FailRequest(r, j.result.status().WithContext("request " + r->request.id + ", choice " +
                                                   std::to_string(j.choice->index)));
      non_finite = true;
      continue;
    }
    Emit(j.choice, std::move(j.result).value());
  }
  jobs_.clear();
  // Its blocks may hold NaN/Inf K/V, also at positions before the bad token
  // (a prefill tile multiplies the probability 0 of a later key by its V, and
  // 0 * NaN is NaN), and a prompt that matches part of such a block would
  // copy them. Weights that do this are broken: drop every cached block
  // rather than track which ones.
  if (non_finite) kv_.ResetPrefixCache();
}

void Scheduler::Emit(ChoiceState* c, SampleResult s) {
  RequestState* r = c->request;
  const SamplingParams& sp = r->request.sampling;
  c->generated.push_back(s.token);

  // min_tokens (vLLM v1): the first min_tokens tokens end nothing; a stop
  // token or a stop string can end the output from the next one on (the
  // sampler kept stop tokens out of the first min_tokens).
  const bool may_stop = static_cast<int64_t>(c->generated.size()) > sp.min_tokens;
  const bool is_eos = may_stop && !sp.ignore_eos &&
                      std::find(options_.eos_ids.begin(), options_.eos_ids.end(), s.token) !=
                          options_.eos_ids.end();
  const bool is_stop_id = may_stop && std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(),
                                                s.token) != sp.stop_token_ids.end();
  const bool at_length = static_cast<int64_t>(c->generated.size()) >= sp.max_tokens;

  RequestEvent e;
  e.kind = RequestEvent::Kind::kToken;
  e.choice = c->index;
  e.token = s.token;
  if (sp.top_logprobs >= 0) {
    e.logprob = TokenLogprob{s.token, s.logprob};
    e.top_logprobs = std::move(s.top_logprobs);
  }
  bool stopped = false;
  if (is_eos || is_stop_id) {
    // The stop token's own text is not emitted (vLLM: unless
    // include_stop_str_in_output); held-back text is released.
    std::string tail = sp.include_stop_str_in_output ? c->decoder->Push(s.token) : std::string();
    tail += c->decoder->Flush();
    e.text_delta = c->stop->Feed(tail).emit;
    if (!c->stop->stopped()) e.text_delta += c->stop->Flush();
    stopped = true;
  } else {
    StopMatcher::Result m = c->stop->Feed(c->decoder->Push(s.token), may_stop);
    e.text_delta = std::move(m.emit);
    stopped = m.stopped;
    if (!stopped && at_length) {
      m = c->stop->Feed(c->decoder->Flush(), may_stop);
      e.text_delta += m.emit;
      stopped = m.stopped;
      if (!stopped) e.text_delta += c->stop->Flush();
    }
  }
  r->stream->Push(std::move(e));
  if (stopped) {
    FinishChoice(c, FinishReason::kStop);
  } else if (at_length) {
    FinishChoice(c, FinishReason::kLength);
  } else {
    c->phase = SeqPhase::kDecode;
  }
}

void Scheduler::EmitPromptLogprobs(ChoiceState* c, int64_t start_pos, int64_t num_rows,
                                   const float* rows) {
  const std::vector<int32_t>& prompt = c->request->request.prompt_tokens;
  const int64_t prompt_size = static_cast<int64_t>(prompt.size());
  // Row j is position start_pos + j and predicts the token after it. Rows
  // before prompt_logits_done were reported already (a re-admitted choice
  // recomputes from where the cache left it); the prompt's last row predicts
  // the first generated token, not a prompt token.
  const int64_t first = std::max(start_pos, c->prompt_logits_done);
  const int64_t end = std::min(start_pos + num_rows, prompt_size - 1);
  if (end <= first) return;
  RequestEvent e;
  e.kind = RequestEvent::Kind::kPromptLogprobs;
  e.choice = c->index;
  e.prompt_logprobs.resize(end - first);
  const int64_t k = c->request->request.sampling.prompt_logprobs;
  // An exp per vocabulary entry per row: spread the rows over the pool.
  pool_.ParallelFor(end - first, [&](int64_t i) {
    const int64_t pos = first + i;
    const std::span<const float> row(rows + (pos - start_pos) * vocab_, vocab_);
    e.prompt_logprobs[i] = LogprobsAt(row, prompt[pos + 1], k);
  });
  c->prompt_logits_done = end;
  c->request->stream->Push(std::move(e));
}

bool Scheduler::Step() {
  if (active_.empty() && waiting_.empty()) return false;
  ++counters_.steps;
  const int64_t step_start = NowNanos();
  std::vector<Item> items;
  int64_t budget = options_.max_num_batched_tokens;

  // Prefixes read from disk: a finished load prefills from this step on.
  // The cache's read-or-recompute rule weighs reads against this rate.
  kv_.SetPrefillCost(step_budget_.prefill_token_ns());
  for (ChoiceState* c : active_) {
    PrefixMatch loaded;
    if (c->phase != SeqPhase::kLoading || !kv_.FinishLoad(*c->seq, &loaded)) continue;
    c->phase = SeqPhase::kPrefill;
    c->load_end_ns = NowNanos();
    SetCachedTokens(c, loaded.num_reused_tokens);
  }

  // 1. Decode, oldest first; preempt the newest when the pool runs short.
  std::vector<ChoiceState*> decoding;
  for (ChoiceState* c : active_)
    if (c->phase == SeqPhase::kDecode) decoding.push_back(c);
  for (ChoiceState* c : decoding) {
    if (budget <= 0) break;
    if (c->phase != SeqPhase::kDecode) continue;  // preempted as a victim above
    const int64_t need = kv_.NumTokens(*c->seq) + 1;
    bool preempted_self = false;
    while (!kv_.Reserve(*c->seq, need).ok()) {
      ChoiceState* victim = NewestActive(nullptr);
      KVFORK_CHECK(victim != nullptr);
      Preempt(victim);
      if (victim == c) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) continue;
    items.push_back({c, {c->generated.back()}, true});
    --budget;
  }

  // While sequences decode, prefill gets what fits the target step time.
  const int64_t decode_tokens = static_cast<int64_t>(items.size());
  budget = step_budget_.PrefillTokens(decode_tokens, budget);

  // 2. Continue admitted prompts.
  std::vector<ChoiceState*> prefilling;
  for (ChoiceState* c : active_)
    if (c->phase == SeqPhase::kPrefill) prefilling.push_back(c);
  for (ChoiceState* c : prefilling) {
    if (budget <= 0) break;
    if (c->phase != SeqPhase::kPrefill) continue;
    const int64_t done = kv_.NumTokens(*c->seq);
    const int64_t chunk = std::min(c->HistorySize() - done, ChunkLimit(*c, budget));
    bool ok = kv_.Reserve(*c->seq, done + chunk).ok();
    // Nothing else runs this step: make room from newer sequences so the
    // oldest always progresses (Submit refused anything that cannot fit alone).
    while (!ok && items.empty()) {
      ChoiceState* victim = NewestActive(nullptr);
      if (victim == nullptr || victim == c) break;
      Preempt(victim);
      ok = kv_.Reserve(*c->seq, done + chunk).ok();
    }
    if (!ok) break;
    const std::vector<int32_t> h = c->History();
    items.push_back({c, std::vector<int32_t>(h.begin() + done, h.begin() + done + chunk), false});
    budget -= chunk;
  }

  // 3. Admit waiting choices.
  std::vector<bool> skipped(waiting_.size(), false);
  while (budget > 0 && static_cast<int64_t>(active_.size()) < options_.max_num_seqs) {
    const int64_t idx = PickWaiting(skipped);
    if (idx < 0) break;
    ChoiceState* c = waiting_[idx];
    const std::string& salt = c->request->request.cache_salt;
    const std::vector<int32_t> h = c->History();
    const std::span<const int32_t> reusable(h.data(), c->ReusableHistorySize());
    const PrefixMatch m = kv_.Match(reusable, salt);
    if (WaitsForPrefilling(*c, reusable, m.num_reused_tokens)) {
      skipped[idx] = true;
      continue;
    }
    PrefixMatch match;
    const int64_t first_chunk =
        std::min(static_cast<int64_t>(h.size()) - m.num_reused_tokens, ChunkLimit(*c, budget));
    StatusOr<SeqId> seq = kv_.Admit(reusable, salt, m.num_reused_tokens + first_chunk, &match);
    // Out of room: wait for running sequences to finish (with nothing
    // running, Admit evicts cached blocks, and Submit refused anything that
    // cannot fit alone, so the oldest always gets in eventually).
    if (!seq.ok()) break;
    waiting_.erase(waiting_.begin() + idx);
    skipped.erase(skipped.begin() + idx);
    c->seq = *seq;
    c->admit_order = ++admit_counter_;
    active_.push_back(c);
    if (kv_.Loading(*c->seq)) {
      // Its prefix continues on disk: the I/O threads read it while this
      // step (and the next ones) run the others; a later step collects it.
      c->phase = SeqPhase::kLoading;
      c->load_start_ns = NowNanos();
      continue;
    }
    c->phase = SeqPhase::kPrefill;
    SetCachedTokens(c, match.num_reused_tokens);
    const int64_t done = kv_.NumTokens(*c->seq);
    const int64_t chunk = std::min(static_cast<int64_t>(h.size()) - done, ChunkLimit(*c, budget));
    if (!kv_.Reserve(*c->seq, done + chunk).ok()) break;  // admitted; continues next step
    items.push_back({c, std::vector<int32_t>(h.begin() + done, h.begin() + done + chunk), false});
    budget -= chunk;
  }

  if (items.empty()) {
    ReapDone();
    // Only loads in flight: wait for one (briefly, so new requests and
    // cancellations still get in), rather than spin.
    if (std::any_of(active_.begin(), active_.end(),
                    [](const ChoiceState* c) { return c->phase == SeqPhase::kLoading; }))
      kv_.WaitForLoads(kLoadWaitMs);
    return !active_.empty() || !waiting_.empty();
  }

  // 4. One forward over everything.
  batch_.tokens.clear();
  batch_.seqs.clear();
  batch_.kv_groups = kv_.kv_groups();
  // Logits only for rows that get sampled: decode tokens and the chunk that
  // ends a fresh prompt (a re-admitted choice already knows its next token),
  // and every row of a prompt that wants prompt logprobs. row_of: the row
  // sampled (the item's last); first_row: the first of an all-rows item.
  std::vector<int64_t> row_of(items.size(), -1);
  std::vector<int64_t> first_row(items.size(), -1);
  int64_t rows = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    ForwardSeq fs;
    fs.num_tokens = static_cast<int64_t>(it.tokens.size());
    fs.start_pos = kv_.NumTokens(*it.choice->seq);
    fs.blocks = kv_.BlockTable(*it.choice->seq);
    for (size_t g = 0; g < kv_.kv_groups().size(); ++g)
      fs.group_blocks[g] = kv_.GroupBlockTable(*it.choice->seq, static_cast<int>(g));
    fs.all_logits = !it.decode && it.choice->WantsPromptLogits();
    fs.no_logits = !it.decode && !fs.all_logits &&
                   !(it.choice->fresh && fs.start_pos + fs.num_tokens >= it.choice->HistorySize());
    if (fs.all_logits) {
      first_row[i] = rows;
      rows += fs.num_tokens;
      row_of[i] = rows - 1;
    } else if (!fs.no_logits) {
      row_of[i] = rows++;
    }
    batch_.seqs.push_back(fs);
    batch_.tokens.insert(batch_.tokens.end(), it.tokens.begin(), it.tokens.end());
  }
  const int64_t forward_start = NowNanos();
  Status st = model_.Forward(batch_, kv_.layout(), pool_, &logits_);
  const int64_t forward_ns = NowNanos() - forward_start;
  if (!st.ok()) {
    for (const Item& it : items)
      if (!it.choice->request->done) FailRequest(it.choice->request, st.WithContext("forward"));
    ReapDone();
    return true;
  }
  KVFORK_CHECK(static_cast<int64_t>(logits_.size()) == rows * vocab_);

  // 5. Append, queue the choices to sample, sample them together, emit.
  sample_ns_ = 0;
  bool decode_only = true;
  for (size_t i = 0; i < items.size(); ++i) {
    ChoiceState* c = items[i].choice;
    decode_only = decode_only && items[i].decode;
    if (c->request->done || c->phase == SeqPhase::kDone || !c->seq.has_value()) continue;
    const int64_t start_pos = kv_.NumTokens(*c->seq);
    Status a = kv_.Append(*c->seq, items[i].tokens);
    if (!a.ok()) {
      FailRequest(c->request, a.WithContext("kv append"));
      continue;
    }
    if (first_row[i] >= 0)
      EmitPromptLogprobs(c, start_pos, static_cast<int64_t>(items[i].tokens.size()),
                         logits_.data() + first_row[i] * vocab_);
    if (items[i].decode) {
      jobs_.push_back({c, std::span<const float>(logits_.data() + row_of[i] * vocab_, vocab_)});
      continue;
    }
    if (kv_.NumTokens(*c->seq) < c->HistorySize()) continue;  // more chunks to come
    if (!c->fresh) {
      c->phase = SeqPhase::kDecode;  // re-admitted: its pending token is known
      continue;
    }
    KVFORK_CHECK(row_of[i] >= 0);
    const std::span<const float> row(logits_.data() + row_of[i] * vocab_, vocab_);
    if (c->load_end_ns > 0) LogDiskLoadedPrompt(*c, NowNanos());
    c->fresh = false;
    RequestState* r = c->request;
    if (r->request.sampling.max_tokens == 0) {  // prompt logprobs only
      for (auto& choice : r->choices) FinishChoice(choice.get(), FinishReason::kLength);
      continue;
    }
    if (r->choices.size() > 1) {
      // Fork may preempt others for blocks: let the choices queued so far
      // finish (and release theirs) first, as if sampled one by one.
      SampleAndEmitQueued();
      if (!Fork(c)) continue;
    }
    for (auto& choice : r->choices) jobs_.push_back({choice.get(), row});
  }
  SampleAndEmitQueued();
  ReapDone();
  // All-rows logits can be 64 rows per prompt (kMaxPromptLogitsRows): give
  // that memory back rather than keep it for steps that need a few rows.
  if (std::any_of(first_row.begin(), first_row.end(), [](int64_t r) { return r >= 0; }))
    std::vector<float>().swap(logits_);
  const int64_t step_ns = NowNanos() - step_start;
  step_budget_.Observe(decode_tokens,
                       static_cast<int64_t>(batch_.tokens.size()) - decode_tokens, step_ns);
  for (StepTimes* t : {&counters_.all_steps, decode_only ? &counters_.decode_steps : nullptr}) {
    if (t == nullptr) continue;
    ++t->steps;
    t->step_ns += step_ns;
    t->forward_ns += forward_ns;
    t->sample_ns += sample_ns_;
  }
  return true;
}

}  // namespace kvfork
