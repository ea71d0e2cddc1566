// Switchboard's web UI. Plain ES modules, no build step; it uses only the daemon's public API
// (docs/api.md) with the cookie the sign-in URL set.
import { marked } from './vendor/marked.esm.js';
import DOMPurify from './vendor/purify.es.mjs';
import hljs from './vendor/highlight.min.js';
import uPlot from './vendor/uPlot.esm.js';

const PAGE = 300; // events per page when opening a session or paging back
const $ = (selector, root = document) => root.querySelector(selector);

// ---------------------------------------------------------------------------------------------
// Small helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function markdown(text) {
  const html = DOMPurify.sanitize(marked.parse(text ?? '', { gfm: true, breaks: false }));
  const box = el('div', { class: 'md' });
  box.innerHTML = html;
  for (const code of box.querySelectorAll('pre code')) highlight(code);
  return box;
}

function highlight(code, language) {
  try {
    if (language && hljs.getLanguage(language)) {
      code.innerHTML = hljs.highlight(code.textContent, { language }).value;
    } else {
      hljs.highlightElement(code);
    }
  } catch (_) { /* plain text is fine */ }
}

function codeBlock(text, language) {
  const code = el('code', {}, text ?? '');
  const pre = el('pre', { class: 'code' }, code);
  if (language) highlight(code, language);
  return pre;
}

const EXTENSIONS = { rs: 'rust', js: 'javascript', mjs: 'javascript', ts: 'typescript', py: 'python',
  sh: 'bash', md: 'markdown', json: 'json', toml: 'ini', yml: 'yaml', yaml: 'yaml', html: 'xml',
  css: 'css', go: 'go', java: 'java', c: 'c', h: 'c', cpp: 'cpp', rb: 'ruby', sql: 'sql' };
const languageOf = (path) => EXTENSIONS[(path ?? '').split('.').pop()?.toLowerCase()];

const money = (usd) => `$${(usd ?? 0).toFixed(usd >= 1 ? 2 : 4)}`;
const tokens = (count) => (count ?? 0).toLocaleString('en-US');

function ago(ms) {
  if (!ms) return '';
  const seconds = Math.max(0, (Date.now() - ms) / 1000);
  if (seconds < 60) return 'just now';
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(ms).toLocaleDateString();
}

/// The end of a path, which is what tells projects apart.
function shortPath(path) {
  const parts = (path ?? '').split('/').filter(Boolean);
  return parts.length > 2 ? `…/${parts.slice(-2).join('/')}` : path ?? '';
}

function stateLabel(session) {
  const pending = session.pending_permissions?.length ?? session.pending ?? 0;
  if (pending > 0 || session.state === 'awaiting_permission') return ['waiting', 'waiting for you'];
  if (session.disconnected_since_ms && !['exited', 'crashed'].includes(session.state)) {
    return ['disconnected', `disconnected since ${new Date(session.disconnected_since_ms).toLocaleTimeString()}`];
  }
  return [session.state, session.state];
}

// ---------------------------------------------------------------------------------------------
// The API

class ApiError extends Error {}

async function api(method, path, body) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
    });
  } catch (error) {
    connection.down('The daemon is unreachable.');
    throw new ApiError('the daemon is unreachable');
  }
  connection.up();
  if (response.status === 401) {
    location.href = '/';
    throw new ApiError('signed out');
  }
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiError(data?.error?.message ?? `${response.status}`);
  return data;
}

function socketUrl(path) {
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${path}`;
}

function toast(message, kind = 'error') {
  const note = el('div', { class: `toast ${kind}`, role: 'status' }, message);
  document.body.append(note);
  setTimeout(() => note.remove(), 6000);
}

// The "daemon unreachable" banner.
const connection = {
  downSince: null,
  down(message) {
    if (this.downSince === null) this.downSince = Date.now();
    const banner = $('#banner');
    banner.textContent = `${message} Reconnecting…`;
    banner.hidden = false;
  },
  up() {
    this.downSince = null;
    $('#banner').hidden = true;
  },
};

// ---------------------------------------------------------------------------------------------
// The session list, kept live by /api/events

const sessions = new Map();

async function loadSessions() {
  const list = await api('GET', '/api/sessions');
  sessions.clear();
  for (const session of list) sessions.set(session.id, session);
  renderList();
}

function renderList() {
  const list = $('#session-list');
  const current = view?.id;
  const items = [...sessions.values()].sort((a, b) => (b.updated_ms ?? 0) - (a.updated_ms ?? 0));
  list.replaceChildren(...items.map((session) => {
    const [state, label] = stateLabel(session);
    const pending = session.pending_permissions?.length ?? 0;
    return el('li', { class: `session-item state-${state}${session.id === current ? ' current' : ''}` },
      el('a', { href: `#/s/${session.id}`, dataset: { id: session.id } },
        el('span', { class: 'title' }, session.title || session.cwd?.split('/').pop() || session.id),
        el('span', { class: `badge state-${state}` }, pending > 1 ? `${label} (${pending})` : label),
        el('span', { class: 'meta' },
          el('span', { class: 'cwd', title: session.cwd }, shortPath(session.cwd)),
          el('span', {}, session.model ?? ''),
          el('span', {}, money(session.cost_usd)),
          el('span', { class: 'ago' }, ago(session.updated_ms)))));
  }));
  renderOverview();
  const waiting = items.filter((s) => stateLabel(s)[0] === 'waiting').length;
  document.title = waiting > 0 ? `(${waiting}) waiting — Switchboard` : 'Switchboard';
}

