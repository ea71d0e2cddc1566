// The session view: a session's transcript, header, waiting requests and controls; its review,
// files and terminal, composer and stats are parts of their own (mixed into `SessionView`).
//
// It loads the last page (`view?before=…`), subscribes with `view=true` after its last `seq`
// (and again after every drop, from the last frame's `seq`: one frame holds one event's updates,
// so a reconnect neither repeats nor skips), and pages back on scroll into chunks above the
// others. The waiting bar shows while the oldest pending request is out of the transcript's
// sight. `window.__switchboard.view` exposes `seqs`, `chartTurns` and `chartTicks` for the
// browser tests.
import { $, el, icon } from './dom.js';
import { plural, wantsLine } from './words.js';
import { api, connection, socketUrl, toast } from './api.js';
import { renderList, sessions } from './list.js';
import { Transcript } from './transcript.js';
import { composerMethods } from './composer.js';
import { headMethods } from './head.js';
import { inForceMethods } from './inforce.js';
import { reviewMethods } from './review.js';
import { filesMethods } from './files.js';
import { usageMethods } from './usage.js';

const PAGE = 300; // events per page when opening a session or paging back

export class SessionView {
  constructor(id, at = null) {
    this.id = id;
    this.at = at; // the event to open at (a search's hit), or null: the end
    this.firstSeq = null; // the oldest seq drawn
    this.lastSeq = 0; // the newest seq drawn
    this.seqs = []; // the seq of every live frame drawn, in arrival order (the tests read it)
    this.socket = null;
    this.closed = false;
    this.loadingOlder = false;
    this.usage = null; // GET …/usage: every turn of the session
    this.root = el('section', { class: 'session' });
    this.headerBox = el('header', { class: 'session-head' });
    this.tabBar = el('nav', { class: 'session-tabs', role: 'tablist', 'aria-label': 'Chat, review, files, terminal' });
    this.scroller = el('div', { class: 'transcript', tabindex: '0' });
    this.older = el('div', { class: 'older' });
    this.live = el('div', { class: 'chunk' });
    this.scroller.append(this.older, this.live);
    this.stats = el('aside', { class: 'stats', 'aria-label': 'Cost and context' });
    // Allow and Deny press the card's own buttons (one way to answer) of the request the bar
    // shows, and nothing if that one is answered meanwhile; a question or a plan needs its
    // card, so those show only Show.
    const press = (which) => {
      const shown = this.transcript.pending().find((entry) => entry.request.request_id === this.waitingBar.dataset.requestId);
      if (shown) $(`.permission[data-request-id="${CSS.escape(shown.request.request_id)}"] ${which}`, shown.box)?.click();
      else this.refreshWaiting();
    };
    this.waitingBar = el('div', { class: 'waiting-bar', hidden: true, role: 'status' }, icon('bell'),
      el('span', { class: 'what' }),
      el('button', { type: 'button', class: 'allow needs-approve', onclick: () => press('.allow') }, icon('check'), 'Allow'),
      el('button', { type: 'button', class: 'deny needs-approve', onclick: () => press('.deny') }, icon('x'), 'Deny'),
      el('button', { type: 'button', class: 'primary show', onclick: () => this.showWaiting() }, 'Show'));
    this.composer = this.makeComposer();
    // What runs in the background (a Bash command, a subagent): each with its own Stop, since
    // Stop in the head ends the turn and leaves these running.
    this.tasksBar = el('div', { class: 'tasks-bar', hidden: true, role: 'status', 'aria-label': 'Running in the background' });
    // A session paused at a budget: why, and what a person may do (raise it, or stop).
    this.budgetInput = el('input', { type: 'number', min: '0', step: '0.5', class: 'budget-input', 'aria-label': 'New budget in US dollars' });
    this.pausedBar = el('div', { class: 'paused-bar', hidden: true, role: 'status' },
      el('span', { class: 'why' }),
      el('label', { class: 'raise needs-operate' }, '$', this.budgetInput),
      el('button', { type: 'button', class: 'primary raise needs-operate', onclick: () => this.raiseBudget() }, 'Raise and go on'),
      el('button', { type: 'button', class: 'stop needs-operate', onclick: () => this.stop() }, 'Stop'));
    this.root.append(this.headerBox, this.tabBar, el('div', { class: 'session-body' }, this.scroller, this.stats), this.waitingBar, this.pausedBar, this.tasksBar, this.composer);
    this.transcript = new Transcript(id);
    this.transcript.onChange = () => { this.drawContext(); this.refreshWaiting(); };
    this.transcript.onWindows = () => this.drawWindows(this.transcript.usageWindows);
    this.transcript.onTasks = (tasks) => this.drawTasks(tasks);
    // Following the end: true until the person scrolls away from it, again once they are back.
    // Only scrolling changes it, so text that grows between two frames does not.
    this.follow = true;
    this.transcript.onGrow = () => { if (this.follow) this.scrollToEnd(); };
    let ticking = false;
    this.scroller.addEventListener('scroll', () => {
      this.follow = this.scroller.scrollHeight - this.scroller.scrollTop - this.scroller.clientHeight < 80;
      if (this.scroller.scrollTop < 200) this.loadOlder();
      if (!ticking) { ticking = true; requestAnimationFrame(() => { ticking = false; this.refreshWaiting(); }); }
    });
    window.__switchboard = { view: this };
  }

