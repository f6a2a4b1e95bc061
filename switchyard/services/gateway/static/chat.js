// The chat page: conversations, a streamed answer, stop, retry, regenerate, files and feedback, all
// through the public HTTP API with the key the user typed in (kept in localStorage, never in a cookie,
// so no other site can make the browser spend it).
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "switchyard.apiKey";

const state = {
  key: "",
  chatId: null,
  streaming: null, // {controller, view, rid}
  attachments: [], // {id, name, chars}
};

// ---- HTTP ---------------------------------------------------------------------------------------

async function api(path, { method = "GET", json, body, signal, keepalive } = {}) {
  const headers = {};
  if (state.key) headers.Authorization = `Bearer ${state.key}`;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  }
  const resp = await fetch(path, { method, headers, body, signal, keepalive });
  if (resp.status === 401) keyProblem("This key was refused: check it and save again.");
  return resp;
}

async function errorOf(resp) {
  try {
    const body = await resp.json();
    if (body && body.error) return body.error;
  } catch (_) {
    // not our error shape (a proxy's page, say): fall through to the status line
  }
  return { code: `http_${resp.status}`, message: `${resp.status} ${resp.statusText}`.trim() };
}

// Server-sent events from a fetch body: the browser's EventSource cannot POST or send a header.
async function* sseEvents(resp) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let m;
    while ((m = /\r?\n\r?\n/.exec(buf))) {
      const block = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      const ev = parseEvent(block);
      if (ev) yield ev;
    }
  }
}

function parseEvent(block) {
  let event = "message";
  let id = null;
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (!line || line.startsWith(":")) continue;
    const i = line.indexOf(":");
    const field = i < 0 ? line : line.slice(0, i);
    const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  }
  if (!data.length) return null;
  const raw = data.join("\n");
  try {
    return { event, id, data: JSON.parse(raw) };
  } catch (_) {
    return { event, id, data: raw };
  }
}

// ---- small helpers ------------------------------------------------------------------------------

// Line icons (24-unit grid, stroked with the text colour): no icon font or emoji font is needed.
const ICONS = {
  plus: "M12 5v14M5 12h14",
  menu: "M3 6h18M3 12h18M3 18h18",
  clip: "M21.4 11.1l-9.2 9.2a6 6 0 0 1-8.5-8.5l9.2-9.2a4 4 0 0 1 5.7 5.7l-9.2 9.2a2 2 0 0 1-2.8-2.8l8.5-8.5",
  file: "M14 2H6a2 2 0 0 0-2 2v16a2 2 0 0 0 2 2h12a2 2 0 0 0 2-2V8zM14 2v6h6",
  up: "M14 9V5a3 3 0 0 0-3-3l-4 9v11h11.3a2 2 0 0 0 2-1.7l1.4-9a2 2 0 0 0-2-2.3zM7 22H4a2 2 0 0 1-2-2v-7a2 2 0 0 1 2-2h3",
  down: "M10 15v4a3 3 0 0 0 3 3l4-9V2H5.7a2 2 0 0 0-2 1.7l-1.4 9a2 2 0 0 0 2 2.3zM17 2h2.7A2.3 2.3 0 0 1 22 4v7a2.3 2.3 0 0 1-2.3 2H17",
  again: "M1 4v6h6M3.5 15a9 9 0 1 0 2.1-9.4L1 10",
  edit: "M17 3a2.8 2.8 0 0 1 4 4L7.5 20.5 2 22l1.5-5.5z",
  trash: "M3 6h18M8 6V4h8v2M19 6l-1 14a2 2 0 0 1-2 2H8a2 2 0 0 1-2-2L5 6",
  tool: "M14.7 6.3a1 1 0 0 0 0 1.4l1.6 1.6a1 1 0 0 0 1.4 0l3.8-3.8a6 6 0 0 1-7.9 7.9l-6.9 6.9a2.1 2.1 0 0 1-3-3l6.9-6.9a6 6 0 0 1 7.9-7.9z",
  thought: "M9 18h6M10 22h4M12 2a7 7 0 0 0-4 12.7V16h8v-1.3A7 7 0 0 0 12 2z",
  clock: "M22 12a10 10 0 1 1-20 0 10 10 0 0 1 20 0zM12 6v6l4 2",
  alert: "M12 9v4M12 17h.01M10.3 3.9 1.8 18a2 2 0 0 0 1.7 3h17a2 2 0 0 0 1.7-3L13.7 3.9a2 2 0 0 0-3.4 0z",
};

