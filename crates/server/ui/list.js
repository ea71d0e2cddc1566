// The session list (the sidebar), kept live by the /api/events socket (reloaded on connect and
// on `lagged`): waiting sessions first, then one group per repository or directory (a worktree
// session under the repository it was made from, with its branch); searchable; archived ones
// on request. The home page is triage only (what waits, what works), so no session is listed
// twice on a desk.
import { $, el, icon, stateIcon } from './dom.js';
import { ago, homeRelative, money, originOf, plural, shortPath, stateLabel, wants } from './words.js';
import { api, connection, socketUrl } from './api.js';
import { showing } from './showing.js';

export const sessions = new Map();

export async function loadSessions() {
  const list = await api('GET', '/api/sessions');
  sessions.clear();
  for (const session of list) sessions.set(session.id, session);
  renderList();
}

export const titleOf = (session) => session.title || session.cwd?.split('/').pop() || session.id;

function matches(session, query) {
  if (!query) return true;
  return [session.title, session.cwd, session.model, session.id].some((field) => field?.toLowerCase().includes(query));
}

/// The group a session is listed in: the repository a worktree session was made from, else its
/// directory.
const groupOf = (session) => session.config?.worktree?.repo ?? session.cwd ?? '';

function sessionItem(session, current) {
  const [state, label] = stateLabel(session);
  const pending = session.pending_permissions?.length ?? 0;
  const branch = session.config?.worktree?.branch;
  const origin = originOf(session);
  return el('li', { class: `session-item state-${state}${session.id === current ? ' current' : ''}${session.archived ? ' archived' : ''}${branch ? ' in-worktree' : ''}` },
    el('a', { href: `#/s/${session.id}`, dataset: { id: session.id }, title: session.cwd },
      stateIcon(state),
      el('span', { class: 'title' }, titleOf(session)),
      el('span', { class: `badge state-${state}` }, pending > 1 ? `${label} (${pending})` : label),
      el('span', { class: 'meta' },
        branch ? el('span', { class: 'branch', title: `In a worktree of its own, on ${branch}` }, icon('branch'), branch) : null,
        origin ? el('span', { class: 'origin', title: origin.title }, origin.label) : null,
        el('span', {}, session.model ?? ''),
        el('span', {}, money(session.cost_usd)),
        el('span', { class: 'ago' }, ago(session.updated_ms)),
        session.node ? el('span', { class: 'node', title: 'the node that runs it' }, `on ${session.node}`) : null,
        session.archived ? el('span', {}, 'archived') : null)));
}

export function renderList() {
  const list = $('#session-list');
  const current = showing.view?.id;
  const query = $('#session-search').value.trim().toLowerCase();
  const showArchived = $('#show-archived').checked;
  const all = [...sessions.values()].sort((a, b) => (b.updated_ms ?? 0) - (a.updated_ms ?? 0));
  const archived = all.filter((s) => s.archived).length;
  $('#archived-label').textContent = `Show archived (${archived})`;
  const shown = all.filter((s) => (showArchived || !s.archived || s.id === current) && matches(s, query));
  const waiting = shown.filter((s) => stateLabel(s)[0] === 'waiting');
  const groups = new Map();
  for (const session of shown.filter((s) => !waiting.includes(s))) {
    const key = groupOf(session);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(session);
  }
  const rows = [];
  if (waiting.length) {
    rows.push(el('li', { class: 'group-head waiting', role: 'presentation' }, icon('bell'), 'Waiting for you', el('span', { class: 'count' }, waiting.length)));
    rows.push(...waiting.map((s) => sessionItem(s, current)));
  }
  for (const [dir, items] of groups) {
    rows.push(el('li', { class: 'group-head', role: 'presentation', title: dir },
      // Left-to-right marks keep the path's own order in a box that cuts from the left.
      icon('folder'), el('span', { class: 'path' }, `\u200e${homeRelative(dir) || 'no directory'}\u200e`), el('span', { class: 'count' }, items.length)));
    // The sessions in the directory itself first, then its worktrees'.
    const inPlace = items.filter((s) => !s.config?.worktree);
    rows.push(...[...inPlace, ...items.filter((s) => !inPlace.includes(s))].map((s) => sessionItem(s, current)));
  }
  if (!rows.length) {
    rows.push(el('li', { class: 'list-empty' }, query ? `No session matches "${query}".` : 'No sessions yet.'));
  }
  list.replaceChildren(...rows);
  renderOverview();
  const count = all.filter((s) => stateLabel(s)[0] === 'waiting').length;
  document.title = count > 0 ? `(${count}) waiting — Switchboard` : 'Switchboard';
}

function notifyWaiting(session) {
  if (!document.hidden || !('Notification' in window) || Notification.permission !== 'granted') return;
  const note = new Notification('Switchboard: approval needed', {
    body: session.title || session.cwd || session.id, tag: `sb-${session.id}`,
  });
  note.onclick = () => { window.focus(); location.hash = `#/s/${session.id}`; };
}