function notifyWaiting(session) {
  if (!document.hidden || !('Notification' in window) || Notification.permission !== 'granted') return;
  const note = new Notification('Switchboard: approval needed', {
    body: session.title || session.cwd || session.id, tag: `sb-${session.id}`,
  });
  note.onclick = () => { window.focus(); location.hash = `#/s/${session.id}`; };
}

function watchDashboard() {
  let delay = 500;
  const connect = () => {
    const socket = new WebSocket(socketUrl('/api/events'));
    socket.onopen = () => { delay = 500; connection.up(); loadSessions().catch(() => {}); };
    socket.onmessage = (message) => {
      const change = JSON.parse(message.data);
      if (change.type === 'lagged') { loadSessions().catch(() => {}); return; }
      if (change.event === 'session_created') {
        sessions.set(change.session.id, change.session);
      } else if (change.event === 'session_deleted') {
        sessions.delete(change.session_id);
      } else if (change.event === 'session_changed') {
        const session = sessions.get(change.session_id) ?? { id: change.session_id };
        const before = stateLabel(session)[0];
        Object.assign(session, {
          state: change.state, cost_usd: change.cost_usd, model: change.model,
          claude_session_id: change.claude_session_id, updated_ms: Date.now(),
          permission_mode: change.permission_mode, title: change.title ?? session.title,
          running: !['exited', 'crashed'].includes(change.state),
          pending_permissions: new Array(change.pending_permissions).fill({}),
          disconnected_since_ms: change.disconnected_since_ms ?? null,
        });
        sessions.set(session.id, session);
        if (before !== 'waiting' && stateLabel(session)[0] === 'waiting') notifyWaiting(session);
        if (view?.id === session.id) view.header();
      }
      renderList();
    };
    socket.onclose = () => {
      connection.down('The daemon is unreachable.');
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 5000);
    };
  };
  connect();
}

// ---------------------------------------------------------------------------------------------
// The transcript: the session's view in, DOM out.
//
// The daemon interprets the CLI's lines (`GET …/view`, `…/subscribe?view=true`); this draws the
// updates it sends and derives nothing from lines. Text and thinking stream into their block
// until the whole block arrives. Tool calls are cards that collect their result, their
// permission and (for Task/Agent) the subagent's messages. Older pages are drawn into their own
// chunk above the others; a result or decision seen before its card waits for it.

class Transcript {
  constructor(root, session) {
    this.root = root;
    this.session = session;
    this.messages = new Map(); // message id -> {box, blocks: Map(index -> {node, text})}
    this.tools = new Map(); // tool_use_id -> card
    this.orphans = new Map(); // tool_use_id -> [fn(card)] waiting for the card
    this.permissions = new Map(); // request_id -> {request, decided, box}
    this.turns = []; // {cost, input, output}
    this.context = 0; // tokens of context of the last message
    this.models = []; // per-model totals, as of the last turn
    this.queued = []; // bubbles of prompts that wait for the turn before them
  }

  /// Where an update goes: the subagent's nest inside its Task card, or the chunk.
  container(parent, chunk) {
    if (parent && this.tools.has(parent)) return $('.nest', this.tools.get(parent)) ?? chunk;
    return chunk;
  }

  apply(update, chunk) {
    switch (update.update) {
      case 'started': return this.notice(chunk, 'info', `Claude Code started in ${update.cwd ?? '?'} with ${update.model ?? 'its default model'} (${update.permission_mode ?? 'default'})`);
      case 'prompt': return this.prompt(update, chunk);
      case 'dequeued': {
        const next = this.queued.shift();
        if (next) { next.classList.remove('queued'); $('.queued-label', next)?.remove(); }
        return undefined;
      }
      case 'message_started':
        if (!update.parent_tool_use_id && update.context_tokens != null) this.context = update.context_tokens;
        this.message(update.message_id, this.container(update.parent_tool_use_id, chunk));
        return undefined;
      case 'text_delta':
      case 'thinking_delta': return this.streamed(update, chunk);
      case 'tool_use_started':
        // An older page's start of a call a newer page drew whole changes nothing.
        if (this.messages.get(update.message_id)?.blocks.get(update.index)?.done) return undefined;
        return this.place(update, chunk, el('div', { class: 'block tool pending-input' }, `Preparing ${update.name}…`), null);
      case 'state':
        // A run that ended runs none of the prompts it still held.
        if (['exited', 'crashed'].includes(update.to)) this.unqueueAll();
        return undefined;
      case 'block': return this.finished(update, chunk);
      case 'tool_result': return this.toolResult(update);
      case 'permission_asked': return this.permissionRequested(update, chunk);
      case 'permission_decided': return this.permissionDecided(update);
      case 'turn_ended': return this.turnEnded(update, chunk);
      case 'notice': return this.notice(chunk, update.level, update.text);
      case 'rotated': return chunk.append(el('div', { class: 'notice info' }, 'The CLI moved on to another Claude session: ', el('a', { href: `#/s/${update.to}` }, 'continue there'), '.'));
      case 'lost': return this.notice(chunk, 'error', `${update.count} events could not be stored and are missing here: ${update.reason}`);
      case 'unreadable': return this.notice(chunk, 'error', `An event could not be read back: ${update.reason}`);
      // state, model, mode, claude_session, run, tool_input_delta: the header and the
      // session list show those.
      default: return undefined;
    }
  }