function icon(name) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("class", "ic");
  svg.setAttribute("aria-hidden", "true");
  const path = svg.appendChild(document.createElementNS(ns, "path"));
  path.setAttribute("d", ICONS[name]);
  return svg;
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function newChatId() {
  if (crypto.randomUUID) return crypto.randomUUID().replace(/-/g, "");
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

function ago(ms) {
  const s = (Date.now() - ms) / 1000;
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return new Date(ms).toLocaleDateString();
}

let toastTimer = null;
function toast(message) {
  let node = document.querySelector(".toast");
  if (!node) node = document.body.appendChild(el("div", "toast"));
  node.textContent = message;
  node.classList.add("show");
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => node.classList.remove("show"), 4000);
}

const thread = () => $("thread");

function nearBottom() {
  const t = thread();
  return t.scrollHeight - t.scrollTop - t.clientHeight < 80;
}

function scrollDown(force) {
  const t = thread();
  if (force || nearBottom()) t.scrollTop = t.scrollHeight;
}

// ---- one answer ---------------------------------------------------------------------------------

class AnswerView {
  constructor(userText) {
    this.userText = userText;
    this.text = "";
    this.thinking = null;
    this.tools = new Map();
    this.rid = null;
    this.framePending = false;

    this.el = el("article", "msg assistant");
    this.el.dataset.state = "streaming";
    this.el.append(el("div", "avatar", "⇄"));
    const body = this.el.appendChild(el("div", "body"));
    this.steps = body.appendChild(el("div", "steps"));
    this.content = body.appendChild(el("div", "content markdown"));
    this.typing = body.appendChild(el("div", "typing"));
    this.typing.append(el("span"), el("span"), el("span"));
    this.errorBox = body.appendChild(el("div", "error"));
    this.errorBox.hidden = true;
    this.actions = body.appendChild(el("div", "actions"));
    this.actions.hidden = true;
    this.up = this.button("up", "", "Good answer", "feedback up", () => this.rate("up", this.up));
    this.down = this.button("down", "", "Bad answer", "feedback down", () => this.rate("down", this.down));
    this.button("again", "Regenerate", "Ask again", "regen", () => send(this.userText));
    this.meta = this.actions.appendChild(el("span", "meta"));
  }

  button(iconName, label, title, cls, onClick) {
    const b = this.actions.appendChild(el("button", cls, label));
    b.prepend(icon(iconName));
    b.type = "button";
    b.title = title;
    b.setAttribute("aria-label", title);
    b.addEventListener("click", onClick);
    return b;
  }

  setRid(rid) {
    this.rid = rid;
    if (rid) this.el.dataset.rid = rid;
  }

  append(text) {
    this.text += text;
    this.schedule();
  }

  // Deltas arrive far faster than the screen refreshes: render at most once per animation frame.
  schedule() {
    if (this.framePending) return;
    this.framePending = true;
    requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.framePending = false;
    const stick = nearBottom();
    this.content.innerHTML = Markdown.render(this.text);
    if (this.thinking) this.thinking.body.textContent = this.thinking.text;
    if (this.text) this.typing.hidden = true;
    scrollDown(stick);
  }

  step(kind, title) {
    const d = this.steps.appendChild(el("details", `step ${kind}`));
    const summary = d.appendChild(el("summary"));
    const mark = el("span", "step-icon");
    mark.append(icon(kind === "tool" ? "tool" : "thought"));
    summary.append(mark, el("span", "step-title", title));
    const body = d.appendChild(el("div", "step-body"));
    return { d, summary, body };
  }

  think(text) {
    if (!this.thinking) this.thinking = { ...this.step("thinking", "Thinking"), text: "" };
    this.thinking.text += text;
    this.schedule();
  }

