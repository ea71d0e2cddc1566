// The Review view, a part of the session view: the session's whole change in its worktree,
// file by file; a line's comment goes to Claude as a message; commit, merge into the branch it
// started from, or discard.
import { el } from './dom.js';
import { api, can, toast } from './api.js';
import { sessions } from './list.js';

export const reviewMethods = {
  async toggleReview() {
    if (this.review) {
      this.review.remove();
      this.review = null;
      return;
    }
    this.closePanels();
    this.review = el('section', { class: 'review', 'aria-label': 'Review' });
    this.root.querySelector('.session-body').before(this.review);
    await this.drawReview();
  },

  async drawReview() {
    const box = this.review;
    if (!box) return;
    let diff;
    try {
      diff = await api('GET', `/api/sessions/${this.id}/diff`);
    } catch (error) {
      box.replaceChildren(el('p', { class: 'muted' }, `No review: ${error.message}`));
      return;
    }
    const session = sessions.get(this.id) ?? {};
    const message = el('input', { class: 'commit-message', value: session.title ?? '', 'aria-label': 'Commit message' });
    const act = (label, run, cls = '') => el('button', { type: 'button', class: `needs-operate ${cls}`, onclick: async (event) => {
      event.currentTarget.disabled = true;
      try { await run(); } catch (error) { toast(error.message); } finally { await this.drawReview(); }
    } }, label);
    const into = diff.base_branch ?? 'its base';
    const head = el('div', { class: 'review-head' },
      el('strong', {}, `${diff.files.length} file${diff.files.length === 1 ? '' : 's'} changed`),
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
        act('Discard', async () => {
          if (!confirm('Discard every change of this session (back to the commit it started from)?')) return;
          await api('POST', `/api/sessions/${this.id}/discard`);
        }, 'discard'),
        el('button', { type: 'button', class: 'ghost close', onclick: () => this.toggleReview() }, 'Close')));
    const files = diff.files.map((file) => this.reviewFile(file));
    box.replaceChildren(head, ...(files.length ? files : [el('p', { class: 'muted' }, 'No change yet.')]));
  },

  reviewFile(file) {
    const summary = el('summary', {},
      el('span', { class: `badge file-${file.status}` }, file.status),
      el('code', { class: 'path' }, file.old_path ? `${file.old_path} → ${file.path}` : file.path),
      el('span', { class: 'counts' }, el('span', { class: 'plus' }, `+${file.added}`), ' ', el('span', { class: 'minus' }, `−${file.removed}`)));
    const body = el('div', { class: 'review-lines' });
    if (file.binary) body.append(el('p', { class: 'muted' }, 'A binary file.'));
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
          row.title = 'Comment on this line: it goes to Claude';
          row.addEventListener('click', () => this.commentOn(row, file.path, number));
        }
        body.append(row);
      }
    }
    return el('details', { class: 'review-file', open: true }, summary, body);
  },

  commentOn(row, path, line) {
    if (row.nextElementSibling?.classList.contains('line-comment') || !can('operate')) return;
    const input = el('textarea', { rows: 2, placeholder: `A note on ${path}:${line} for Claude`, 'aria-label': 'Comment' });
    const form = el('div', { class: 'line-comment' }, input,
      el('button', { type: 'button', class: 'primary', onclick: async () => {
        const text = input.value.trim();
        if (!text) return;
        try {
          await api('POST', `/api/sessions/${this.id}/messages`, { content: `${path}:${line}: ${text}` });
          form.replaceWith(el('div', { class: 'line-comment sent' }, `Sent to Claude: ${path}:${line}: ${text}`));
        } catch (error) { toast(error.message); }
      } }, 'Send to Claude'),
      el('button', { type: 'button', class: 'ghost', onclick: () => form.remove() }, 'Cancel'));
    row.after(form);
    input.focus();
  },
};
