// The session's header and its tabs, a part of the session view (mixed into `SessionView`).
//
// The header is one row: back, state, title, the state's badge, the cost, and the session's
// controls (model and mode, a Stop shown only while a turn runs, Resume, the ⋯ menu). Under it,
// the tabs: Chat · Review · Files · Terminal. Review, Files and the terminal take the
// transcript's place, one at a time; Chat goes back to it. On a phone the model and mode move
// into a settings sheet (the ⋯ menu's "Model and mode"), and a tap on the cost opens the cost
// chart, the context gauge and the per-model table (the panel beside the transcript on a
// desk) in the transcript's place.
import { $$, el, icon, stateIcon } from './dom.js';
import { homeRelative, money, originOf, stateLabel } from './words.js';
import { api, toast } from './api.js';
import { renderList, sessions, titleOf } from './list.js';
import { PLACEHOLDER, TERMINAL_PLACEHOLDER } from './composer.js';

const MODELS = ['opus', 'sonnet', 'haiku'];
// The CLI's permission modes, in words a person reads in the picker.
const MODES = [
  ['default', 'Ask before edits and commands'],
  ['acceptEdits', 'Accept edits'],
  ['plan', 'Plan only'],
  ['bypassPermissions', 'Bypass permissions'],
  ['dontAsk', 'Never ask (deny instead)'],
  // Claude Code's classifier (on Anthropic's side) approves what it judges safe; the policy's
  // rules still decide first: a deny rule denies, an ask rule asks you.
  ['auto', 'Auto: your policy\'s rules hold (deny denies, ask asks you); what no rule decides, Claude Code\'s safety classifier judges'],
];
// A phone: the settings sheet holds the model and mode (the header has no room for them).
const phone = () => matchMedia('(max-width: 760px)').matches;

