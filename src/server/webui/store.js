// Conversations and settings, kept in the browser's localStorage.
//
// A conversation: {id, title, system, messages: [{role, content, stats?,
// error?}], updated}. A message's stats are what its turn measured (see
// chat.js); error is the message of a failed turn, kept with the turn.

const CONVERSATIONS_ITEM = 'kvfork.conversations';
const CURRENT_ITEM = 'kvfork.current';
const SETTINGS_ITEM = 'kvfork.settings';

export const DEFAULT_SETTINGS = { temperature: 0.7, top_p: 1, max_tokens: 256, seed: '' };

function read(item, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(item));
    return v ?? fallback;
  } catch {
    return fallback;  // a corrupt entry must not break the page
  }
}

function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

export class Store {
  constructor() {
    this.conversations = read(CONVERSATIONS_ITEM, []);
    if (!Array.isArray(this.conversations)) this.conversations = [];
    this.currentId = read(CURRENT_ITEM, null);
    this.settings = { ...DEFAULT_SETTINGS, ...read(SETTINGS_ITEM, {}) };
    if (!this.current()) this.currentId = this.conversations[0]?.id ?? this.create().id;
  }

  save() {
    try {
      localStorage.setItem(CONVERSATIONS_ITEM, JSON.stringify(this.conversations));
      localStorage.setItem(CURRENT_ITEM, JSON.stringify(this.currentId));
      localStorage.setItem(SETTINGS_ITEM, JSON.stringify(this.settings));
    } catch (e) {
      console.warn('kvfork: could not save conversations:', e);
    }
  }

  current() { return this.conversations.find((c) => c.id === this.currentId) || null; }

  select(id) {
    if (this.conversations.some((c) => c.id === id)) this.currentId = id;
    this.save();
  }

  // A new empty conversation, made current. system defaults to the current one's.
  create(system = this.current()?.system ?? '') {
    const c = { id: newId(), title: 'New chat', system, messages: [], updated: Date.now() };
    this.conversations.unshift(c);
    this.currentId = c.id;
    this.save();
    return c;
  }

  // A copy of conversation id up to and including message index, made
  // current: the branch shares every earlier turn, so its first request
  // reuses their KV blocks.
  branch(id, index) {
    const src = this.conversations.find((c) => c.id === id);
    if (!src) return null;
    const c = {
      id: newId(),
      title: 'Branch of ' + src.title,
      system: src.system,
      messages: structuredClone(src.messages.slice(0, index + 1)),
      updated: Date.now(),
    };
    this.conversations.unshift(c);
    this.currentId = c.id;
    this.save();
    return c;
  }

  remove(id) {
    this.conversations = this.conversations.filter((c) => c.id !== id);
    if (this.currentId === id) this.currentId = this.conversations[0]?.id ?? this.create().id;
    this.save();
  }

  touch(c) {
    c.updated = Date.now();
    if (c.title === 'New chat') {
      const first = c.messages.find((m) => m.role === 'user');
      if (first) c.title = first.content.slice(0, 40) || 'New chat';
    }
    this.save();
  }
}