  tool(ev) {
    let s = this.tools.get(ev.id);
    if (!s) {
      s = this.step("tool", ev.name);
      this.tools.set(ev.id, s);
    }
    s.d.dataset.status = ev.status;
    const mark = ev.status === "running" ? "clock" : ev.status === "ok" ? "tool" : "alert";
    s.summary.querySelector(".step-icon").replaceChildren(icon(mark));
    const took = ev.duration_ms ? ` · ${Math.round(ev.duration_ms)} ms` : "";
    s.summary.querySelector(".step-title").textContent = `${ev.name} — ${ev.status}${took}`;
    s.body.replaceChildren();
    const args = JSON.stringify(ev.arguments || {});
    if (args !== "{}") s.body.append(el("div", "step-args", args));
    if (ev.output) s.body.append(el("pre", "step-output", ev.output));
    if (ev.sources && ev.sources.length) s.body.append(el("div", "step-sources", `Sources: ${ev.sources.join(", ")}`));
  }

  settle(state) {
    this.flush();
    this.el.dataset.state = state;
    this.typing.hidden = true;
    this.actions.hidden = false;
    if (this.thinking) this.thinking.summary.querySelector(".step-title").textContent = "Thought";
  }

  done(data) {
    this.settle("done");
    const parts = [];
    if (data.completion_tokens) parts.push(`${data.completion_tokens} tokens`);
    if (data.ttft_ms) parts.push(`first token ${Math.round(data.ttft_ms)} ms`);
    if (data.finish_reason === "length") parts.push("cut at the token limit");
    this.meta.textContent = parts.join(" · ");
    if (!this.text) this.content.append(el("p", "muted", "(no answer)"));
  }

  stopped() {
    this.settle("stopped");
    this.meta.textContent = "Stopped";
  }

  fail(error, retry) {
    this.settle("error");
    this.errorBox.hidden = false;
    this.errorBox.replaceChildren(el("span", "error-text", error.message || "Something went wrong"));
    if (retry) {
      const b = this.errorBox.appendChild(el("button", "retry", "Retry"));
      b.type = "button";
      b.addEventListener("click", retry);
    }
    scrollDown();
  }

  async rate(rating, btn) {
    if (!this.rid) return;
    let resp;
    try {
      resp = await api("/v1/feedback", { method: "POST", json: { rid: this.rid, rating } });
    } catch (_) {
      toast("Feedback could not be sent");
      return;
    }
    if (resp.ok) {
      for (const b of [this.up, this.down]) b.classList.toggle("chosen", b === btn);
      toast(rating === "up" ? "Thanks for the feedback" : "Thanks: this helps us improve");
      return;
    }
    const err = await errorOf(resp);
    // A gateway without the feedback route answers 404 "no such route"; a 404 from the route itself
    // means the answer's record is not there (yet).
    const missingRoute = resp.status === 405 || (resp.status === 404 && err.message === "no such route");
    toast(missingRoute ? "Feedback is not available on this server yet" : `Feedback not saved: ${err.message}`);
  }

  // A turn from the stored thread (a reload): no steps, the final text and status.
  static fromTurn(turn) {
    const v = new AnswerView(turn.user_text);
    v.setRid(turn.rid);
    // A reloaded conversation shows the steps it streamed: tools run and the released thinking.
    for (const ev of turn.tools || []) v.tool(ev);
    if (turn.thinking) v.think(turn.thinking);
    v.text = turn.answer;
    if (turn.status === "error") v.fail({ message: "This answer failed." }, () => send(turn.user_text));
    else if (turn.status === "stopped") v.stopped();
    else v.done(turn.usage || {});
    return v;
  }
}

function addUser(text, files = []) {
  const m = el("article", "msg user");
  const bubble = m.appendChild(el("div", "bubble"));
  bubble.textContent = text;
  if (files.length) {
    const list = bubble.appendChild(el("div", "files"));
    for (const f of files) list.append(chipOf(f.name));
  }
  thread().append(m);
}

function chipOf(name, cls = "") {
  const chip = el("span", `chip ${cls}`.trim());
  chip.append(icon("file"), el("span", "chip-name", name));
  return chip;
}

function showEmpty(show) {
  $("empty").hidden = !show;
}

// ---- sending ------------------------------------------------------------------------------------