  unqueueAll() {
    for (const box of this.queued.splice(0)) { box.classList.remove('queued'); $('.queued-label', box)?.remove(); }
  }

  notice(chunk, level, text) {
    chunk.append(el('div', { class: `notice ${level}` }, text));
  }

  prompt(update, chunk) {
    const box = el('div', { class: 'msg user' });
    if (update.text) box.append(el('div', { class: 'text' }, update.text));
    for (const picture of update.images ?? []) box.append(image(picture));
    chunk.append(box);
    if (update.queued) {
      box.classList.add('queued');
      box.append(el('span', { class: 'queued-label' }, 'queued'));
      this.queued.push(box);
    }
  }

  message(id, into) {
    let message = this.messages.get(id);
    if (!message) {
      // Focusable, so a tap (no hover on phones) shows its "Fork from here".
      const box = el('div', { class: 'msg assistant', dataset: { id }, tabindex: '-1' });
      into.append(box);
      message = { box, blocks: new Map() };
      this.messages.set(id, message);
    }
    return message;
  }

  /// Puts `node` at its block's place in its message (blocks stay in index order).
  place(update, chunk, node, text) {
    const message = this.message(update.message_id, this.container(update.parent_tool_use_id, chunk));
    const block = message.blocks.get(update.index);
    if (block?.node) block.node.replaceWith(node);
    else {
      const after = [...message.blocks.entries()].filter(([i, b]) => i > update.index && b.node).sort(([a], [b]) => a - b)[0];
      const fork = $('.fork-here', message.box);
      if (after) after[1].node.before(node); else if (fork) fork.before(node); else message.box.append(node);
    }
    message.blocks.set(update.index, { node, text: text ?? block?.text ?? '' });
    return message;
  }

  streamed(update, chunk) {
    const message = this.message(update.message_id, this.container(update.parent_tool_use_id, chunk));
    const block = message.blocks.get(update.index);
    if (block?.done) return;
    const text = (block?.text ?? '') + (update.text ?? update.thinking ?? '');
    const node = update.update === 'text_delta'
      ? el('div', { class: 'block text streaming' }, text)
      : el('details', { class: 'block thinking streaming' }, el('summary', {}, 'Thinking…'), el('div', {}, text));
    this.place(update, chunk, node, text);
  }

  finished(update, chunk) {
    const block = update.block;
    let node;
    if (block.kind === 'text') node = el('div', { class: 'block text' }, markdown(block.text));
    else if (block.kind === 'thinking') {
      node = el('details', { class: 'block thinking' }, el('summary', {}, 'Thinking'),
        el('div', { class: 'thinking-text' }, block.redacted ? '(redacted)' : block.thinking));
    } else if (block.kind === 'tool_use') {
      const known = this.tools.get(block.tool_use_id);
      node = this.toolCard(block);
      // The CLI's own input replaces a rebuilt one: its result and permission move along.
      if (known) {
        for (const slot of ['.tool-permission', '.tool-result']) $(slot, node).replaceWith($(slot, known));
      }
    } else node = el('div', { class: 'block' }, codeBlock(JSON.stringify(block.value, null, 2), 'json'));
    const message = this.place(update, chunk, node, null);
    message.blocks.get(update.index).done = true;
    if (update.uuid) message.box.dataset.uuid = update.uuid;
    if (update.uuid && !update.parent_tool_use_id && !$('.fork-here', message.box)) {
      message.box.append(el('button', { type: 'button', class: 'fork-here', title: 'Start a new session from this point of the conversation',
        onclick: () => view?.fork(message.box.dataset.uuid) }, 'Fork from here'));
    }
  }

