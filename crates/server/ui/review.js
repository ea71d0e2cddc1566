// The Review view, a part of the session view: the session's change, file by file. A worktree
// session's is its whole change against the commit it started from: a line's comment goes to
// Claude as a message; commit, merge into the branch it started from, push, or discard. Any
// other session's is its repository against HEAD, read-only (a line's comment still goes to
// Claude). A line also says who wrote it (blame). `reviewAt` opens it at a file (an Edit card's
// counts).
import { el, icon } from './dom.js';
import { api, can, toast } from './api.js';
import { sessions } from './list.js';
import { homeRelative, plural, relative } from './words.js';

export const reviewMethods = {
  async toggleReview(openOnly = false) {
    if (this.review && openOnly) return;
    if (this.review) {
      this.review.remove();
      this.review = null;
      this.markTabs();
      return;
    }
    this.closePanels();
    this.review = el('section', { class: 'review', 'aria-label': 'Review' });
    this.placePanel(this.review);
    await this.drawReview();
  },

  /// Review, at the file `path` (absolute): opened and in sight.
  async reviewAt(path) {
    await this.toggleReview(true);
    // The diff's paths are from the work tree's top as git names it (links resolved); the
    // card's is as the session named it: the file whose path ends the card's, longest first.
    const inside = relative(path, this.reviewPath);
    const files = [...(this.review?.querySelectorAll('.review-file') ?? [])];
    const file = files.find((node) => node.dataset.path === inside)
      ?? files.filter((node) => path.endsWith(`/${node.dataset.path}`)).sort((a, b) => b.dataset.path.length - a.dataset.path.length)[0];
    if (!file) { toast(`${homeRelative(path)} has no change to review now.`, 'info'); return; }
    file.open = true;
    file.scrollIntoView({ block: 'start' });
    file.querySelector('summary')?.focus({ preventScroll: true });
  },

  async drawReview() {
    const box = this.review;
    if (!box) return;
    let diff;
    try {
      diff = await api('GET', `/api/sessions/${this.id}/diff`);
    } catch (error) {
      box.replaceChildren(el('div', { class: 'review-head' }, el('p', { class: 'muted' }, `No review: ${error.message}`),
        el('button', { type: 'button', class: 'ghost close', onclick: () => this.toggleReview() }, 'Close')));
      return;
    }
    if (box !== this.review) return;
    this.reviewPath = diff.path;
    const close = el('button', { type: 'button', class: 'ghost close', onclick: () => this.toggleReview() }, 'Close');
    const count = el('strong', {}, `${plural(diff.files.length, 'file')} changed`);
    let head;
    if (diff.kind === 'directory') {
      head = el('div', { class: 'review-head' }, count,
        el('span', { class: 'muted' }, ` in ${homeRelative(diff.path)}${diff.branch ? ` on ${diff.branch}` : ''}, since ${diff.base.slice(0, 8)}`),
        el('div', { class: 'review-actions' }, close),
        el('p', { class: 'muted read-only' }, 'Read-only: what is not committed in the session\'s repository, whoever changed it. Start a session with a worktree to commit and merge from here.'));
    } else {
      head = this.worktreeHead(diff, count, close);
    }
    const files = diff.files.map((file) => this.reviewFile(file));
    box.replaceChildren(head, ...(files.length ? files : [el('p', { class: 'muted' }, 'No change yet.')]));
  },

  worktreeHead(diff, count, close) {
    const session = sessions.get(this.id) ?? {};
    const message = el('input', { class: 'commit-message', value: session.title ?? '', 'aria-label': 'Commit message' });
    const act = (label, run, cls = '') => el('button', { type: 'button', class: `needs-operate ${cls}`, onclick: async (event) => {
      event.currentTarget.disabled = true;
      try { await run(); } catch (error) { toast(error.message); } finally { await this.drawReview(); }
    } }, label);
    const into = diff.base_branch ?? 'its base';
    return el('div', { class: 'review-head' }, count,
      el('span', { class: 'muted' }, ` on ${diff.branch}, from ${diff.base.slice(0, 8)} (${into})`),
      el('div', { class: 'review-actions needs-operate' },
        message,
        act('Commit', async () => { const made = await api('POST', `/api/sessions/${this.id}/commit`, { message: message.value }); toast(`Committed ${made.commit.slice(0, 8)}.`, 'ok'); }, 'primary commit'),
        act(`Merge into ${into}`, async () => { const merged = await api('POST', `/api/sessions/${this.id}/merge`, { mode: 'merge' }); toast(`Merged into ${merged.into} (${merged.commit.slice(0, 8)}).`, 'ok'); }, 'merge'),
        act('Push', async () => {
          const pushed = await api('POST', `/api/sessions/${this.id}/push`, {});
          toast(`Pushed ${pushed.branch} to ${pushed.remote}.`, 'ok');
          // On a known forge: the page that opens the pull request (nothing is sent there).
          this.pullRequestUrl = /^https:\/\//.test(pushed.pull_request_url ?? '') ? pushed.pull_request_url : null;
        }, 'push'),
        this.pullRequestUrl ? el('a', { class: 'button pull-request', href: this.pullRequestUrl, target: '_blank', rel: 'noopener noreferrer' }, 'Open a pull request') : '',
        act('Fast-forward', async () => { const merged = await api('POST', `/api/sessions/${this.id}/merge`, { mode: 'fast_forward' }); toast(`${merged.into} is at ${merged.commit.slice(0, 8)}.`, 'ok'); }, 'fast-forward'),
        // Apart from the rest, in the danger's colour: it throws the session's work away.
        act('Discard…', async () => {
          if (!confirm('Discard every change of this session (back to the commit it started from)?')) return;
          await api('POST', `/api/sessions/${this.id}/discard`);
        }, 'danger discard')),
      close);
  },

  reviewFile(file) {
    const summary = el('summary', {},
      el('span', { class: `badge file-${file.status}` }, file.status),
      icon('file'), el('code', { class: 'path' }, file.old_path ? `${file.old_path} → ${file.path}` : file.path),
      el('span', { class: 'counts' }, el('span', { class: 'plus' }, `+${file.added}`), ' ', el('span', { class: 'minus' }, `−${file.removed}`)));
    const body = el('div', { class: 'review-lines' });
    if (file.withheld) body.append(el('p', { class: 'muted withheld' }, 'Not shown: no view of Switchboard shows this file (the daemon\'s own data, or what the session\'s policy denies to Read).'));
    else if (file.binary) body.append(el('p', { class: 'muted' }, 'A binary file.'));
    else if (file.too_large || !file.patch) body.append(el('p', { class: 'muted' }, 'Too large to show.'));
    else {
      // The new file's line numbers, from each hunk's header.
      let line = 0;
      let inHunk = false;
      for (const text of file.patch.split('\n')) {
        const hunk = text.match(/^@@ -\d+(?:,\d+)? \+(\d+)/);
        if (hunk) { line = Number(hunk[1]); inHunk = true; body.append(el('div', { class: 'hunk' }, text)); continue; }
        if (!inHunk || text === '' || text.startsWith('\\')) continue;
        const kind = text[0] === '+' ? 'add' : text[0] === '-' ? 'del' : 'ctx';
        const number = kind === 'del' ? null : line;
        if (kind !== 'del') line += 1;
        const row = el('div', { class: `line ${kind}` }, el('span', { class: 'no' }, number ?? ''), el('code', {}, text));
        if (number !== null) {
          row.classList.add('commentable');
          row.title = can('operate') ? 'Comment on this line (it goes to Claude), or see who wrote it' : 'See who wrote this line';
          row.addEventListener('click', () => this.commentOn(row, file.path, number, text.slice(1)));
        }
        body.append(row);
      }
    }
    return el('details', { class: 'review-file', open: true, dataset: { path: file.path } }, summary, body);
  },

  /// A line's actions: who wrote it (blame: the session, turn and call, `GET /api/blame`),
  /// and, to an operate token, a comment that goes to Claude.
  commentOn(row, path, line, text) {
    if (row.nextElementSibling?.classList.contains('line-comment')) return;
    const answer = el('div', { class: 'blame', hidden: true });
    const blame = el('button', { type: 'button', class: 'ghost blame-ask', onclick: async () => {
      blame.disabled = true;
      const query = new URLSearchParams({ path: `${this.reviewPath}/${path}`, line: text, tail: path });
      try {
        const { found } = await api('GET', `/api/blame?${query}`);
        answer.replaceChildren(...(found
          ? ['Written by ', el('a', { href: `#/s/${found.call.session_id}?at=${found.call.seq}` }, found.title ?? found.call.session_id.slice(0, 8)),
            ` with ${found.call.tool} (event ${found.call.seq}, ${new Date(found.call.ts_ms).toLocaleString()})`,
            found.prompt ? el('span', { class: 'muted' }, ` in the turn of “${found.prompt.text.slice(0, 120)}”`) : '']
          : [el('span', { class: 'muted' }, 'No session wrote this line (a person, or a program a session ran, may have).')]));
        answer.hidden = false;
      } catch (error) { toast(error.message); blame.disabled = false; }
    } }, icon('search'), 'Who wrote this?');
    const form = el('div', { class: 'line-comment' });
    if (can('operate')) {
      const input = el('textarea', { rows: 2, placeholder: `A note on ${path}:${line} for Claude`, 'aria-label': 'Comment' });
      form.append(input,
        el('button', { type: 'button', class: 'primary', onclick: async () => {
          const note = input.value.trim();
          if (!note) return;
          try {
            await api('POST', `/api/sessions/${this.id}/messages`, { content: `${path}:${line}: ${note}` });
            form.replaceWith(el('div', { class: 'line-comment sent' }, `Sent to Claude: ${path}:${line}: ${note}`));
          } catch (error) { toast(error.message); }
        } }, 'Send to Claude'));
      setTimeout(() => input.focus());
    }
    form.append(blame, el('button', { type: 'button', class: 'ghost', onclick: () => form.remove() }, 'Cancel'), answer);
    row.after(form);
  },
};