async function send(text, files = []) {
  if (state.streaming || !text.trim()) return;
  if (!state.key) {
    keyProblem("Enter an API key to start.");
    return;
  }
  if (!state.chatId) openNew(newChatId());
  const retry = () => send(text, files);
  showEmpty(false);
  addUser(text, files);
  const view = new AnswerView(text);
  thread().append(view.el);
  scrollDown(true);

  const controller = new AbortController();
  state.streaming = { controller, view, rid: null };
  setBusy(true);
  const body = { chatId: state.chatId, text };
  if ($("model").value) body.model = $("model").value;
  if (files.length) body.fileIds = files.map((f) => f.id);
  let ended = false;
  try {
    const resp = await api("/chat", { method: "POST", json: body, signal: controller.signal });
    state.streaming.rid = resp.headers.get("x-request-id");
    view.setRid(state.streaming.rid);
    if (!resp.ok) {
      view.fail(await errorOf(resp), retry);
      ended = true;
      return;
    }
    for await (const ev of sseEvents(resp)) {
      const data = ev.data || {};
      if (ev.event === "delta") view.append(data.text || "");
      else if (ev.event === "thinking") view.think(data.text || "");
      else if (ev.event === "tool") view.tool(data);
      else if (ev.event === "done") {
        view.done(data);
        ended = true;
      } else if (ev.event === "error") {
        view.fail(data, retry);
        ended = true;
      }
    }
    if (!ended) view.fail({ message: "The connection closed before the answer finished." }, retry);
  } catch (e) {
    if (controller.signal.aborted) view.stopped();
    else view.fail({ message: `Network error: ${e.message}` }, retry);
  } finally {
    state.streaming = null;
    setBusy(false);
    refreshConversations();
  }
}

// Aborting the fetch closes the connection, which alone makes the gateway cancel the generation; the
// explicit cancel also covers a proxy in between that keeps the upstream connection open.
function stop() {
  const s = state.streaming;
  if (!s) return;
  const rid = s.rid;
  s.controller.abort();
  if (rid) api(`/v1/streams/${rid}/cancel`, { method: "POST", keepalive: true }).catch(() => {});
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  if (!busy) $("input").focus();
}

// ---- conversations ------------------------------------------------------------------------------

function setTitle(title) {
  $("chat-title").textContent = title || "New chat";
  document.title = title ? `${title} · Switchyard` : "Switchyard";
}

function openNew(chatId) {
  state.chatId = chatId;
  history.replaceState(null, "", `#${chatId}`);
}

function clearThread() {
  for (const m of thread().querySelectorAll(".msg")) m.remove();
}

function newChat() {
  if (state.streaming) stop();
  state.chatId = null;
  history.replaceState(null, "", location.pathname + location.search);
  clearThread();
  showEmpty(true);
  setTitle(null);
  markActive();
  $("input").focus();
}

async function openChat(chatId) {
  if (state.streaming) stop();
  state.chatId = chatId;
  if (location.hash.slice(1) !== chatId) history.replaceState(null, "", `#${chatId}`);
  clearThread();
  markActive();
  if (!state.key) return;
  const resp = await api(`/v1/conversations/${encodeURIComponent(chatId)}`);
  if (state.chatId !== chatId) return; // another chat was opened meanwhile
  if (resp.status === 404) {
    // Named in the URL but never written to (or deleted): it starts empty.
    showEmpty(true);
    setTitle(null);
    return;
  }
  if (!resp.ok) {
    toast(`Could not load this conversation: ${(await errorOf(resp)).message}`);
    return;
  }
  const conv = await resp.json();
  setTitle(conv.title);
  showEmpty(!conv.turns.length);
  for (const turn of conv.turns) {
    addUser(turn.user_text);
    thread().append(AnswerView.fromTurn(turn).el);
  }
  scrollDown(true);
}

function markActive() {
  for (const b of document.querySelectorAll(".conv")) b.classList.toggle("active", b.dataset.id === state.chatId);
}

let listSeq = 0;
async function refreshConversations() {
  if (!state.key) return;
  const seq = ++listSeq;
  const q = $("search").value.trim();
  const resp = await api(q ? `/v1/conversations/search?q=${encodeURIComponent(q)}` : "/v1/conversations?limit=50");
  if (seq !== listSeq || !resp.ok) return;
  const body = await resp.json();
  const items = q ? uniqueHits(body.hits) : body.items;
  const nav = $("conversations");
  nav.replaceChildren();
  if (!items.length) nav.append(el("p", "muted small", q ? "Nothing found" : "No conversations yet"));
  for (const c of items) nav.append(conversationItem(c));
  markActive();
  const current = items.find((c) => c.chat_id === state.chatId);
  if (current && current.title) setTitle(current.title);
}