  toolCard(call) {
    const name = call.name ?? '';
    const card = el('div', { class: `block tool tool-${name.replace(/[^A-Za-z0-9_-]/g, '')}`, dataset: { toolUseId: call.tool_use_id, tool: name } });
    const input = call.input ?? {};
    const head = el('div', { class: 'tool-head' }, el('span', { class: 'tool-name' }, name));
    const body = el('div', { class: 'tool-body' });
    card.append(head, body);
    switch (name) {
      case 'Bash':
        head.append(el('span', { class: 'tool-summary' }, input.description ?? ''));
        body.append(codeBlock(`$ ${input.command ?? ''}`, 'bash'));
        break;
      case 'Edit':
        head.append(el('span', { class: 'tool-summary' }, input.file_path));
        body.append(diffView(input.old_string, input.new_string, input.file_path));
        break;
      case 'MultiEdit':
        head.append(el('span', { class: 'tool-summary' }, input.file_path));
        for (const edit of input.edits ?? []) body.append(diffView(edit.old_string, edit.new_string, input.file_path));
        break;
      case 'Write':
        head.append(el('span', { class: 'tool-summary' }, input.file_path));
        body.append(codeBlock(input.content, languageOf(input.file_path)));
        break;
      case 'Read': {
        const range = input.offset || input.limit
          ? ` lines ${input.offset ?? 1}–${(input.offset ?? 1) + (input.limit ?? 0) - 1}` : '';
        head.append(el('span', { class: 'tool-summary' }, `${input.file_path ?? ''}${range}`));
        break;
      }
      case 'Task':
      case 'Agent':
        head.append(el('span', { class: 'tool-summary' }, input.description ?? input.subagent_type ?? ''));
        body.append(el('details', { class: 'agent-prompt' }, el('summary', {}, 'Prompt'), markdown(input.prompt ?? '')));
        body.append(el('div', { class: 'nest' }));
        break;
      case 'AskUserQuestion':
        for (const question of input.questions ?? []) {
          body.append(el('div', { class: 'question' }, el('strong', {}, question.question),
            el('ul', {}, (question.options ?? []).map((option) => el('li', {}, option.label,
              option.description ? el('span', { class: 'muted' }, ` — ${option.description}`) : null)))));
        }
        break;
      default:
        if (name.startsWith('mcp__')) {
          const [, server, tool] = name.split('__');
          head.querySelector('.tool-name').textContent = `${server} · ${tool}`;
          head.append(el('span', { class: 'tool-summary muted' }, 'MCP tool'));
        }
        body.append(codeBlock(JSON.stringify(input, null, 2), 'json'));
    }
    card.append(el('div', { class: 'tool-permission' }), el('div', { class: 'tool-result' }));
    this.tools.set(call.tool_use_id, card);
    for (const waiting of this.orphans.get(call.tool_use_id) ?? []) waiting(card);
    this.orphans.delete(call.tool_use_id);
    return card;
  }

  /// Runs `fn(card)` now, or when the card for `toolUseId` is drawn.
  withCard(toolUseId, fn) {
    const card = this.tools.get(toolUseId);
    if (card) return fn(card);
    if (!this.orphans.has(toolUseId)) this.orphans.set(toolUseId, []);
    this.orphans.get(toolUseId).push(fn);
    return undefined;
  }

  /// A result goes to its card, wherever that is (or waits for it).
  toolResult(result) {
    this.withCard(result.tool_use_id, (card) => {
      $('.tool-result', card).replaceChildren(resultView(result));
      card.classList.toggle('errored', Boolean(result.is_error));
      card.classList.add('done');
    });
  }

  turnEnded(turn, chunk) {
    const into = this.container(turn.parent_tool_use_id, chunk);
    if (!turn.parent_tool_use_id) {
      this.turns.push({ cost: turn.cost_usd, input: turn.input_tokens, output: turn.output_tokens });
      if (turn.models?.length) this.models = turn.models;
    }
    const parts = [`${(turn.duration_ms / 1000).toFixed(1)} s`, `${tokens(turn.input_tokens)} in`, `${tokens(turn.output_tokens)} out`, money(turn.cost_usd)];
    const label = turn.interrupted ? 'Interrupted · '
      : turn.failed ? `Turn ended: ${turn.subtype}${turn.result ? ` — ${turn.result}` : ''} · `
        : 'Turn done · ';
    into.append(el('div', { class: `turn-end${turn.failed ? ' error' : ''}${turn.interrupted ? ' interrupted' : ''}` }, label, parts.join(' · ')));
  }

  permissionRequested(request, chunk) {
    if (this.permissions.has(request.request_id) && this.permissions.get(request.request_id).request) return;
    const entry = this.permissions.get(request.request_id) ?? { request, decided: null, box: null };
    entry.request = request;
    this.permissions.set(request.request_id, entry);
    const draw = (slot) => {
      entry.box = permissionBox(this.session, request);
      slot.replaceChildren(entry.box);
      if (entry.decided) showDecision(entry.box, entry.decided);
    };
    if (request.tool_use_id && this.tools.has(request.tool_use_id)) {
      draw($('.tool-permission', this.tools.get(request.tool_use_id)));
    } else {
      const slot = el('div', { class: 'block tool standalone' }, el('div', { class: 'tool-head' }, el('span', { class: 'tool-name' }, request.tool_name)), codeBlock(JSON.stringify(request.input, null, 2), 'json'));
      const inner = el('div', { class: 'tool-permission' });
      slot.append(inner);
      chunk.append(slot);
      draw(inner);
    }
  }

  permissionDecided(decision) {
    const entry = this.permissions.get(decision.request_id);
    if (!entry) {
      this.permissions.set(decision.request_id, { request: null, decided: decision, box: null });
      // Decided with no request for a person (a policy rule, the policy's hook, the CLI on its
      // own): shown on the tool's card, unless a request's box is there already.
      if (decision.tool_use_id) {
        this.withCard(decision.tool_use_id, (card) => {
          const slot = $('.tool-permission', card);
          if (slot && !slot.firstChild) showDecision(slot, decision);
        });
      }
      return;
    }
    entry.decided = decision;
    if (entry.box) showDecision(entry.box, decision);
  }

  pending() {
    return [...this.permissions.values()].filter((entry) => entry.request && !entry.decided);
  }
}

function image(picture) {
  if (picture.source === 'base64') return el('img', { class: 'image', src: `data:${picture.media_type};base64,${picture.data}`, alt: 'image' });
  if (picture.source === 'url') return el('img', { class: 'image', src: picture.url, alt: 'image' });
  return el('span', { class: 'muted' }, '[image]');
}

