// The composer, a part of the session view: the message box, its images, and the slash-command
// picker.
import { $, el } from './dom.js';
import { api, toast } from './api.js';
import { sessions } from './list.js';
import { base64Of, IMAGE_TYPES, imageProblem } from './transcript.js';

// The composer's hint: a message to an interactive CLI is typed into its terminal.
export const PLACEHOLDER = 'Message Claude (Ctrl+Enter sends; Ctrl+Shift+Enter steers a running turn)';
export const TERMINAL_PLACEHOLDER = 'Message Claude (typed into its terminal; Ctrl+Enter sends)';

export const composerMethods = {
  makeComposer() {
    const input = el('textarea', { class: 'composer-input', rows: 2, placeholder: PLACEHOLDER, 'aria-label': 'Message' });
    // Images to send with the next message: pasted, dropped or picked; checked here as the
    // daemon checks them again (type from the bytes, size, count), so a mistake shows at once.
    let pictures = [];
    const strip = el('div', { class: 'attachments', hidden: true, 'aria-label': 'Images to send' });
    const drawStrip = () => {
      strip.replaceChildren(...pictures.map((picture, index) => el('figure', { class: 'attachment' },
        el('img', { src: `data:${picture.media_type};base64,${picture.data}`, alt: picture.name }),
        el('button', { type: 'button', class: 'remove', title: `Remove ${picture.name}`, 'aria-label': `Remove ${picture.name}`, onclick: () => { pictures.splice(index, 1); drawStrip(); } }, '×'))));
      strip.hidden = !pictures.length;
    };
    const add = async (files) => {
      for (const file of files) {
        const problem = await imageProblem(file, pictures.length);
        if (problem) { toast(problem); continue; }
        pictures.push({ name: file.name || 'pasted image', media_type: file.type, data: await base64Of(file) });
      }
      drawStrip();
    };
    const picker = el('input', { type: 'file', accept: IMAGE_TYPES.join(','), multiple: true, hidden: true, 'aria-label': 'Attach images', onchange: () => { add([...picker.files]); picker.value = ''; } });
    // `priority`: `now` steers (the running turn stops, this message runs next); none lets
    // Claude Code take it into the running turn between tool calls.
    const send = async (priority) => {
      const text = input.value.trim();
      if (!text && !pictures.length) return;
      const sending = pictures;
      const content = sending.length
        ? [...(text ? [{ type: 'text', text }] : []), ...sending.map((picture) => ({ type: 'image', source: { type: 'base64', media_type: picture.media_type, data: picture.data } }))]
        : text;
      input.value = '';
      pictures = [];
      drawStrip();
      try { await api('POST', `/api/sessions/${this.id}/messages`, priority ? { content, priority } : { content }); } catch (error) {
        input.value = text;
        pictures = sending;
        drawStrip();
        toast(error.message);
      }
    };
    const picker_ = this.commandPicker(input);
    input.addEventListener('keydown', (event) => {
      if (picker_.key(event)) return;
      if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        send(event.shiftKey && !this.steer.hidden ? 'now' : undefined);
      }
    });
    input.addEventListener('paste', (event) => {
      const files = [...(event.clipboardData?.files ?? [])];
      if (files.length) { event.preventDefault(); add(files); }
    });
    this.input = input;
    // Shown while a turn runs (the head says when): stop it and run this message instead.
    this.steer = el('button', { type: 'button', class: 'steer', hidden: true, title: 'Stop the running turn and run this message now (Ctrl+Shift+Enter)', onclick: () => send('now') }, 'Steer');
    const form = el('form', { class: 'composer needs-operate', onsubmit: (event) => { event.preventDefault(); send(); } },
      el('div', { class: 'composer-main' }, picker_.list, strip, input),
      picker,
      el('button', { type: 'button', class: 'attach', title: 'Attach images (or paste, or drop them here)', 'aria-label': 'Attach images', onclick: () => picker.click() }, el('span', { class: 'label' }, 'Image'), el('span', { class: 'icon', 'aria-hidden': 'true' }, '+')),
      this.steer,
      el('button', { type: 'submit', class: 'primary send' }, 'Send'));
    form.addEventListener('dragover', (event) => {
      if ([...(event.dataTransfer?.types ?? [])].includes('Files')) { event.preventDefault(); form.classList.add('dropping'); }
    });
    form.addEventListener('dragleave', () => form.classList.remove('dropping'));
    form.addEventListener('drop', (event) => {
      form.classList.remove('dropping');
      const files = [...(event.dataTransfer?.files ?? [])];
      if (files.length) { event.preventDefault(); add(files); }
    });
    return form;
  },

  /// The slash-command picker: typing `/` at the start of the message box lists the commands
  /// and skills the session's CLI offers (`slash_commands` of the session), narrowed as one
  /// types; arrows move, Enter or Tab picks, Esc closes. A picked command is sent as the CLI
  /// takes it, as the message's text (`/compact`, `/review …`).
  commandPicker(input) {
    const list = el('div', { class: 'command-picker', role: 'listbox', id: `commands-${this.id}`, 'aria-label': 'Slash commands', hidden: true });
    input.setAttribute('aria-controls', list.id);
    input.setAttribute('aria-autocomplete', 'list');
    let commands = null; // fetched when first asked for
    let shown = [];
    let active = 0;
    const close = () => { list.hidden = true; shown = []; input.removeAttribute('aria-activedescendant'); };
    const pick = (command) => {
      input.value = `/${command.name} `;
      close();
      input.focus();
    };
    const draw = () => {
      list.replaceChildren(...shown.map((command, index) => el('div', {
        class: `command${index === active ? ' active' : ''}`, role: 'option', id: `${list.id}-${index}`, 'aria-selected': String(index === active),
        onmousedown: (event) => { event.preventDefault(); pick(command); },
      },
      el('span', { class: 'command-name' }, `/${command.name}`),
      command.argument_hint ? el('span', { class: 'command-hint muted' }, ` ${command.argument_hint}`) : '',
      command.skill ? el('span', { class: 'command-skill' }, 'skill') : '',
      command.description ? el('span', { class: 'command-description muted' }, command.description) : '')));
      list.hidden = !shown.length;
      if (shown.length) {
        input.setAttribute('aria-activedescendant', `${list.id}-${active}`);
        list.children[active]?.scrollIntoView({ block: 'nearest' });
      }
    };
    const update = async () => {
      const typed = /^\/(\S*)$/.exec(input.value);
      if (!typed) { close(); return; }
      if (!commands) {
        // Not kept while empty: the CLI says its commands once it has started.
        let fetched = [];
        try { fetched = (await api('GET', `/api/sessions/${this.id}`)).slash_commands ?? []; } catch { return; }
        if (!fetched.length) { close(); return; }
        commands = fetched;
      }
      const query = typed[1].toLowerCase();
      const starts = commands.filter((command) => command.name.toLowerCase().startsWith(query));
      const contains = commands.filter((command) => !command.name.toLowerCase().startsWith(query) && command.name.toLowerCase().includes(query));
      shown = [...starts, ...contains].slice(0, 50);
      active = 0;
      draw();
    };
    input.addEventListener('input', update);
    input.addEventListener('blur', close);
    const key = (event) => {
      if (list.hidden || !shown.length) return false;
      if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
        active = (active + (event.key === 'ArrowDown' ? 1 : shown.length - 1)) % shown.length;
        draw();
      } else if ((event.key === 'Enter' && !event.ctrlKey && !event.metaKey) || event.key === 'Tab') {
        pick(shown[active]);
      } else if (event.key === 'Escape') {
        close();
      } else return false;
      event.preventDefault();
      event.stopPropagation();
      return true;
    };
    return { list, key };
  },

};
