// The chat tab: the conversation list, the messages with their per-turn
// numbers, the composer, and the turn itself (stream, stop, regenerate,
// edit-and-resend, branch). Text from the model or the user is only ever set
// as textContent, never parsed as HTML.
import { ApiError, streamChat } from './api.js';
import { el } from './dom.js';

// What a turn measured, from its stream (times in ms from the request).
function turnStats(usage, finish, firstMs, lastMs, totalMs) {
  const completion = usage?.completion_tokens ?? null;
  const decodeSeconds = (lastMs - firstMs) / 1000;
  return {
    prompt_tokens: usage?.prompt_tokens ?? null,
    cached_tokens: usage?.prompt_tokens_details?.cached_tokens ?? null,
    completion_tokens: completion,
    ttft_ms: firstMs,
    // Tokens after the first, over the time after the first.
    decode_tps: completion > 1 && decodeSeconds > 0 ? (completion - 1) / decodeSeconds : null,
    total_ms: totalMs,
    finish_reason: finish,
  };
}

// The numbers under an answer: the cached-token bar, then the rest.
export function statsElement(stats) {
  const box = el('div', { class: 'turn-stats' });
  const prompt = stats.prompt_tokens;
  const cached = stats.cached_tokens;
  if (prompt != null && cached != null) {
    box.dataset.promptTokens = prompt;
    box.dataset.cachedTokens = cached;
    const reusedShare = prompt > 0 ? cached / prompt : 0;
    const bar = el('div', {
      class: 'cache-bar',
      title: `${cached} of ${prompt} prompt tokens reused from the KV cache, ${prompt - cached} computed`,
    });
    const reused = el('span', { class: 'reused' });
    reused.style.width = (100 * reusedShare).toFixed(2) + '%';
    const computed = el('span', { class: 'computed' });
    computed.style.width = (100 * (1 - reusedShare)).toFixed(2) + '%';
    bar.append(reused, computed);
    box.append(bar);
  }
  const parts = [];
  if (prompt != null) parts.push(`prompt ${prompt} tok`);
  if (cached != null) parts.push(`cached ${cached} (${prompt ? Math.round((100 * cached) / prompt) : 0}%)`);
  if (stats.ttft_ms != null) parts.push(`TTFT ${Math.round(stats.ttft_ms)} ms`);
  if (stats.decode_tps != null) parts.push(`${stats.decode_tps.toFixed(1)} tok/s`);
  if (stats.completion_tokens != null) parts.push(`${stats.completion_tokens} tok out`);
  parts.push(`finish: ${stats.finish_reason ?? 'none'}`);
  box.dataset.finish = stats.finish_reason ?? '';
  box.append(el('span', { class: 'numbers' }, parts.join(' · ')));
  return box;
}