function diffView(before, after, path) {
  const table = el('div', { class: 'diff', role: 'table', 'aria-label': `Changes to ${path ?? 'the file'}` });
  const changes = window.Diff ? window.Diff.diffLines(before ?? '', after ?? '') : [{ value: after ?? '' }];
  for (const change of changes) {
    const kind = change.added ? 'add' : change.removed ? 'del' : 'ctx';
    const sign = change.added ? '+' : change.removed ? '-' : ' ';
    for (const text of change.value.replace(/\n$/, '').split('\n')) {
      table.append(el('div', { class: `diff-line ${kind}` }, el('span', { class: 'sign' }, sign), el('span', { class: 'diff-text' }, text)));
    }
  }
  return table;
}

function resultView(result) {
  const box = el('div', { class: `result${result.is_error ? ' error' : ''}` });
  const text = `${result.text ?? ''}${result.interrupted ? '\n[interrupted]' : ''}`;
  const images = result.images ?? [];
  if (text) {
    const lines = text.split('\n').length;
    const pre = el('pre', { class: 'output' }, text);
    box.append(lines > 30 ? el('details', {}, el('summary', {}, `Output (${lines} lines)`), pre) : pre);
  } else if (!images.length) {
    box.append(el('div', { class: 'muted' }, result.tool_name === 'Bash' ? '(no output)' : 'Done'));
  }
  for (const picture of images) box.append(image(picture));
  return box;
}

// ---------------------------------------------------------------------------------------------
// Permissions: approve, deny, edit, always allow, answer questions

function permissionBox(session, request) {
  const box = el('div', { class: 'permission', dataset: { requestId: request.request_id } });
  const answer = async (body) => {
    for (const button of box.querySelectorAll('button')) button.disabled = true;
    try {
      await api('POST', `/api/sessions/${session}/permissions/${request.request_id}`, { by: 'browser', ...body });
    } catch (error) {
      toast(`Could not answer: ${error.message}`);
      for (const button of box.querySelectorAll('button')) button.disabled = false;
    }
  };
  box.append(el('div', { class: 'permission-title' }, `Allow ${request.tool_name}?`,
    request.reason ? el('span', { class: 'muted' }, ` ${request.reason}`) : null));

  if (request.tool_name === 'AskUserQuestion') {
    const answers = {};
    const questions = request.input?.questions ?? [];
    for (const question of questions) {
      const group = el('div', { class: 'choices', role: 'group', 'aria-label': question.question }, el('div', { class: 'choice-question' }, question.question));
      for (const option of question.options ?? []) {
        group.append(el('button', {
          type: 'button', class: 'choice', title: option.description ?? '',
          onclick: (event) => {
            answers[question.question] = option.label;
            for (const b of group.querySelectorAll('.choice')) b.classList.toggle('chosen', b === event.currentTarget);
            if (questions.every((q) => answers[q.question])) answer({ behavior: 'allow', answers });
          },
        }, option.label));
      }
      box.append(group);
    }
    box.append(el('div', { class: 'actions' }, el('button', { type: 'button', class: 'deny', onclick: () => answer({ behavior: 'deny', message: 'The user declined to answer.' }) }, 'Decline')));
    return box;
  }

  const message = el('input', { class: 'deny-message', placeholder: 'Why not? (told to Claude)', 'aria-label': 'Deny message' });
  const editor = el('textarea', { class: 'edit-input', rows: 4, hidden: true, 'aria-label': 'Edited input' }, JSON.stringify(request.input ?? {}, null, 2));
  const suggestion = (request.suggestions ?? []).find((s) => s.type === 'addRules');
  const rule = suggestion?.rules?.map((r) => `${r.toolName}${r.ruleContent ? `(${r.ruleContent})` : ''}`).join(', ');
  box.append(editor, el('div', { class: 'actions' },
    el('button', { type: 'button', class: 'allow primary', title: 'Allow (a)', onclick: () => {
      if (!editor.hidden) {
        try { answer({ behavior: 'allow', updated_input: JSON.parse(editor.value) }); } catch (error) { toast(`The edited input is not JSON: ${error.message}`); }
      } else answer({ behavior: 'allow' });
    } }, 'Allow'),
    el('button', { type: 'button', class: 'edit', onclick: (event) => { editor.hidden = !editor.hidden; event.currentTarget.textContent = editor.hidden ? 'Edit input' : 'Cancel edit'; } }, 'Edit input'),
    el('button', { type: 'button', class: 'always', title: rule ? `Always allow ${rule} in this session` : 'Always allow this in this session', onclick: () => answer({ behavior: 'allow', remember: true }) }, rule ? `Always allow ${rule}` : 'Always allow'),
    message,
    el('button', { type: 'button', class: 'deny', title: 'Deny (d)', onclick: () => answer({ behavior: 'deny', message: message.value || undefined }) }, 'Deny')));
  return box;
}

function showDecision(box, decision) {
  const by = decision.by?.kind === 'policy' ? `policy${decision.by.rule ? ` (${decision.by.rule})` : ''}`
    : decision.by?.kind === 'person' ? decision.by.who
    : decision.by?.kind === 'cli' ? 'Claude Code on its own' : (decision.by?.kind ?? decision.by ?? '');
  box.classList.add('decided', decision.behavior === 'allow' ? 'allowed' : 'denied');
  box.replaceChildren(el('div', { class: 'decision' },
    decision.behavior === 'allow' ? `Allowed by ${by}` : `Denied by ${by}`,
    decision.message ? `: ${decision.message}` : ''));
}

