// Files and the terminal, parts of the session view: the session's directory as a tree with
// the file picked, and a shell in a PTY on the daemon drawn by xterm.js.
import { el, icon } from './dom.js';
import { codeBlock, languageOf } from './markdown.js';
import { api, socketUrl, toast } from './api.js';
import { sessions } from './list.js';
import { bytes } from './transcript.js';
import { homeRelative, relative } from './words.js';

export const filesMethods = {
  /// The terminal: a shell in the session's directory, in a PTY on the daemon, drawn by
  /// xterm.js (loaded when first opened). Keys go to it as they are typed; it follows the
  /// panel's size; it ends with the session (the daemon ends it) or when closed here.
  async toggleShell(openOnly = false) {
    if (this.shellPanel && openOnly) return;
    if (this.shellPanel) {
      this.shellPanel.socket?.close();
      this.shellPanel.terminal?.dispose();
      this.shellPanel.observer?.disconnect();
      this.shellPanel.box.remove();
      this.shellPanel = null;
      this.markTabs();
      return;
    }
    this.closePanels();
    const screen = el('div', { class: 'shell-screen' });
    const status = el('span', { class: 'muted shell-status' }, 'starting…');
    const box = el('section', { class: 'shell-panel', 'aria-label': 'Terminal' },
      el('div', { class: 'files-head' }, el('strong', {}, 'Terminal'), status,
        el('button', { type: 'button', class: 'ghost close', onclick: () => this.toggleShell() }, 'Close')),
      screen);
    const panel = { box };
    this.shellPanel = panel;
    this.placePanel(box);
    const [{ Terminal }, { FitAddon }] = await Promise.all([import('./vendor/xterm.mjs'), import('./vendor/addon-fit.mjs')]);
    if (this.shellPanel !== panel) return;
    const dark = matchMedia('(prefers-color-scheme: dark)').matches;
    const terminal = new Terminal({ cursorBlink: true, fontSize: 13, scrollback: 5000, convertEol: false,
      theme: dark ? { background: '#0b1020' } : { background: '#ffffff', foreground: '#1f2430', cursor: '#1f2430', selectionBackground: '#c8d3f5' } });
    const fit = new FitAddon();
    terminal.loadAddon(fit);
    terminal.open(screen);
    panel.terminal = terminal;
    const socket = new WebSocket(socketUrl(`/api/sessions/${this.id}/shell`));
    socket.binaryType = 'arraybuffer';
    panel.socket = socket;
    const encoder = new TextEncoder();
    const resize = () => {
      try { fit.fit(); } catch { return; }
      if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: 'resize', cols: terminal.cols, rows: terminal.rows }));
    };
    socket.onopen = () => { resize(); terminal.focus(); };
    socket.onmessage = (event) => {
      if (typeof event.data !== 'string') { terminal.write(new Uint8Array(event.data)); return; }
      const frame = JSON.parse(event.data);
      if (frame.type === 'started') status.textContent = `${frame.shell} in ${frame.cwd}`;
      else if (frame.type === 'exit') { status.textContent = `ended: ${frame.reason}`; box.classList.add('ended'); }
      else if (frame.type === 'error') toast(frame.error);
    };
    socket.onclose = (event) => {
      if (!box.classList.contains('ended')) status.textContent = event.code === 1006 ? 'could not connect (the session must be running, and this needs an admin token)' : 'closed';
      box.classList.add('ended');
    };
    terminal.onData((data) => { if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data)); });
    panel.observer = new ResizeObserver(() => resize());
    panel.observer.observe(screen);
  },

  /// The Files view: the session's directory as a tree (folders open on a click), and the
  /// file picked, highlighted, with line numbers; what the session's tools changed is marked.
  /// Read-only. `openFile` opens it at a file and line (a card's path, `path:line` in an
  /// answer).
  async toggleFiles(openOnly = false) {
    if (this.filesPanel && openOnly) return;
    if (this.filesPanel) {
      this.filesPanel.box.remove();
      this.filesPanel = null;
      this.markTabs();
      return;
    }
    this.closePanels();
    const tree = el('ul', { class: 'file-tree', role: 'tree', 'aria-label': 'Files' });
    const shown = el('div', { class: 'file-view', 'aria-live': 'polite' }, el('p', { class: 'muted' }, 'Pick a file. Files the session changed are marked ●.'));
    const box = el('section', { class: 'files-panel', 'aria-label': 'Files' },
      el('div', { class: 'files-head' }, el('strong', {}, 'Files'), el('span', { class: 'muted' }, homeRelative(sessions.get(this.id)?.cwd ?? '')),
        el('button', { type: 'button', class: 'ghost close', onclick: () => this.toggleFiles() }, 'Close')),
      el('div', { class: 'files-body' }, tree, shown));
    const panel = { box, shown };
    this.filesPanel = panel;
    this.placePanel(box);
    const open = async (path, into) => {
      try {
        const listing = await api('GET', `/api/sessions/${this.id}/files?path=${encodeURIComponent(path)}`);
        into.replaceChildren(...listing.entries.map((entry) => {
          const mark = entry.touched ? el('span', { class: 'touched', title: 'Changed by the session' }, '●') : '';
          if (entry.kind === 'dir') {
            const children = el('ul', { role: 'group', hidden: true });
            const row = el('button', { type: 'button', class: 'tree-dir', 'aria-expanded': 'false', onclick: async () => {
              const opening = children.hidden;
              children.hidden = !opening;
              row.setAttribute('aria-expanded', String(opening));
              if (opening && !children.childElementCount) await open(entry.path, children);
            } }, icon('folder'), `${entry.name}/`, mark);
            return el('li', { role: 'treeitem' }, row, children);
          }
          return el('li', { role: 'treeitem' }, el('button', { type: 'button', class: `tree-file${entry.touched ? ' is-touched' : ''}`, onclick: () => this.showFile(entry.path) },
            entry.name, mark, entry.size != null ? el('span', { class: 'muted size' }, bytes(entry.size)) : ''));
        }));
        if (listing.truncated) into.append(el('li', { class: 'muted' }, 'and more (not listed)'));
      } catch (error) { into.replaceChildren(el('li', { class: 'muted' }, error.message)); }
    };
    await open('', tree);
  },

  /// Files, at `path` (absolute, or relative to the session's directory), its line `line`
  /// marked and in sight.
  async openFile(path, line) {
    const cwd = this.transcript.cwd ?? sessions.get(this.id)?.cwd;
    const inside = relative(path, cwd).replace(/^(\.\/)+/, '');
    if (inside.startsWith('/')) { toast(`${homeRelative(path)} is outside the session's directory: Files shows only what is in it.`); return; }
    await this.toggleFiles(true);
    await this.showFile(inside, line);
  },

  async showFile(path, line) {
    const panel = this.filesPanel;
    if (!panel) return;
    const { shown } = panel;
    try {
      const file = await api('GET', `/api/sessions/${this.id}/file?path=${encodeURIComponent(path)}`);
      const head = el('div', { class: 'file-view-head' }, el('code', {}, file.path), file.touched ? el('span', { class: 'touched' }, '● changed by the session') : '',
        el('span', { class: 'muted' }, bytes(file.size)));
      const body = file.binary ? el('p', { class: 'muted' }, 'A binary file: not shown.') : numbered(file.text ?? '', languageOf(file.path), line);
      shown.replaceChildren(head, body, file.truncated ? el('p', { class: 'muted' }, `Only the first ${bytes(file.text?.length ?? 0)} are shown.`) : '');
      const marked = shown.querySelector('.line-no.marked');
      if (marked) marked.scrollIntoView({ block: 'center' });
    } catch (error) { shown.replaceChildren(el('p', { class: 'muted' }, `${path}: ${error.message}`)); }
  },
};

/// A file's text, highlighted, with its line numbers beside it; line `mark` marked.
function numbered(text, language, wanted) {
  const mark = Number(wanted);
  const lines = text.replace(/\n$/, '').split('\n');
  const gutter = el('div', { class: 'gutter', 'aria-hidden': 'true' },
    lines.map((_, index) => el('span', { class: `line-no${index + 1 === mark ? ' marked' : ''}`, dataset: { line: index + 1 } }, String(index + 1))));
  const code = codeBlock(text, language);
  const box = el('div', { class: 'numbered' }, gutter, code);
  if (mark > 0 && mark <= lines.length) {
    // A band across the code at the marked line (the highlighter's spans cross lines, so the
    // band is drawn over them, not inside).
    box.append(el('div', { class: 'line-band', style: `--line: ${mark - 1}` }));
  }
  return box;
}