export const headMethods = {
  /// The header: built once, then updated in place (a half-typed name survives).
  header() {
    const session = sessions.get(this.id) ?? { id: this.id };
    const [state, label] = stateLabel(session);
    const running = session.running !== false && !['exited', 'crashed', 'parked'].includes(session.state);
    if (!this.head) this.buildHead();
    const h = this.head;
    h.icon.replaceChildren(stateIcon(state));
    if (!this.renaming) h.title.textContent = titleOf(session);
    // An interactive CLI in someone's terminal: messages are typed into it; its model, mode and
    // resume belong to that terminal.
    const terminal = session.config?.transport === 'terminal';
    // A session Switchboard did not start (its hooks brought it): followed, never typed into.
    const external = session.config?.transport === 'external';
    const origin = originOf(session);
    const started = origin ? ` · ${origin.title.replace(/^Started/, 'started')}` : '';
    const where = (terminal ? ' · in a terminal' : external ? ' · its own process, followed' : '') + started;
    h.cwd.textContent = `${homeRelative(session.cwd)}${where}`;
    // Several daemons on one database: the node first, where the path would cut it off.
    if (session.node) h.cwd.textContent = `on ${session.node} · ${h.cwd.textContent}`;
    h.cwd.title = session.cwd ?? '';
    // Its files, diff and terminal are on the machine that runs it.
    for (const tab of [h.tabs.review, h.tabs.files, h.tabs.shell]) tab.hidden = Boolean(session.elsewhere);
    h.tabs.review.title = session.config?.worktree
      ? 'The session\'s whole change in its worktree: comment, commit, merge'
      : 'What changed in the session\'s repository since its last commit (read-only)';
    h.badge.className = `badge state-${state}`;
    h.badge.dataset.state = session.state ?? '';
    h.badge.textContent = session.archived ? `${label} · archived` : label;
    h.cost.replaceChildren(money(session.cost_usd));
    if (document.activeElement !== h.model) {
      const current = session.model ?? '';
      const options = [...new Set([current, ...MODELS].filter(Boolean))];
      h.model.replaceChildren(...(current ? [] : [el('option', { value: '' }, 'default model')]),
        ...options.map((m) => el('option', { value: m }, m)), el('option', { value: '__other' }, 'Other…'));
      h.model.value = current;
    }
    if (document.activeElement !== h.mode) h.mode.value = session.permission_mode ?? 'default';
    h.model.hidden = terminal;
    h.mode.hidden = terminal;
    h.settingsItem.hidden = terminal;
    if (this.input) this.input.placeholder = terminal ? TERMINAL_PLACEHOLDER : PLACEHOLDER;
    // Stop ends a turn: shown only while one runs.
    h.interrupt.hidden = !running || !['working', 'awaiting_permission', 'compacting', 'starting'].includes(session.state);
    h.resume.hidden = running || terminal;
    // A running turn can be steered, or stopped with everything queued behind it.
    if (this.steer) this.steer.hidden = h.interrupt.hidden || terminal;
    h.stopAll.hidden = h.interrupt.hidden || terminal;
    // Asked of the running CLI.
    h.inForce.hidden = !running || terminal;
    h.fork.hidden = !session.claude_session_id;
    h.archive.textContent = session.archived ? 'Unarchive' : 'Archive';
    this.drawPaused(session);
  },

  buildHead() {
    const model = el('select', { class: 'model', 'aria-label': 'Model' });
    const other = el('input', { class: 'model-other', hidden: true, placeholder: 'model id, then Enter', 'aria-label': 'Model id', spellcheck: 'false' });
    model.addEventListener('change', () => {
      if (model.value === '__other') {
        other.hidden = false;
        other.focus();
        model.value = sessions.get(this.id)?.model ?? '';
        return;
      }
      this.control('model', { model: model.value });
    });
    other.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && other.value.trim()) { this.control('model', { model: other.value.trim() }); other.hidden = true; }
      if (event.key === 'Escape') { other.hidden = true; event.stopPropagation(); }
    });
    const mode = el('select', { class: 'mode', 'aria-label': 'Permission mode' },
      MODES.map(([value, words]) => el('option', { value, title: words }, value)));
    mode.addEventListener('change', () => this.control('permission-mode', { mode: mode.value }));
    const menu = el('details', { class: 'menu' });
    const item = (name, text, action) => el('button', { type: 'button', class: name, onclick: () => { menu.open = false; action(); } }, text);
    const tab = (name, label, iconName, open, hint) => el('button', {
      type: 'button', role: 'tab', class: `tab ${name}`, 'aria-selected': 'false', title: hint, onclick: open,
    }, icon(iconName), el('span', { class: 'label' }, label));
    const settings = el('div', { class: 'settings', role: 'group', 'aria-label': 'Model and mode' }, model, other, mode);
    this.head = {
      icon: el('span', { class: 'state' }), title: el('h1'), cwd: el('div', { class: 'muted cwd' }), badge: el('span', { class: 'badge' }),
      cost: el('button', { type: 'button', class: 'cost ghost', title: 'What this session has cost: the chart, the context and each model', onclick: () => this.toggleStats() }),
      model, other, mode, settings,
      interrupt: el('button', { type: 'button', class: 'interrupt', title: 'Stop the turn (Esc)', onclick: () => this.interrupt() }, icon('stop'), el('span', { class: 'label' }, 'Stop')),
      resume: el('button', { type: 'button', class: 'resume primary', onclick: () => this.resume() }, 'Resume'),
      settingsItem: item('settings-open', 'Model and mode', () => this.openSettings()),
      stopAll: item('stop-all', 'Stop, and drop what is queued', () => this.interrupt(true)),
      inForce: item('in-force-open', 'What is in force', () => this.showInForce()),
      fork: item('fork', 'Fork this conversation', () => this.fork()),
      archive: item('archive', 'Archive', () => this.amend({ archived: !sessions.get(this.id)?.archived })),
      menu,
      tabs: {
        chat: tab('chat-open', 'Chat', 'chat', () => this.closePanels(), 'The conversation'),
        review: tab('review-open', 'Review', 'diff', () => this.toggleReview(true), ''),
        files: tab('files-open needs-operate', 'Files', 'folder', () => this.toggleFiles(true), 'The session\'s directory, read-only: the files it touched are marked'),
        shell: tab('shell-open needs-admin', 'Terminal', 'terminal', () => this.toggleShell(true), 'A shell in the session\'s directory (ends with the session)'),
      },
    };
    const h = this.head;
    menu.append(el('summary', { 'aria-label': 'More actions', title: 'More actions' }, icon('more')),
      el('div', { class: 'menu-items' }, h.settingsItem, h.stopAll, h.inForce, item('rename', 'Rename', () => this.rename()), h.fork, h.archive));
    this.headerBox.replaceChildren(el('a', { href: '#/', class: 'back', 'aria-label': 'All sessions' }, '←'),
      h.icon, el('div', { class: 'session-title' }, h.title, h.cwd), h.badge, h.cost,
      el('div', { class: 'controls needs-operate' }, h.settings, h.interrupt, h.resume, h.menu));
    this.tabBar.replaceChildren(...Object.values(h.tabs));
    this.markTabs();
  },

  /// The tab that shows, marked; and the transcript's place given to a panel, or back.
  markTabs() {
    if (!this.head) return;
    const open = this.review ? 'review' : this.filesPanel ? 'files' : this.shellPanel ? 'shell' : this.statsOpen ? null : 'chat';
    for (const [name, tab] of Object.entries(this.head.tabs)) {
      tab.setAttribute('aria-selected', String(name === open));
      tab.classList.toggle('active', name === open);
    }
    this.root.classList.toggle('panel-open', open !== 'chat');
    // A request that waits is out of sight while a panel has the transcript's place.
    this.refreshWaiting();
  },

  /// Review, Files, the terminal and the stats take the transcript's place, one at a time:
  /// opening one closes the others, and Chat closes them all.
  closePanels() {
    if (this.review) this.toggleReview();
    if (this.filesPanel) this.toggleFiles();
    if (this.shellPanel) this.toggleShell();
    if (this.statsOpen) this.toggleStats();
    this.markTabs();
  },

  /// Puts a panel where the transcript was.
  placePanel(panel) {
    this.root.querySelector('.session-body').before(panel);
    this.markTabs();
  },

  /// The cost chart, the context gauge and the per-model table: beside the transcript on a
  /// wide screen; in its place, from a tap on the cost, where there is no room beside it.
  toggleStats() {
    const beside = this.stats.offsetParent !== null && !this.statsOpen;
    if (beside) { this.stats.scrollIntoView({ block: 'nearest' }); return; }
    if (this.statsOpen) {
      this.statsOpen = false;
      this.statsBox.remove();
      this.stats.classList.remove('open');
      this.root.querySelector('.session-body').append(this.stats);
      this.markTabs();
      return;
    }
    this.closePanels();
    this.statsOpen = true;
    this.statsBox = el('section', { class: 'stats-panel', 'aria-label': 'Cost and context' },
      el('div', { class: 'files-head' }, el('strong', {}, 'Cost and context'), el('span', { class: 'muted' }),
        el('button', { type: 'button', class: 'ghost close', onclick: () => this.toggleStats() }, 'Close')));
    this.stats.classList.add('open');
    this.statsBox.append(this.stats);
    this.placePanel(this.statsBox);
    this.loadUsage();
  },

  /// The model and mode, in a sheet (a phone's header has no room for them).
  openSettings() {
    const h = this.head;
    if (!phone()) { h.model.focus(); return; }
    const sheet = el('dialog', { class: 'sheet', 'aria-label': 'Model and mode' });
    const done = () => sheet.close();
    sheet.append(el('h2', {}, 'Model and mode'),
      el('label', {}, 'Model', h.model), h.other,
      el('label', {}, 'Permission mode', h.mode),
      el('p', { class: 'muted mode-words' }, MODES.find(([value]) => value === h.mode.value)?.[1] ?? ''),
      el('div', { class: 'sheet-actions' }, el('button', { type: 'button', class: 'primary', onclick: done }, 'Done')));
    sheet.addEventListener('close', () => { h.settings.append(h.model, h.other, h.mode); sheet.remove(); });
    sheet.addEventListener('click', (event) => { if (event.target === sheet) done(); });
    document.body.append(sheet);
    sheet.showModal();
  },

  rename() {
    const h = this.head;
    const session = sessions.get(this.id) ?? {};
    const input = el('input', { class: 'rename-input', value: titleOf(session), 'aria-label': 'Session name', maxlength: '200' });
    this.renaming = true;
    const done = async (save) => {
      if (!this.renaming) return;
      this.renaming = false;
      input.replaceWith(h.title);
      if (save && input.value.trim() && input.value.trim() !== titleOf(session)) await this.amend({ title: input.value.trim() });
      this.header();
    };
    input.addEventListener('keydown', (event) => {
      if (event.key === 'Enter') { event.preventDefault(); done(true); }
      if (event.key === 'Escape') { event.preventDefault(); event.stopPropagation(); done(false); }
    });
    input.addEventListener('blur', () => done(true));
    h.title.replaceWith(input);
    input.focus();
    input.select();
  },

  async amend(change) {
    try {
      const session = await api('PATCH', `/api/sessions/${this.id}`, change);
      sessions.set(this.id, { ...sessions.get(this.id), ...session });
      this.header();
      renderList();
      if ('archived' in change) toast(change.archived ? 'Archived: the list shows it under "Show archived".' : 'Back in the list.', 'info');
    } catch (error) { toast(error.message); }
  },

  async control(what, body) {
    try {
      await api('POST', `/api/sessions/${this.id}/${what}`, body);
      const session = sessions.get(this.id);
      if (session && what === 'model') session.model = body.model;
      if (session && what === 'permission-mode') session.permission_mode = body.mode;
      this.header();
      for (const words of $$('.sheet .mode-words')) words.textContent = MODES.find(([value]) => value === this.head.mode.value)?.[1] ?? '';
      toast(`${what === 'model' ? 'Model' : 'Permission mode'} set to ${body.model ?? body.mode}`, 'info');
    } catch (error) { toast(error.message); }
  },
};