// ---------------------------------------------------------------------------------------------
// The session view

let view = null;

class SessionView {
  constructor(id) {
    this.id = id;
    this.firstSeq = null; // the oldest seq drawn
    this.lastSeq = 0; // the newest seq drawn
    this.seqs = []; // the seq of every live frame drawn, in arrival order (the tests read it)
    this.socket = null;
    this.closed = false;
    this.loadingOlder = false;
    this.root = el('section', { class: 'session' });
    this.headerBox = el('header', { class: 'session-head' });
    this.scroller = el('div', { class: 'transcript', tabindex: '0' });
    this.older = el('div', { class: 'older' });
    this.live = el('div', { class: 'chunk' });
    this.scroller.append(this.older, this.live);
    this.stats = el('aside', { class: 'stats' });
    this.composer = this.makeComposer();
    this.root.append(this.headerBox, el('div', { class: 'session-body' }, this.scroller, this.stats), this.composer);
    this.transcript = new Transcript(this.live, id);
    this.scroller.addEventListener('scroll', () => {
      if (this.scroller.scrollTop < 200) this.loadOlder();
    });
    window.__switchboard = { view: this };
  }

  async open() {
    $('#main').replaceChildren(this.root);
    this.header();
    const session = await api('GET', `/api/sessions/${this.id}`);
    sessions.set(this.id, { ...sessions.get(this.id), ...session });
    this.header();
    const page = await api('GET', `/api/sessions/${this.id}/view?before=9007199254740991&limit=${PAGE}`);
    this.draw(page.updates, this.live);
    this.firstSeq = page.first_seq;
    this.lastSeq = page.last_seq;
    if (!page.more) this.older.replaceChildren(el('div', { class: 'start' }, 'Start of the session'));
    // Requests asked before the loaded page are still waiting: draw them too.
    for (const request of session.pending_permissions ?? []) this.transcript.permissionRequested(request, this.live);
    this.scrollToEnd();
    this.subscribe();
    this.charts();
  }

  close() {
    this.closed = true;
    this.socket?.close();
  }

  draw(updates, chunk) {
    for (const update of updates) this.transcript.apply(update, chunk);
  }