export function watchDashboard() {
  let delay = 500;
  const connect = () => {
    const socket = new WebSocket(socketUrl('/api/events'));
    socket.onopen = () => { delay = 500; connection.up(); loadSessions().catch(() => {}); };
    socket.onmessage = (message) => {
      const change = JSON.parse(message.data);
      if (change.type === 'lagged') { loadSessions().catch(() => {}); return; }
      // A node lost or back: every session's `node_lost` may have changed.
      if (change.event === 'nodes_changed') { loadSessions().then(() => showing.view?.header()).catch(() => {}); return; }
      // The Schedules page draws itself again.
      if (change.event === 'schedules_changed') { window.dispatchEvent(new Event('switchboard:schedules')); return; }
      if (change.event === 'session_created') {
        sessions.set(change.session.id, change.session);
      } else if (change.event === 'session_deleted') {
        sessions.delete(change.session_id);
      } else if (change.event === 'session_changed') {
        const session = sessions.get(change.session_id) ?? { id: change.session_id };
        const before = stateLabel(session)[0];
        const known = session.pending_permissions ?? [];
        Object.assign(session, {
          state: change.state, cost_usd: change.cost_usd, model: change.model,
          claude_session_id: change.claude_session_id, updated_ms: Date.now(),
          permission_mode: change.permission_mode, title: change.title ?? session.title,
          archived: change.archived ?? session.archived,
          running: !['exited', 'crashed', 'parked'].includes(change.state),
          pending_permissions: known.length === change.pending_permissions ? known : new Array(change.pending_permissions).fill({}),
          disconnected_since_ms: change.disconnected_since_ms ?? null,
          paused: change.paused ?? null,
          node: change.node ?? session.node ?? null,
        });
        sessions.set(session.id, session);
        if (before !== 'waiting' && stateLabel(session)[0] === 'waiting') {
          notifyWaiting(session);
          // What it waits for, for the home page.
          api('GET', `/api/sessions/${session.id}`).then((full) => { Object.assign(session, full); renderList(); }).catch(() => {});
        }
        if (showing.view?.id === session.id) showing.view.header();
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

/// The home page: what needs a person now (the list of every session is the sidebar).
export function renderOverview() {
  if (showing.view || !['', '#', '#/'].includes(location.hash)) return;
  const items = [...sessions.values()].sort((a, b) => (b.updated_ms ?? 0) - (a.updated_ms ?? 0));
  const waiting = items.filter((s) => stateLabel(s)[0] === 'waiting');
  const working = items.filter((s) => ['working', 'starting', 'compacting'].includes(stateLabel(s)[0]));
  // Running and at rest: a CLI is up, ready for a message (not waiting, working, paused at a
  // budget or cut off).
  const ready = items.filter((s) => stateLabel(s)[0] === 'idle' && s.running !== false);
  const total = items.reduce((sum, s) => sum + (s.cost_usd ?? 0), 0);
  const tile = (value, label, extra = '') => el('div', { class: `tile ${extra}` }, el('div', { class: 'value' }, value), el('div', { class: 'label' }, label));
  const card = (session, what) => {
    const [state, label] = stateLabel(session);
    return el('a', { class: `triage state-${state}${state === 'waiting' ? ' waiting' : ''}`, href: `#/s/${session.id}` },
      stateIcon(state), el('span', { class: 'title' }, titleOf(session)), el('span', { class: `badge state-${state}` }, label),
      el('span', { class: 'what' }, what));
  };
  const waitingFor = (session) => {
    const request = session.pending_permissions?.find((p) => p.tool_name);
    if (!request) return `${shortPath(session.cwd)} · ${plural(session.pending_permissions?.length ?? 1, 'request')} waiting`;
    const [verb, target] = wants(request.tool_name, request.input, session.cwd);
    return `Claude wants to ${verb}${target ? ` ${target}` : ''}`;
  };
  $('#main').replaceChildren(el('div', { class: 'overview' },
    el('div', { class: 'overview-head' }, el('h1', {}, 'Sessions'), el('a', { href: '#/new', class: 'button primary' }, 'New session')),
    el('div', { class: 'tiles' },
      tile(waiting.length, 'waiting for you', waiting.length ? 'waiting' : ''), tile(working.length, 'working now'),
      tile(ready.length, 'open and idle, ready for a message'),
      tile(money(total), 'spent in all')),
    el('h2', {}, 'Waiting for you'),
    waiting.length ? el('div', { class: 'cards' }, waiting.map((s) => card(s, waitingFor(s))))
      : el('p', { class: 'muted' }, 'Nothing waits for you.'),
    el('h2', {}, 'Working now'),
    working.length ? el('div', { class: 'cards' }, working.map((s) => card(s, `${shortPath(s.cwd)} · ${s.model ?? ''} · ${money(s.cost_usd)}`)))
      : el('p', { class: 'muted' }, items.length ? 'No session is working. Pick one on the left, or start a new one.' : 'No sessions yet. Start one to run Claude Code here.')));
}