  async open() {
    $('#main').replaceChildren(this.root);
    this.header();
    const session = await api('GET', `/api/sessions/${this.id}`);
    sessions.set(this.id, { ...sessions.get(this.id), ...session });
    this.transcript.cwd = session.cwd;
    this.header();
    // As the session stands; the page's own updates, newer, follow.
    this.drawTasks(session.background_tasks ?? []);
    const page = await api('GET', `/api/sessions/${this.id}/view?before=9007199254740991&limit=${PAGE}`);
    this.draw(page.updates, this.live);
    this.firstSeq = page.first_seq;
    this.lastSeq = page.last_seq;
    if (!page.more) this.older.replaceChildren(el('div', { class: 'start' }, 'Start of the session'));
    // Requests asked before the loaded page are still waiting: draw them too.
    for (const request of session.pending_permissions ?? []) this.transcript.permissionRequested(request, this.live);
    if (this.at === null) this.scrollToEnd();
    else await this.showEvent(this.at);
    this.subscribe();
    this.buildStats();
    this.loadUsage();
    if (this.transcript.usageWindows) this.drawWindows(this.transcript.usageWindows);
    else this.loadWindows();
    this.refreshWaiting();
  }

  close() {
    this.closed = true;
    this.socket?.close();
    this.chart?.destroy();
    this.statsObserver?.disconnect();
    // A settings sheet open for this session goes with it.
    for (const sheet of document.querySelectorAll('dialog.sheet')) sheet.close();
    // A shell open here ends when the page leaves the session (the daemon ends it).
    if (this.shellPanel) this.toggleShell();
  }

  draw(updates, chunk, seq = null) {
    for (const update of updates) {
      const last = chunk.lastElementChild;
      this.transcript.apply(update, chunk);
      // What an event drew is marked with it, for opening the session at an event.
      const drawn = chunk.lastElementChild;
      const at = typeof update.seq === 'number' ? update.seq : seq;
      if (drawn && drawn !== last && at !== null && !drawn.dataset.seq) drawn.dataset.seq = String(at);
    }
  }