  subscribe() {
    let delay = 300;
    const connect = () => {
      if (this.closed) return;
      const socket = new WebSocket(socketUrl(`/api/sessions/${this.id}/subscribe?view=true&after=${this.lastSeq}`));
      this.socket = socket;
      socket.onopen = () => { delay = 300; connection.up(); };
      socket.onmessage = (message) => {
        const frame = JSON.parse(message.data);
        if (frame.type === 'lagged') return; // the missed events follow from the log
        if (frame.type === 'ack') return;
        if (frame.type === 'store_failing' || frame.type === 'shutdown') { toast(frame.message); return; }
        if (frame.type === 'store_recovered') { toast('The event log takes this session\'s events again.'); return; }
        if (frame.type === 'error') { toast(frame.error?.message ?? 'error'); return; }
        // One event's updates come in one frame: an event is drawn whole, once.
        if (frame.type !== 'view' || typeof frame.seq !== 'number' || frame.seq <= this.lastSeq) return;
        const atEnd = this.scroller.scrollHeight - this.scroller.scrollTop - this.scroller.clientHeight < 80;
        this.draw(frame.updates, this.live);
        this.lastSeq = frame.seq;
        this.seqs.push(frame.seq);
        if (frame.updates.some((update) => update.update === 'turn_ended')) this.charts();
        if (atEnd) this.scrollToEnd();
      };
      socket.onclose = () => {
        if (this.closed) return;
        connection.down('The connection to the daemon dropped.');
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 5000);
      };
    };
    connect();
  }

  async loadOlder() {
    if (this.loadingOlder || this.firstSeq === null || this.firstSeq <= 1) return;
    this.loadingOlder = true;
    try {
      const page = await api('GET', `/api/sessions/${this.id}/view?before=${this.firstSeq}&limit=${PAGE}`);
      const chunk = el('div', { class: 'chunk' });
      const height = this.scroller.scrollHeight;
      this.draw(page.updates, chunk);
      this.older.after(chunk);
      this.firstSeq = page.first_seq;
      if (!page.more) this.older.replaceChildren(el('div', { class: 'start' }, 'Start of the session'));
      this.scroller.scrollTop += this.scroller.scrollHeight - height;
      this.charts();
    } finally {
      this.loadingOlder = false;
    }
  }

  scrollToEnd() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  /// The header: built once, then updated in place (a half-typed model name survives).
  header() {
    const session = sessions.get(this.id) ?? { id: this.id };
    const [state, label] = stateLabel(session);
    const running = session.running !== false && !['exited', 'crashed'].includes(session.state);
    if (!this.head) {
      const model = el('input', { class: 'model', list: 'models', 'aria-label': 'Model', placeholder: 'model' });
      model.addEventListener('change', () => this.control('model', { model: model.value }));
      const mode = el('select', { class: 'mode', 'aria-label': 'Permission mode' },
        ['default', 'acceptEdits', 'plan', 'bypassPermissions', 'dontAsk'].map((m) => el('option', { value: m }, m)));
      mode.addEventListener('change', () => this.control('permission-mode', { mode: mode.value }));
      this.head = {
        title: el('h1'), cwd: el('div', { class: 'muted cwd' }), badge: el('span', { class: 'badge' }),
        cost: el('span', { class: 'cost' }), model, mode,
        interrupt: el('button', { type: 'button', class: 'interrupt', title: 'Interrupt (Esc)', onclick: () => this.interrupt() }, 'Interrupt'),
        resume: el('button', { type: 'button', class: 'resume primary', onclick: () => this.resume() }, 'Resume'),
        fork: el('button', { type: 'button', class: 'fork', title: 'Fork this conversation into a new session', onclick: () => this.fork() }, 'Fork'),
      };
      const h = this.head;
      this.headerBox.replaceChildren(el('a', { href: '#/', class: 'back', 'aria-label': 'All sessions' }, '←'),
        el('div', { class: 'session-title' }, h.title, h.cwd), h.badge, h.cost, h.model, h.mode, h.interrupt, h.resume, h.fork);
    }
    const h = this.head;
    h.title.textContent = session.title || session.cwd || this.id;
    h.cwd.textContent = session.cwd ?? '';
    h.badge.className = `badge state-${state}`;
    h.badge.dataset.state = session.state ?? '';
    h.badge.textContent = label;
    h.cost.textContent = money(session.cost_usd);
    if (document.activeElement !== h.model) h.model.value = session.model ?? '';
    if (document.activeElement !== h.mode) h.mode.value = session.permission_mode ?? 'default';
    h.interrupt.hidden = !running;
    h.resume.hidden = running;
    h.fork.hidden = !session.claude_session_id;
  }

  async control(what, body) {
    try {
      await api('POST', `/api/sessions/${this.id}/${what}`, body);
      const session = sessions.get(this.id);
      if (session && what === 'model') session.model = body.model;
      if (session && what === 'permission-mode') session.permission_mode = body.mode;
      toast(`${what === 'model' ? 'Model' : 'Permission mode'} set to ${body.model ?? body.mode}`, 'info');
    } catch (error) { toast(error.message); }
  }

  async interrupt() {
    try { await api('POST', `/api/sessions/${this.id}/interrupt`); } catch (error) { toast(error.message); }
  }

  async resume() {
    try { const session = await api('POST', `/api/sessions/${this.id}/resume`, {}); sessions.set(this.id, session); this.header(); } catch (error) { toast(error.message); }
  }

  async fork(uuid) {
    const session = sessions.get(this.id);
    try {
      const created = await api('POST', '/api/sessions', { cwd: session.cwd, resume: session.claude_session_id, fork: true, resume_at: uuid });
      location.hash = `#/s/${created.id}`;
    } catch (error) { toast(error.message); }
  }

  makeComposer() {
    const input = el('textarea', { class: 'composer-input', rows: 2, placeholder: 'Message Claude (Ctrl+Enter to send; queued while a turn runs)', 'aria-label': 'Message' });
    const send = async () => {
      const content = input.value.trim();
      if (!content) return;
      input.value = '';
      try { await api('POST', `/api/sessions/${this.id}/messages`, { content }); } catch (error) { input.value = content; toast(error.message); }
    };
    input.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) { event.preventDefault(); send(); }
    });
    this.input = input;
    return el('form', { class: 'composer', onsubmit: (event) => { event.preventDefault(); send(); } }, input, el('button', { type: 'submit', class: 'primary send' }, 'Send'));
  }

  charts() {
    const transcript = this.transcript;
    const turns = transcript.turns;
    const context = transcript.context;
    const models = transcript.models;
    const window_ = models.map((m) => m.context_window).find(Boolean) ?? 200000;
    const share = Math.min(1, context / window_);
    const gauge = el('div', { class: 'gauge', role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': window_, 'aria-valuenow': context, 'aria-label': 'Context window used' },
      el('div', { class: 'gauge-fill', style: `width:${(share * 100).toFixed(1)}%` }));
    const chart = el('div', { class: 'cost-chart' });
    this.stats.replaceChildren(
      el('h2', {}, 'Cost'),
      turns.length ? chart : el('p', { class: 'muted' }, 'No finished turn yet.'),
      el('h2', {}, 'Context'), gauge, el('div', { class: 'muted' }, `${tokens(context)} of ${tokens(window_)} tokens`),
      el('h2', {}, 'By model'),
      el('table', { class: 'models' }, el('tbody', {}, models.map((m) => el('tr', {},
        el('td', {}, m.model), el('td', {}, `${tokens(m.input_tokens)} in`), el('td', {}, `${tokens(m.output_tokens)} out`), el('td', {}, money(m.cost_usd))))))
    );
    if (!turns.length) return;
    const xs = turns.map((_, i) => i + 1);
    const data = [xs, turns.map((t) => t.cost), turns.map((t) => t.input + t.output)];
    const width = Math.max(220, this.stats.clientWidth - 16);
    // uPlot draws onto a canvas: the chart follows the stats panel.
    new uPlot({
      width, height: 160, legend: { show: true },
      scales: { x: { time: false }, tokens: {} },
      axes: [{ label: 'turn' }, { scale: '$', values: (_, ticks) => ticks.map((t) => money(t)), size: 70 }, { scale: 'tokens', side: 1, grid: { show: false } }],
      series: [{ label: 'turn' }, { label: 'cost', scale: '$', stroke: '#3366cc', fill: 'rgba(51,102,204,.15)', paths: uPlot.paths.bars?.({ size: [0.6] }), value: (_, v) => v == null ? '' : money(v) },
        { label: 'tokens', scale: 'tokens', stroke: '#cc7a00', value: (_, v) => v == null ? '' : tokens(v) }],
    }, data, chart);
  }
}