function uniqueHits(hits) {
  const seen = new Map();
  for (const h of hits) if (!seen.has(h.chat_id)) seen.set(h.chat_id, { ...h, updated_ms: h.created_ms });
  return [...seen.values()];
}

function conversationItem(c) {
  const item = el("div", "conv");
  item.dataset.id = c.chat_id;
  item.tabIndex = 0;
  item.setAttribute("role", "button");
  item.append(el("span", "conv-title", c.title || "New chat"));
  item.append(el("span", "conv-when", c.snippet && c.snippet !== c.title ? c.snippet : ago(c.updated_ms)));
  const tools = item.appendChild(el("span", "conv-tools"));
  const rename = tools.appendChild(el("button", "icon"));
  rename.append(icon("edit"));
  rename.title = "Rename";
  const del = tools.appendChild(el("button", "icon"));
  del.append(icon("trash"));
  del.title = "Delete";
  item.addEventListener("click", (e) => {
    if (rename.contains(e.target)) renameChat(c);
    else if (del.contains(e.target)) deleteChat(c);
    else openChat(c.chat_id);
  });
  item.addEventListener("keydown", (e) => {
    if (e.key === "Enter") openChat(c.chat_id);
  });
  return item;
}

async function renameChat(c) {
  const title = prompt("Rename conversation", c.title || "");
  if (!title || !title.trim()) return;
  const resp = await api(`/v1/conversations/${encodeURIComponent(c.chat_id)}`, { method: "PATCH", json: { title } });
  if (!resp.ok) toast(`Rename failed: ${(await errorOf(resp)).message}`);
  else if (c.chat_id === state.chatId) setTitle(title.trim());
  refreshConversations();
}

async function deleteChat(c) {
  if (!confirm(`Delete “${c.title || "New chat"}”?`)) return;
  const resp = await api(`/v1/conversations/${encodeURIComponent(c.chat_id)}`, { method: "DELETE" });
  if (!resp.ok && resp.status !== 404) toast(`Delete failed: ${(await errorOf(resp)).message}`);
  if (c.chat_id === state.chatId) newChat();
  refreshConversations();
}

// ---- files --------------------------------------------------------------------------------------

async function upload(file) {
  if (!state.key) {
    keyProblem("Enter an API key to upload files.");
    return;
  }
  const chip = { id: null, name: file.name, uploading: true };
  state.attachments.push(chip);
  renderAttachments();
  const form = new FormData();
  form.append("file", file, file.name);
  try {
    const resp = await api("/v1/files", { method: "POST", body: form });
    if (!resp.ok) throw new Error((await errorOf(resp)).message);
    const info = await resp.json();
    Object.assign(chip, { id: info.id, chars: info.chars, uploading: false });
  } catch (e) {
    state.attachments = state.attachments.filter((a) => a !== chip);
    toast(`${file.name}: ${e.message}`);
  }
  renderAttachments();
}

function renderAttachments() {
  const box = $("attachments");
  box.replaceChildren();
  for (const a of state.attachments) {
    const chip = box.appendChild(chipOf(a.name, a.uploading ? "uploading" : ""));
    if (a.uploading) continue;
    const x = chip.appendChild(el("button", "chip-x", "×"));
    x.type = "button";
    x.title = "Remove";
    x.addEventListener("click", () => {
      state.attachments = state.attachments.filter((b) => b !== a);
      renderAttachments();
    });
  }
}

// ---- the key ------------------------------------------------------------------------------------

function keyProblem(message) {
  $("key-status").textContent = message;
  $("key-form").classList.add("needs-key");
  $("sidebar").classList.add("open");
  $("api-key").focus();
}

function saveKey(key) {
  state.key = key.trim();
  if (state.key) localStorage.setItem(KEY_STORE, state.key);
  else localStorage.removeItem(KEY_STORE);
  $("api-key").value = state.key;
  $("key-form").classList.toggle("needs-key", !state.key);
  $("key-status").textContent = state.key ? "Saved in this browser." : "No key saved.";
}

