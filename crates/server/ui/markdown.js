// Markdown, sanitised and highlighted, whole or as it streams; a path's language.
//
// `StreamingMarkdown`: the text up to its last finished block (a blank line outside a code fence,
// or a closing fence) is rendered once and kept; only the open block after it is rendered again,
// at most once a frame and without highlighting. The `block` update then renders the whole text
// once. Markdown is always sanitised (DOMPurify) before it is drawn.
import { marked } from './vendor/marked.esm.js';
import DOMPurify from './vendor/purify.es.mjs';
import hljs from './vendor/highlight.min.js';
import { $, $$, copyButton, el } from './dom.js';

// Model output and tool inputs are untrusted. Besides scripts, markdown may not bring styles,
// forms or controls (which could restyle or stand in for the approval buttons), ids, or classes
// (which the page finds its own parts by): only a code block's `language-*` stays.
const SANITIZE = {
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'option', 'dialog', 'label', 'details', 'summary'],
  FORBID_ATTR: ['style', 'id', 'name', 'for', 'tabindex', 'contenteditable'],
};
DOMPurify.addHook('uponSanitizeAttribute', (node, data) => {
  if (data.attrName === 'class') {
    data.keepAttr = node.nodeName === 'CODE' && /^language-[\w+#.-]{1,40}$/.test(data.attrValue);
  }
});

/// Markdown, sanitised, with tables that scroll on their own and code blocks that name their
/// language and copy.
export function markdown(text, { highlightCode = true } = {}) {
  const html = DOMPurify.sanitize(marked.parse(text ?? '', { gfm: true, breaks: false }), SANITIZE);
  const box = el('div', { class: 'md' });
  box.innerHTML = html;
  for (const table of $$('table', box)) {
    const wrap = el('div', { class: 'table-wrap' });
    table.replaceWith(wrap);
    wrap.append(table);
  }
  for (const pre of $$('pre', box)) {
    const code = $('code', pre);
    const language = code?.className.match(/language-([\w+#.-]+)/)?.[1];
    if (code && highlightCode) highlight(code, language);
    const block = el('div', { class: 'code-block' }, el('div', { class: 'code-head' },
      el('span', { class: 'code-lang' }, language ?? 'text'), copyButton(() => (code ?? pre).textContent)));
    pre.replaceWith(block);
    block.append(pre);
  }
  return box;
}

function highlight(code, language) {
  try {
    if (language && hljs.getLanguage(language)) {
      code.innerHTML = hljs.highlight(code.textContent, { language }).value;
      code.classList.add('hljs');
    } else if (!language) {
      hljs.highlightElement(code);
    }
  } catch (_) { /* plain text is fine */ }
}

export function codeBlock(text, language) {
  const code = el('code', {}, text ?? '');
  const pre = el('pre', { class: 'code' }, code);
  if (language) highlight(code, language);
  return pre;
}

/// Markdown as it streams: the text up to its last finished block (a blank line outside a code
/// fence, or a closing fence) is rendered once and kept; only the open block after it is drawn
/// again, at most once a frame. The whole message is rendered once more when its block ends.
export class StreamingMarkdown {
  constructor(className) {
    this.node = el('div', { class: className });
    this.settledBox = el('div', { class: 'md settled' });
    this.tailBox = el('div', { class: 'md tail' });
    this.node.append(this.settledBox, this.tailBox);
    this.text = '';
    this.settled = 0; // text before this is rendered for good
    this.scanned = 0; // lines before this are scanned
    this.fence = null; // the open fence (``` or ~~~), if any
    this.blank = null; // where the text after a blank line starts, until the next line says
    this.frame = null;
    this.onDraw = () => {};
  }

  append(more) {
    this.text += more;
    let boundary = this.settled;
    for (let end = this.text.indexOf('\n', this.scanned); end >= 0; end = this.text.indexOf('\n', this.scanned)) {
      const start = this.scanned;
      const line = this.text.slice(start, end);
      this.scanned = end + 1;
      if (!this.fence && !line.trim()) {
        this.blank ??= this.scanned;
        continue;
      }
      // A blank line ends a block only if what follows starts a new one at the margin: an
      // indented line or a list item may still belong to the block before (a list, a fence
      // inside a list item).
      if (this.blank !== null && !this.fence) {
        if (/^\S/.test(line) && !/^([-*+]|\d{1,9}[.)])(\s|$)/.test(line)) boundary = start;
        this.blank = null;
      }
      const fence = line.match(/^ {0,3}(`{3,}|~{3,})(.*)$/);
      if (fence && !this.fence && !(fence[1][0] === '`' && fence[2].includes('`'))) {
        this.fence = fence[1];
      } else if (fence && this.fence && fence[1][0] === this.fence[0] && fence[1].length >= this.fence.length && !fence[2].trim()) {
        this.fence = null;
        if (/^`|^~/.test(line)) boundary = this.scanned;
      }
    }
    // The line being written may already say whether the block before the blank line ended.
    const rest = this.text.slice(this.scanned);
    if (this.blank !== null && !this.fence && rest) {
      const list = /^([-*+]|\d{1,9}[.)])(\s|$)/.test(rest) || /^\d{1,9}$/.test(rest);
      if (/^\s/.test(rest) || list) {
        if (/^\s|\s/.test(rest)) this.blank = null; // decided: it continues the block before
      } else {
        boundary = this.scanned;
        this.blank = null;
      }
    }
    if (boundary > this.settled) {
      this.settledBox.append(...markdown(this.text.slice(this.settled, boundary)).childNodes);
      this.settled = boundary;
    }
    if (this.frame === null) this.frame = requestAnimationFrame(() => this.drawTail());
  }

  drawTail() {
    this.frame = null;
    // The open block is drawn without highlighting: it changes every frame.
    this.tailBox.replaceChildren(...markdown(this.text.slice(this.settled), { highlightCode: false }).childNodes);
    this.onDraw();
  }
}

const EXTENSIONS = { rs: 'rust', js: 'javascript', mjs: 'javascript', ts: 'typescript', py: 'python',
  sh: 'bash', md: 'markdown', json: 'json', toml: 'ini', yml: 'yaml', yaml: 'yaml', html: 'xml',
  css: 'css', go: 'go', java: 'java', c: 'c', h: 'c', cpp: 'cpp', rb: 'ruby', sql: 'sql' };
export const languageOf = (path) => EXTENSIONS[(path ?? '').split('.').pop()?.toLowerCase()];