// ---------------------------------------------------------------------------------------------
// The new-session form and the routes

function newSessionForm(prefill = {}) {
  const form = $('#new-session-form').content.firstElementChild.cloneNode(true);
  for (const [key, value] of Object.entries(prefill)) if (form.elements[key]) form.elements[key].value = value;
  const lastCwd = localStorage.getItem('switchboard.cwd');
  if (lastCwd && !form.elements.cwd.value) form.elements.cwd.value = lastCwd;
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const body = { cwd: data.get('cwd').trim() };
    for (const key of ['prompt', 'model', 'permission_mode', 'policy', 'resume', 'resume_at']) {
      const value = (data.get(key) ?? '').trim();
      if (value) body[key] = value;
    }
    if (data.get('fork')) body.fork = true;
    const mcp = (data.get('mcp_config') ?? '').trim();
    if (mcp) body.mcp_config = [mcp];
    const error = $('.form-error', form);
    error.hidden = true;
    try {
      const session = await api('POST', '/api/sessions', body);
      localStorage.setItem('switchboard.cwd', body.cwd);
      sessions.set(session.id, session);
      location.hash = `#/s/${session.id}`;
    } catch (failure) {
      error.textContent = failure.message;
      error.hidden = false;
    }
  });
  return form;
}

function route() {
  view?.close();
  view = null;
  const hash = location.hash;
  const match = hash.match(/^#\/s\/([^/]+)$/);
  document.body.classList.toggle('in-session', Boolean(match));
  if (match) {
    view = new SessionView(match[1]);
    view.open().catch((error) => toast(error.message));
  } else if (hash === '#/new') {
    $('#main').replaceChildren(newSessionForm());
    $('#main [name=cwd]').focus();
  } else {
    renderOverview();
  }
  renderList();
}

/// The home page: every session at a glance, the ones waiting for a person first.
function renderOverview() {
  if (view || !['', '#', '#/'].includes(location.hash)) return;
  const rank = (s) => ({ waiting: 0, working: 1, starting: 1, compacting: 1, idle: 2 }[stateLabel(s)[0]] ?? 3);
  const items = [...sessions.values()].sort((a, b) => rank(a) - rank(b) || (b.updated_ms ?? 0) - (a.updated_ms ?? 0));
  const total = items.reduce((sum, s) => sum + (s.cost_usd ?? 0), 0);
  const waiting = items.filter((s) => rank(s) === 0).length;
  const running = items.filter((s) => rank(s) <= 1).length;
  $('#main').replaceChildren(el('div', { class: 'overview' },
    el('div', { class: 'overview-head' }, el('h1', {}, 'Sessions'), el('a', { href: '#/new', class: 'button primary' }, 'New session')),
    el('p', { class: 'muted' }, `${items.length} sessions · ${running} active · ${waiting} waiting for you · ${money(total)} in all`),
    items.length ? el('table', { class: 'overview-table' },
      el('thead', {}, el('tr', {}, ['Session', 'State', 'Directory', 'Model', 'Cost', 'Last activity'].map((h) => el('th', {}, h)))),
      el('tbody', {}, items.map((session) => {
        const [state, label] = stateLabel(session);
        const pending = session.pending_permissions?.length ?? 0;
        return el('tr', { class: `state-${state}` },
          el('td', {}, el('a', { href: `#/s/${session.id}` }, session.title || shortPath(session.cwd) || session.id)),
          el('td', {}, el('span', { class: `badge state-${state}` }, pending > 1 ? `${label} (${pending})` : label)),
          el('td', { class: 'muted', title: session.cwd }, shortPath(session.cwd)),
          el('td', {}, session.model ?? ''), el('td', {}, money(session.cost_usd)), el('td', { class: 'muted' }, ago(session.updated_ms)));
      }))) : el('p', {}, 'No sessions yet. Start one to run Claude Code here.')));
}

// Keyboard: Ctrl+Enter sends (in the composer), Esc interrupts, a / d approve / deny the oldest
// pending request, n opens the new-session form.
document.addEventListener('keydown', (event) => {
  const typing = ['INPUT', 'TEXTAREA', 'SELECT'].includes(document.activeElement?.tagName);
  if (event.key === 'Escape' && view && !typing) { event.preventDefault(); view.interrupt(); return; }
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.key === 'n') { location.hash = '#/new'; event.preventDefault(); }
  const box = $('.permission:not(.decided)', view?.root ?? document.createElement('div'));
  if (!box) return;
  if (event.key === 'a') $('.allow', box)?.click();
  if (event.key === 'd') $('.deny', box)?.click();
});

document.addEventListener('click', () => {
  if ('Notification' in window && Notification.permission === 'default') Notification.requestPermission().catch(() => {});
}, { once: true });

window.addEventListener('hashchange', route);
setInterval(renderList, 30000); // "3 min ago" moves on
loadSessions().catch(() => {}).finally(route);
watchDashboard();