// A link may carry `?key=` (`make run` prints one). It never replaces the key in use by itself: a
// link from someone else would have the user chat into that person's account, where they read it all.
// The key leaves the address bar (and history) at once; the user sees its prefix and chooses.
const KEY_PREFIX_CHARS = 10; // what the key list shows of a key (its stored prefix)

function takeUrlKey() {
  const params = new URLSearchParams(location.search);
  const fromUrl = (params.get("key") || "").trim();
  if (params.has("key")) {
    params.delete("key");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? `?${rest}` : "") + location.hash);
  }
  return fromUrl;
}

function offerUrlKey(fromUrl) {
  const box = $("url-key");
  const text = $("url-key-text");
  const prefix = document.createElement("code");
  prefix.textContent = `${fromUrl.slice(0, KEY_PREFIX_CHARS)}…`;
  text.replaceChildren(
    "The link you opened carries an API key starting with ",
    prefix,
    state.key
      ? ". Use it instead of the key saved in this browser? Only if you trust who sent the link: whoever holds that key reads every chat sent with it."
      : ". Use it in this browser? Only if you trust who sent the link: whoever holds that key reads every chat sent with it.",
  );
  box.hidden = false;
  const answer = (accepted) => {
    box.hidden = true;
    if (accepted) {
      saveKey(fromUrl);
      refreshConversations();
      refreshModels();
    } else if (!state.key) {
      keyProblem("Enter an API key to start.");
    }
  };
  $("url-key-accept").addEventListener("click", () => answer(true), { once: true });
  $("url-key-decline").addEventListener("click", () => answer(false), { once: true });
  $("url-key-accept").focus();
}

// ---- wiring -------------------------------------------------------------------------------------

function submitComposer() {
  const input = $("input");
  const text = input.value;
  if (!text.trim() || state.streaming || state.attachments.some((a) => a.uploading)) return;
  const files = state.attachments.filter((a) => a.id);
  input.value = "";
  state.attachments = [];
  renderAttachments();
  autosize();
  send(text, files);
}

function autosize() {
  const input = $("input");
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight, 200)}px`;
}

function init() {
  for (const node of document.querySelectorAll("[data-icon]")) node.prepend(icon(node.dataset.icon));
  const fromUrl = takeUrlKey();
  saveKey(localStorage.getItem(KEY_STORE) || "");
  if (fromUrl && fromUrl !== state.key) offerUrlKey(fromUrl);
  else if (!state.key) keyProblem("Enter an API key to start.");

  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    saveKey($("api-key").value);
    refreshConversations();
    refreshModels();
    if (state.chatId) openChat(state.chatId);
  });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    submitComposer();
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submitComposer();
    }
  });
  $("input").addEventListener("input", autosize);
  $("stop").addEventListener("click", stop);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && state.streaming) stop();
  });
  $("new-chat").addEventListener("click", newChat);
  $("attach").addEventListener("click", () => $("file-input").click());
  $("file-input").addEventListener("change", (e) => {
    for (const f of e.target.files) upload(f);
    e.target.value = "";
  });
  let searchTimer = null;
  $("search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(refreshConversations, 250);
  });
  $("toggle-sidebar").addEventListener("click", () => $("sidebar").classList.toggle("open"));
  window.addEventListener("hashchange", () => {
    const id = location.hash.slice(1);
    if (id && id !== state.chatId) openChat(id);
    else if (!id && state.chatId) newChat();
  });

  const id = location.hash.slice(1);
  if (id) openChat(id);
  refreshConversations();
  refreshModels();
  $("input").focus();
}

// The model menu: every model that chats (GET /v1/models; a base model serves /v1/completions only).
async function refreshModels() {
  if (!state.key) return;
  const menu = $("model");
  const resp = await api("/v1/models");
  if (!resp.ok) return;
  const chat = (await resp.json()).data.filter((m) => !m.capabilities || m.capabilities.chat);
  const chosen = menu.value;
  menu.replaceChildren(...chat.map((m) => {
    const o = document.createElement("option");
    o.value = m.id;
    o.textContent = m.id;
    return o;
  }));
  if (chosen && chat.some((m) => m.id === chosen)) menu.value = chosen;
  menu.disabled = chat.length < 2; // one model: named, nothing to choose
}

document.addEventListener("DOMContentLoaded", init);
