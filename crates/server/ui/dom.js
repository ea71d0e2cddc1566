// DOM helpers every part uses: making elements, icons, copy buttons.

export const $ = (selector, root = document) => root.querySelector(selector);
export const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];

// ---------------------------------------------------------------------------------------------
// Small helpers

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Icons: 24×24 strokes, drawn in the current colour.
const ICONS = {
  terminal: 'M4 17l6-5-6-5M12 19h8',
  file: 'M14 3H6a2 2 0 0 0-2 2v14a2 2 0 0 0 2 2h12a2 2 0 0 0 2-2V9zM14 3v6h6',
  pencil: 'M12 20h9M16.5 3.5a2.1 2.1 0 0 1 3 3L7 19l-4 1 1-4z',
  search: 'M11 4a7 7 0 1 0 0 14a7 7 0 1 0 0-14M21 21l-4.3-4.3',
  globe: 'M12 3a9 9 0 1 0 0 18a9 9 0 1 0 0-18M3 12h18M12 3c2.5 2.5 2.5 15.5 0 18M12 3c-2.5 2.5-2.5 15.5 0 18',
  agent: 'M5 8h14v11H5zM12 4v4M9 13h.01M15 13h.01M9.5 16.5h5',
  question: 'M12 3a9 9 0 1 0 0 18a9 9 0 1 0 0-18M9.1 9a3 3 0 0 1 5.8 1c0 2-3 2.5-3 4M12 17.5h.01',
  plug: 'M9 2v6M15 2v6M6 8h12v3a6 6 0 0 1-12 0zM12 17v5',
  list: 'M9 6h11M9 12h11M9 18h11M4 6h.01M4 12h.01M4 18h.01',
  tool: 'M12 8a4 4 0 1 0 0 8a4 4 0 1 0 0-8M12 2v3M12 19v3M2 12h3M19 12h3M5 5l2 2M17 17l2 2M5 19l2-2M17 7l2-2',
  chevron: 'M9 6l6 6-6 6',
  check: 'M5 12.5l4.5 4.5L19 7.5',
  x: 'M6 6l12 12M18 6L6 18',
  copy: 'M9 9h11v11H9zM5 15H4V4h11v1',
  bell: 'M6 16v-5a6 6 0 0 1 12 0v5l2 2H4zM10 21a2 2 0 0 0 4 0',
  bellOff: 'M6 16v-5a6 6 0 0 1 1-3.3M9.5 5.6A6 6 0 0 1 18 11v4M20 18H4l2-2M10 21a2 2 0 0 0 4 0M3 3l18 18',
  chat: 'M4 5h16v11H9l-5 4z',
  branch: 'M6 3v12M18 9a3 3 0 1 0 0-6a3 3 0 1 0 0 6M6 21a3 3 0 1 0 0-6a3 3 0 1 0 0 6M18 9a9 9 0 0 1-9 9',
  diff: 'M12 4v7M8.5 7.5h7M8.5 17h7M5 3h14v18H5z',
  folder: 'M3 6.5V19h18V8.5h-9l-2-2z',
  spinner: 'M12 3a9 9 0 1 0 9 9',
  stop: 'M7 7h10v10H7z',
  more: 'M5 12h.01M12 12h.01M19 12h.01',
  plan: 'M9 4h6M8 4H6v17h12V4h-2M9 11h6M9 15h4',
};

export function icon(name, extra = '') {
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('class', `icon ${extra}`.trim());
  svg.setAttribute('aria-hidden', 'true');
  svg.setAttribute('fill', 'none');
  svg.setAttribute('stroke', 'currentColor');
  svg.setAttribute('stroke-width', name === 'more' ? '3' : '2');
  svg.setAttribute('stroke-linecap', 'round');
  svg.setAttribute('stroke-linejoin', 'round');
  const path = document.createElementNS('http://www.w3.org/2000/svg', 'path');
  path.setAttribute('d', ICONS[name] ?? ICONS.tool);
  svg.append(path);
  return svg;
}

/// A state's icon: a spinner while working, a bell while waiting, a dot at rest.
export function stateIcon(state) {
  if (['working', 'starting', 'compacting'].includes(state)) return icon('spinner', `state-icon state-${state}`);
  if (state === 'waiting') return icon('bell', 'state-icon state-waiting');
  if (state === 'crashed' || state === 'lost') return icon('x', `state-icon state-${state}`);
  if (state === 'exited') return icon('stop', 'state-icon state-exited');
  const dot = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  dot.setAttribute('viewBox', '0 0 24 24');
  dot.setAttribute('class', `icon state-icon state-${state}`);
  dot.setAttribute('aria-hidden', 'true');
  const circle = document.createElementNS('http://www.w3.org/2000/svg', 'circle');
  Object.entries({ cx: 12, cy: 12, r: 6, fill: 'currentColor' }).forEach(([k, v]) => circle.setAttribute(k, v));
  dot.append(circle);
  return dot;
}

const TOOL_ICONS = { Bash: 'terminal', BashOutput: 'terminal', KillShell: 'terminal', Read: 'file', Write: 'pencil',
  Edit: 'pencil', MultiEdit: 'pencil', NotebookEdit: 'pencil', Grep: 'search', Glob: 'search', WebFetch: 'globe',
  WebSearch: 'globe', Task: 'agent', Agent: 'agent', AskUserQuestion: 'question', TodoWrite: 'list', ExitPlanMode: 'plan' };
export const toolIcon = (name) => icon(name?.startsWith('mcp__') ? 'plug' : TOOL_ICONS[name] ?? 'tool', 'tool-icon');

/// Copies text; the button says so for a moment.
async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (_) {
    // Without the async clipboard (an insecure origin): the old way.
    const area = el('textarea', { style: 'position:fixed;top:0;left:0;opacity:0' }, text);
    document.body.append(area);
    area.select();
    document.execCommand('copy');
    area.remove();
  }
  if (button) {
    const label = button.dataset.label ?? button.textContent;
    button.dataset.label = label;
    button.lastChild.textContent = 'Copied';
    setTimeout(() => { button.lastChild.textContent = label; }, 1500);
  }
}

export function copyButton(text, label = 'Copy', className = 'copy') {
  const button = el('button', { type: 'button', class: className, title: label }, icon('copy'), el('span', {}, label));
  button.dataset.label = label;
  button.addEventListener('click', (event) => { event.stopPropagation(); copyText(typeof text === 'function' ? text() : text, button); });
  return button;
}