  /// Opens the session at event `seq`: pages back until it is drawn, then shows what it drew
  /// (or what the events before it drew), marked.
  async showEvent(seq) {
    this.follow = false;
    // At most 40 pages back (12,000 events): past that, the page says where it stopped.
    for (let pages = 0; this.firstSeq !== null && this.firstSeq > seq && this.firstSeq > 1; pages += 1) {
      if (pages === 40) { toast(`Event ${seq} is further back: scroll up to reach it.`, 'ok'); return; }
      const before = this.firstSeq;
      await this.loadOlder();
      if (this.firstSeq === before) break;
    }
    const marked = [...this.scroller.querySelectorAll('[data-seq]')].filter((node) => Number(node.dataset.seq) <= seq);
    const target = marked.sort((a, b) => Number(a.dataset.seq) - Number(b.dataset.seq)).pop();
    if (!target) return;
    target.classList.add('found');
    target.scrollIntoView({ block: 'center' });
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
        this.draw(frame.updates, this.live, frame.seq);
        this.lastSeq = frame.seq;
        this.seqs.push(frame.seq);
        if (frame.updates.some((update) => update.update === 'turn_ended' && !update.parent_tool_use_id)) this.loadUsage();
        if (this.follow) this.scrollToEnd();
        this.refreshWaiting();
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
      this.transcript.older = true;
      try { this.draw(page.updates, chunk); } finally { this.transcript.older = false; }
      this.older.after(chunk);
      this.firstSeq = page.first_seq;
      if (!page.more) this.older.replaceChildren(el('div', { class: 'start' }, 'Start of the session'));
      this.scroller.scrollTop += this.scroller.scrollHeight - height;
    } finally {
      this.loadingOlder = false;
    }
  }

  scrollToEnd() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  /// The bar above the message box: shown while an approval waits out of sight.
  refreshWaiting() {
    const pending = this.transcript.pending();
    if (!pending.length) { this.waitingBar.hidden = true; return; }
    const first = pending[0];
    const box = first.box.getBoundingClientRect();
    const area = this.scroller.getBoundingClientRect();
    const inSight = box.bottom > area.top + 8 && box.top < area.bottom - 8 && area.height > 0;
    const what = $('.what', this.waitingBar);
    const cwd = this.transcript.cwd ?? sessions.get(this.id)?.cwd;
    what.replaceChildren(...wantsLine(first.request.tool_name, first.request.input, cwd).filter(Boolean),
      pending.length > 1 ? ` (and ${plural(pending.length - 1, 'more request')})` : '');
    this.waitingBar.dataset.requestId = first.request.request_id;
    const plain = !['AskUserQuestion', 'ExitPlanMode', 'McpElicitation'].includes(first.request.tool_name);
    // A request Claude Code says a person must look at, or that must not be one tap from
    // approved, gets no Allow on the bar: Show opens its card.
    const hints = first.request.hints ?? {};
    $('.allow', this.waitingBar).hidden = !plain || hints.person_only || hints.default_to_no;
    $('.deny', this.waitingBar).hidden = !plain;
    // Out of sight: scrolled away, or a panel has the transcript's place.
    this.waitingBar.hidden = inSight && !this.root.classList.contains('panel-open');
  }

  showWaiting() {
    const first = this.transcript.pending()[0];
    if (!first) return;
    this.closePanels();
    // A card folded by hand (a subagent's, say) opens to show it.
    for (let card = first.box.closest('.tool.collapsed'); card; card = card.parentElement?.closest('.tool.collapsed')) {
      card.dataset.user = 'open';
      this.transcript.settle(card);
    }
    first.box.scrollIntoView({ block: 'center' });
    // Focus goes to Allow (or a question's first choice), except where Claude Code asks that
    // nothing be preselected.
    if (!first.request.hints?.default_to_no) $('.allow, .choice', first.box)?.focus({ preventScroll: true });
    this.refreshWaiting();
  }

  drawPaused(session) {
    const paused = session.state === 'paused';
    const own = paused && !/daily budget/.test(session.paused ?? '');
    this.pausedBar.hidden = !paused;
    if (!paused) return;
    $('.why', this.pausedBar).textContent = `Paused: ${session.paused ?? 'a budget is spent'}.`;
    for (const control of this.pausedBar.querySelectorAll('.raise')) control.hidden = !own;
    if (own && document.activeElement !== this.budgetInput) {
      // A suggestion: twice what it has cost, at least a dollar more.
      const cost = session.spent_usd ?? session.cost_usd ?? 0;
      this.budgetInput.value = String(Math.ceil(Math.max(cost * 2, cost + 1)));
    }
  }

  async raiseBudget() {
    const usd = Number(this.budgetInput.value);
    if (!Number.isFinite(usd) || usd <= 0) { toast('A budget is a number of dollars.'); return; }
    try {
      const session = await api('PATCH', `/api/sessions/${this.id}`, { max_budget_usd: usd });
      sessions.set(this.id, { ...sessions.get(this.id), ...session });
      this.header();
      renderList();
      if (session.state === 'paused') toast(`Still paused: ${session.paused}`);
    } catch (error) { toast(error.message); }
  }

  async stop() {
    try { await api('DELETE', `/api/sessions/${this.id}`); } catch (error) { toast(error.message); }
  }

  /// Stops the running turn; with `all`, also drops every message queued behind it.
  async interrupt(all = false) {
    try { await api('POST', `/api/sessions/${this.id}/interrupt`, all ? { cancel_queued: true } : undefined); } catch (error) { toast(error.message); }
  }

  async resume() {
    try { const session = await api('POST', `/api/sessions/${this.id}/resume`, {}); sessions.set(this.id, session); this.header(); } catch (error) { toast(error.message); }
  }

  /// A suggested prompt, into the message box (not sent: the person reads it first).
  suggest(text) {
    this.input.value = text;
    this.input.focus();
  }

  /// The tasks running in the background, each with a Stop.
  drawTasks(tasks) {
    this.tasksBar.replaceChildren(...(tasks.length ? [el('span', { class: 'tasks-label muted' }, 'In the background:')] : []),
      ...tasks.map((task) => el('span', { class: 'task', dataset: { taskId: task.task_id } },
        el('span', { class: 'task-what', title: task.task_type ?? '' }, task.description || task.task_id),
        el('span', { class: 'task-kind muted' }, task.task_type === 'local_agent' ? (task.subagent_type ?? 'agent') : task.task_type === 'local_bash' ? 'shell' : (task.task_type ?? '')),
        el('button', { type: 'button', class: 'stop-task ghost needs-operate', title: 'Stop this task (the turn goes on)', onclick: () => this.stopTask(task.task_id) }, 'Stop'))));
    this.tasksBar.hidden = !tasks.length;
  }

  async stopTask(taskId) {
    try { await api('POST', `/api/sessions/${this.id}/tasks/${encodeURIComponent(taskId)}/stop`, {}); } catch (error) { toast(`Could not stop it: ${error.message}`); }
  }

  /// Drops a prompt that waits behind the running turn; the transcript marks it when the CLI
  /// says it is dropped.
  async cancelQueued(uuid) {
    try {
      const answer = await api('DELETE', `/api/sessions/${this.id}/queue/${encodeURIComponent(uuid)}`);
      if (!answer?.cancelled) toast('Too late to cancel: it has started.');
    } catch (error) { toast(`Could not cancel: ${error.message}`); }
  }

  async rewind(uuid) {
    const path = `/api/sessions/${this.id}/rewind`;
    if (sessions.get(this.id)?.config?.transport === 'terminal') { toast('A CLI in a terminal rewinds there: Esc twice.'); return; }
    try {
      const preview = await api('POST', path, { message: uuid, dry_run: true });
      if (!preview.can_rewind) { toast(`The files cannot be put back: ${preview.reason ?? 'no checkpoint for this message'}`); return; }
      if (!preview.files_changed) { toast('No file has changed since this message.', 'ok'); return; }
      const files = (preview.files ?? []).slice(0, 12).map((file) => `  ${file}`).join('\n');
      const more = (preview.files?.length ?? 0) > 12 ? `\n  and ${preview.files.length - 12} more` : '';
      const question = `Put ${plural(preview.files_changed, 'file')} back as they were before this message (+${preview.insertions ?? 0} −${preview.deletions ?? 0})?\n${files}${more}\n\nThe conversation stays as it is; "Fork from here" starts a new one at this point.`;
      if (!confirm(question)) return;
      await api('POST', path, { message: uuid });
      toast(`${plural(preview.files_changed, 'file')} put back`, 'ok');
    } catch (error) { toast(error.message); }
  }

  async fork(uuid) {
    const session = sessions.get(this.id);
    try {
      const created = await api('POST', '/api/sessions', { cwd: session.cwd, resume: session.claude_session_id, fork: true, resume_at: uuid });
      location.hash = `#/s/${created.id}`;
    } catch (error) { toast(error.message); }
  }
}

Object.assign(SessionView.prototype, headMethods, reviewMethods, filesMethods, composerMethods, usageMethods, inForceMethods);