export class ChatView {
  // store: store.js's Store; model(): the model id to send; onNeedKey(error):
  // the server wants an API key.
  constructor(store, { model, onNeedKey }) {
    this.store = store;
    this.model = model;
    this.onNeedKey = onNeedKey;
    this.controller = null;  // the running turn's AbortController
    this.list = document.getElementById('conversations');
    this.messages = document.getElementById('messages');
    this.input = document.getElementById('prompt');
    this.sendButton = document.getElementById('send');
    this.stopButton = document.getElementById('stop');
    this.system = document.getElementById('system-prompt');
    document.getElementById('new-chat').addEventListener('click', () => {
      if (this.busy()) return;
      this.store.create();
      this.render();
    });
    document.getElementById('composer').addEventListener('submit', (e) => {
      e.preventDefault();
      this.send();
    });
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey) {
        e.preventDefault();
        this.send();
      }
    });
    this.stopButton.addEventListener('click', () => this.controller?.abort());
    this.system.addEventListener('change', () => {
      const c = this.store.current();
      c.system = this.system.value;
      this.store.touch(c);
    });
    this.bindSettings();
  }

  busy() { return this.controller !== null; }

  bindSettings() {
    const s = this.store.settings;
    for (const name of ['temperature', 'top_p', 'max_tokens', 'seed']) {
      const input = document.getElementById('set-' + name);
      input.value = s[name];
      input.addEventListener('change', () => {
        s[name] = input.value;
        this.store.save();
      });
    }
  }

  // The sampling fields of a request; a blank seed is left out.
  sampling() {
    const s = this.store.settings;
    const body = {};
    const num = (v) => (v === '' || v == null ? null : Number(v));
    if (num(s.temperature) != null) body.temperature = num(s.temperature);
    if (num(s.top_p) != null) body.top_p = num(s.top_p);
    if (num(s.max_tokens) != null) body.max_tokens = Math.trunc(num(s.max_tokens));
    if (num(s.seed) != null) body.seed = Math.trunc(num(s.seed));
    return body;
  }

  render() {
    this.renderList();
    this.renderMessages();
  }

  renderList() {
    this.list.replaceChildren();
    for (const c of this.store.conversations) {
      const item = el('li', { class: c.id === this.store.currentId ? 'current' : '' });
      const open = el('button', { class: 'open', title: c.title }, c.title);
      open.addEventListener('click', () => {
        if (this.busy()) return;
        this.store.select(c.id);
        this.render();
      });
      const del = el('button', { class: 'delete', title: 'Delete this conversation' }, '×');
      del.addEventListener('click', () => {
        if (this.busy()) return;
        this.store.remove(c.id);
        this.render();
      });
      item.append(open, del);
      this.list.append(item);
    }
  }

  renderMessages() {
    const c = this.store.current();
    this.system.value = c.system;
    this.messages.replaceChildren();
    c.messages.forEach((m, i) => this.messages.append(this.messageElement(c, m, i)));
    this.messages.scrollTop = this.messages.scrollHeight;
    this.sendButton.disabled = this.busy();
    this.stopButton.disabled = !this.busy();
  }

  messageElement(c, m, i) {
    const box = el('div', { class: `message ${m.role}` + (m.pending ? ' pending' : '') });
    box.dataset.index = i;
    box.append(el('div', { class: 'role' }, m.role === 'user' ? 'You' : 'Assistant'));
    const content = el('div', { class: 'content' }, m.content);
    box.append(content);
    if (m.error) box.append(el('div', { class: 'error', role: 'alert' }, m.error));
    if (m.stats) box.append(statsElement(m.stats));
    if (m.pending) return box;
    const actions = el('div', { class: 'actions' });
    const action = (cls, label, title, fn) => {
      const b = el('button', { class: cls, title }, label);
      b.addEventListener('click', () => { if (!this.busy()) fn(); });
      actions.append(b);
    };
    if (m.role === 'user') {
      action('edit', 'Edit', 'Edit this message and resend it (the turns before it come from the cache)',
        () => this.edit(box, content, c, i));
    }
    if (m.role === 'assistant' && i === c.messages.length - 1) {
      action('regenerate', 'Regenerate', 'Answer again: the same prompt, all but its last token from the cache',
        () => this.regenerate());
    }
    action('branch', 'Branch', 'A new conversation with the turns up to here',
      () => { this.store.branch(c.id, i); this.render(); this.input.focus(); });
    box.append(actions);
    return box;
  }

  edit(box, content, c, i) {
    const area = el('textarea', { class: 'edit-area', rows: 3 });
    area.value = c.messages[i].content;
    const save = el('button', { class: 'resend' }, 'Send');
    const cancel = el('button', { class: 'cancel' }, 'Cancel');
    const editor = el('div', { class: 'editor' }, area, save, cancel);
    content.replaceWith(editor);
    box.querySelector('.actions')?.remove();
    area.focus();
    cancel.addEventListener('click', () => this.renderMessages());
    save.addEventListener('click', () => {
      if (this.busy() || !area.value.trim()) return;
      c.messages = c.messages.slice(0, i);
      c.messages.push({ role: 'user', content: area.value });
      this.store.touch(c);
      this.runTurn(c);
    });
  }

  regenerate() {
    const c = this.store.current();
    if (c.messages.at(-1)?.role === 'assistant') c.messages.pop();
    this.runTurn(c);
  }

  send() {
    const text = this.input.value;
    if (this.busy() || !text.trim()) return;
    const c = this.store.current();
    c.messages.push({ role: 'user', content: text });
    this.input.value = '';
    this.store.touch(c);
    this.runTurn(c);
  }

  // What the model sees: the system prompt and every turn that did not fail.
  requestMessages(c) {
    const out = [];
    if (c.system.trim()) out.push({ role: 'system', content: c.system });
    for (const m of c.messages) {
      if (m.pending || (m.role === 'assistant' && m.error)) continue;
      out.push({ role: m.role, content: m.content });
    }
    return out;
  }

  async runTurn(c) {
    // The model may be left out (the server has one) until /v1/models answered.
    const body = { model: this.model() || undefined, messages: this.requestMessages(c), ...this.sampling() };
    const answer = { role: 'assistant', content: '', pending: true };
    c.messages.push(answer);
    this.controller = new AbortController();
    this.renderMessages();
    const box = this.messages.lastElementChild;
    const content = box.querySelector('.content');
    const start = performance.now();
    let first = null, last = null, usage = null, finish = null;
    try {
      await streamChat(body, {
        signal: this.controller.signal,
        onChunk: (chunk) => {
          if (chunk.usage) usage = chunk.usage;
          for (const choice of chunk.choices ?? []) {
            const text = choice.delta?.content ?? '';
            const reasoning = choice.delta?.reasoning_content ?? '';
            if (text || reasoning) {
              const now = performance.now() - start;
              if (first === null) first = now;
              last = now;
            }
            if (text) {
              answer.content += text;
              content.textContent = answer.content;
              this.messages.scrollTop = this.messages.scrollHeight;
            }
            if (choice.finish_reason) finish = choice.finish_reason;
          }
        },
      });
    } catch (e) {
      if (e.name === 'AbortError') {
        finish = 'stopped';
      } else {
        answer.error = e instanceof ApiError ? e.message : 'error: ' + e.message;
        if (e instanceof ApiError && e.needsKey) this.onNeedKey(e);
      }
    }
    const total = performance.now() - start;
    delete answer.pending;
    if (first !== null || usage || finish) {
      answer.stats = turnStats(usage, finish, first ?? total, last ?? total, total);
    }
    this.controller = null;
    this.store.touch(c);
    if (this.store.currentId === c.id) this.renderMessages();
    this.renderList();
  }
}
