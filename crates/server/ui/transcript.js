// The transcript: the session's view in, DOM out.
//
// The daemon interprets the CLI's lines (`GET …/view`, `…/subscribe?view=true`); this draws the
// updates it sends and derives nothing from lines. Text streams into its block as markdown until
// the whole block arrives. Tool calls are one-line cards (tool, target, outcome) that open on a
// click; a card waiting for an approval, a failed one and the latest one stay open. A card
// collects its result, its permission and (for Task/Agent) the subagent's messages. Older pages
// are drawn into their own chunk above the others; a result or decision seen before its card
// waits for it.
//
// Blocks keep their index order inside their message. Tool calls are cards keyed by
// `tool_use_id`; for `Task`/`Agent` a card collects the updates whose `parent_tool_use_id` is
// theirs. What refers to a card not drawn yet waits in `orphans`. `settle(card)` decides whether
// a card is folded to its one line: a person's click wins; otherwise a card waiting for an
// approval, a failed one (not a denied one), an unfinished one and the newest of its conversation
// (the main one, or a subagent's nest) stay open. Cards of an older page are never the newest.
// Images a person attaches are checked here as the daemon checks them (type from the first bytes,
// size, count).
import { $, copyButton, el, icon, toolIcon } from './dom.js';
import { codeBlock, languageOf, markdown, StreamingMarkdown } from './markdown.js';
import { homeRelative, money, plural, relative, tokens, wants } from './words.js';
import { can, scope } from './api.js';
import { showing } from './showing.js';
import { sessions } from './list.js';
import { permissionBox, showDecision } from './permissions.js';

export class Transcript {
  constructor(session) {
    this.session = session;
    this.cwd = null;
    this.messages = new Map(); // message id -> {box, blocks: Map(index -> {node, text, stream})}
    this.tools = new Map(); // tool_use_id -> card
    this.orphans = new Map(); // tool_use_id -> [fn(card)] waiting for the card
    this.permissions = new Map(); // request_id -> {request, decided, box}
    this.latest = new Map(); // scope (the parent call, or '') -> the newest card in it
    this.inputs = new Map(); // tool_use_id -> its tool_use_started, while its input streams
    this.older = false; // drawing an older page: its cards are never the latest
    this.retracted = new Set(); // lines Claude Code took back
    this.prompts = new Map(); // prompt boxes by uuid
    this.queued = []; // bubbles of prompts that wait for the turn before them
    this.onChange = () => {}; // pending permissions or context changed
    this.onGrow = () => {}; // streamed text was drawn
    this.context = null; // context tokens of the last main message
    this.contextWindow = null;
  }

  /// Where an update goes: the subagent's nest inside its Task card, or the chunk.
  container(parent, chunk) {
    if (parent && this.tools.has(parent)) return slot(this.tools.get(parent), 'nest') ?? chunk;
    return chunk;
  }

  apply(update, chunk) {
    switch (update.update) {
      case 'started':
        this.cwd = update.cwd ?? this.cwd;
        return this.notice(chunk, 'info', `Claude Code started in ${update.cwd ?? '?'} with ${update.model ?? 'its default model'} (${update.permission_mode ?? 'default'})`);
      case 'prompt': return this.prompt(update, chunk);
      case 'dequeued': {
        const next = this.queued.shift();
        if (next) { next.classList.remove('queued'); $('.queued-label', next)?.remove(); }
        return undefined;
      }
      case 'message_started':
        if (!update.parent_tool_use_id && update.context_tokens != null && !this.older) {
          this.context = update.context_tokens;
          this.onChange();
        }
        this.message(update.message_id, this.container(update.parent_tool_use_id, chunk));
        return undefined;
      case 'text_delta':
      case 'thinking_delta': return this.streamed(update, chunk);
      case 'tool_use_started':
        // An older page's start of a call a newer page drew whole changes nothing.
        if (this.messages.get(update.message_id)?.blocks.get(update.index)?.done) return undefined;
        this.inputs.set(update.tool_use_id, update);
        return this.place(update, chunk, el('div', { class: 'block tool pending-input' }, `Preparing ${update.name}…`), null);
      case 'tool_input_delta': return this.inputGrew(update, chunk);
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
      case 'call_settled': return this.notice(chunk, 'info', update.settle === 'done'
        ? `${update.tool_name} call ${update.tool_use_id}, cut off when its CLI ended, settled as done by ${update.by}${update.note ? `: ${update.note}` : ''}.`
        : `${update.tool_name} call ${update.tool_use_id}, cut off when its CLI ended, settled as interrupted (its outcome unknown) by ${update.by}.`);
      // Claude Code took these back (a refusal retried on another model): out of the page, as
      // out of the view; the notice that follows says so, and the log keeps them.
      case 'retracted': return this.retract(update.uuids ?? []);
      case 'usage_windows':
        // An older page's report is older than the one shown.
        if (this.older) return undefined;
        this.usageWindows = update.windows ?? [];
        this.onWindows?.();
        return undefined;
      // What the person might type next: a chip under the answer that fills the message box.
      case 'prompt_suggestion': {
        if (this.older || !update.suggestion) return undefined;
        this.dropSuggestions();
        return chunk.append(el('div', { class: 'suggestion' },
          el('button', { type: 'button', class: 'suggestion-chip ghost needs-operate', title: 'Put it in the message box (Claude Code\'s guess at what you might ask next)', onclick: () => showing.view?.suggest(update.suggestion) }, update.suggestion)));
      }
      // The tasks running in the background now (the whole set).
      case 'background_tasks':
        if (this.older) return undefined;
        this.onTasks?.(update.tasks ?? []);
        return undefined;
      case 'prompt_cancelled': {
        const box = this.prompts.get(update.uuid);
        if (!box) return undefined;
        this.queued = this.queued.filter((queued) => queued !== box);
        box.classList.remove('queued');
        box.classList.add('cancelled');
        $('.queued-label', box)?.replaceChildren('cancelled: it did not run');
        return undefined;
      }
      case 'conversation_reset':
        return chunk.append(el('hr', { class: 'conversation-reset', title: 'The conversation was cleared here: Claude goes on without what came before' }));
      // model, mode, claude_session, run: the header and the list show those.
      default: return undefined;
    }
  }

  /// Takes out the messages with any of `uuids`, and keeps them out when an older page brings
  /// them (a retraction comes after what it takes back).
  retract(uuids) {
    for (const uuid of uuids) this.retracted.add(uuid);
    for (const [id, message] of this.messages) {
      if (![...(message.uuids ?? [])].some((uuid) => this.retracted.has(uuid))) continue;
      message.box.remove();
      this.messages.delete(id);
    }
    this.onChange();
  }

  unqueueAll() {
    for (const box of this.queued.splice(0)) { box.classList.remove('queued'); $('.queued-label', box)?.remove(); }
  }

  notice(chunk, level, text) {
    chunk.append(el('div', { class: `notice ${level}` }, text));
  }

  /// Suggestions are for the next message only: a prompt, or a newer suggestion, takes them away.
  dropSuggestions() {
    for (const chip of this.root?.querySelectorAll('.suggestion') ?? document.querySelectorAll('.transcript .suggestion')) chip.remove();
  }

  prompt(update, chunk) {
    if (!this.older) this.dropSuggestions();
    const box = el('div', { class: 'msg user' });
    if (update.text) box.append(el('div', { class: 'text' }, update.text));
    for (const picture of update.images ?? []) box.append(image(picture));
    const actions = [];
    if (update.text) actions.push(copyButton(update.text));
    // The files as they were before this prompt ran, from the CLI's checkpoints.
    if (update.uuid) {
      actions.push(el('button', { type: 'button', class: 'rewind-here needs-operate', title: 'Put the files back as they were before this message',
        onclick: () => showing.view?.rewind(update.uuid) }, 'Rewind files'));
    }
    if (actions.length) {
      box.tabIndex = -1;
      box.append(el('div', { class: 'msg-actions' }, ...actions));
    }
    chunk.append(box);
    if (update.uuid) this.prompts.set(update.uuid, box);
    if (update.queued) {
      box.classList.add('queued');
      // Waits behind the running turn: it may be dropped before it runs (not from an older
      // page: that one ran, or was dropped, long ago).
      const cancel = update.uuid && !this.older
        ? el('button', { type: 'button', class: 'cancel-queued ghost needs-operate', title: 'Drop this message before it runs', onclick: () => showing.view?.cancelQueued(update.uuid) }, 'Cancel')
        : null;
      box.append(el('span', { class: 'queued-label' }, 'queued', cancel));
      this.queued.push(box);
    }
  }

  message(id, into) {
    let message = this.messages.get(id);
    if (!message) {
      // Focusable, so a tap (no hover on phones) shows its actions.
      const box = el('div', { class: 'msg assistant', dataset: { id }, tabindex: '-1' });
      const actions = el('div', { class: 'msg-actions' });
      box.append(actions);
      into.append(box);
      message = { box, actions, blocks: new Map() };
      this.messages.set(id, message);
    }
    return message;
  }

  /// The message's text, for its copy button.
  messageText(message) {
    return [...message.blocks.entries()].sort(([a], [b]) => a - b)
      .map(([, block]) => block.kind === 'text' ? block.text : '').filter(Boolean).join('\n\n');
  }

  /// Puts `node` at its block's place in its message (blocks stay in index order).
  place(update, chunk, node, text, kind) {
    const message = this.message(update.message_id, this.container(update.parent_tool_use_id, chunk));
    const block = message.blocks.get(update.index);
    if (block?.node) block.node.replaceWith(node);
    else {
      const after = [...message.blocks.entries()].filter(([i, b]) => i > update.index && b.node).sort(([a], [b]) => a - b)[0];
      if (after) after[1].node.before(node); else message.actions.before(node);
    }
    message.blocks.set(update.index, { node, text: text ?? block?.text ?? '', kind: kind ?? block?.kind });
    return message;
  }

  streamed(update, chunk) {
    const message = this.message(update.message_id, this.container(update.parent_tool_use_id, chunk));
    const block = message.blocks.get(update.index);
    if (block?.done) return;
    const more = update.text ?? update.thinking ?? '';
    if (update.update === 'text_delta') {
      if (block?.stream) {
        block.stream.append(more);
        block.text += more;
        return;
      }
      const stream = new StreamingMarkdown('block text streaming');
      stream.onDraw = () => this.onGrow();
      stream.append((block?.text ?? '') + more);
      this.place(update, chunk, stream.node, stream.text, 'text');
      message.blocks.get(update.index).stream = stream;
      return;
    }
    const text = (block?.text ?? '') + more;
    if (block?.thinking) {
      block.thinking.textContent = text;
      block.text = text;
      return;
    }
    const body = el('div', { class: 'thinking-text' }, text);
    this.place(update, chunk, el('details', { class: 'block thinking streaming' }, el('summary', {}, 'Thinking…'), body), text, 'thinking');
    message.blocks.get(update.index).thinking = body;
  }

  /// A call's input as it streams (the daemon parses it as far as it goes): its card fills in
  /// while the model writes it, a Write's content growing line by line.
  inputGrew(update, chunk) {
    const started = this.inputs.get(update.tool_use_id);
    if (!started || !update.partial_input) return undefined;
    if (this.messages.get(started.message_id)?.blocks.get(started.index)?.done) return undefined;
    const call = { tool_use_id: update.tool_use_id, name: started.name, input: update.partial_input, rebuilt: true };
    const card = this.toolCard(call, started.parent_tool_use_id, this.tools.get(update.tool_use_id));
    card.classList.add('streaming-input');
    card.querySelector('.tool-head .outcome').textContent = 'writing…';
    this.place(started, chunk, card, null, 'tool_use');
    return undefined;
  }

  finished(update, chunk) {
    const block = update.block;
    let node;
    let text = null;
    if (block.kind === 'text') {
      node = el('div', { class: 'block text' }, linkPaths(markdown(block.text)));
      text = block.text;
    } else if (block.kind === 'thinking') {
      node = el('details', { class: 'block thinking' }, el('summary', {}, 'Thinking'),
        el('div', { class: 'thinking-text' }, block.redacted ? '(redacted)' : block.thinking));
    } else if (block.kind === 'tool_use') {
      this.inputs.delete(block.tool_use_id);
      const known = this.tools.get(block.tool_use_id);
      // A call rebuilt from its stream never replaces the CLI's own report of it (an older
      // page can bring the rebuilt one after the newer page drew the CLI's).
      if (block.rebuilt && known?.dataset.rebuilt === 'false') return;
      node = this.toolCard(block, update.parent_tool_use_id, known);
    } else node = el('div', { class: 'block' }, codeBlock(JSON.stringify(block.value, null, 2), 'json'));
    const message = this.place(update, chunk, node, text, block.kind);
    message.blocks.get(update.index).done = true;
    // Copy once there is whole text to copy (not while it streams).
    if (block.kind === 'text' && !$('.copy', message.actions)) {
      message.actions.prepend(copyButton(() => this.messageText(message), 'Copy'));
    }
    if (update.uuid) {
      message.box.dataset.uuid = update.uuid;
      // Every line's uuid, for a retraction that names any of them.
      (message.uuids ??= new Set()).add(update.uuid);
      // Taken back already (the retraction was on a newer page).
      if (this.retracted.has(update.uuid)) this.retract([]);
    }
    if (update.uuid && !update.parent_tool_use_id && !$('.fork-here', message.actions)) {
      message.actions.append(el('button', { type: 'button', class: 'fork-here needs-operate', title: 'Start a new session from this point of the conversation',
        onclick: () => showing.view?.fork(message.box.dataset.uuid) }, 'Fork from here'));
    }
  }

  toolCard(call, parent, known) {
    const name = call.name ?? '';
    const input = call.input ?? {};
    const cwd = this.cwd ?? sessions.get(this.session)?.cwd;
    const card = el('div', { class: `block tool tool-${name.replace(/[^A-Za-z0-9_-]/g, '')}`, dataset: { toolUseId: call.tool_use_id, tool: name, rebuilt: String(Boolean(call.rebuilt)) } });
    const label = name.startsWith('mcp__') ? name.split('__').slice(1).join(' · ') : name;
    const [, target] = wants(name, input, cwd);
    const summary = name === 'Bash' ? (input.description || input.command || '')
      : name === 'Read' && input.limit ? `${target} lines ${input.offset ?? 1}–${(input.offset ?? 1) + input.limit - 1}`
        : name === 'Read' && input.offset ? `${target} from line ${input.offset}`
        : name === 'TodoWrite' ? plural(input.todos?.length ?? 0, 'item')
          : target ?? '';
    const head = el('button', { type: 'button', class: 'tool-head', 'aria-expanded': 'true', title: 'Show or hide the details' },
      icon('chevron', 'chevron'), toolIcon(name), el('span', { class: 'tool-name' }, label),
      el('span', { class: 'tool-target', title: summary }, summary), el('span', { class: 'outcome' }));
    head.addEventListener('click', (event) => {
      // An edit's counts open Review at its file.
      if (event.target.closest('.diffstat') && input.file_path) { showing.view?.reviewAt(input.file_path); return; }
      card.dataset.user = card.classList.contains('collapsed') ? 'open' : 'closed';
      this.settle(card);
    });
    const body = el('div', { class: 'tool-body' });
    card.append(head, body);
    // A file's path opens it in Files (at the line a Read started from); an edit's change
    // opens in Review.
    const file = ['Read', 'Edit', 'MultiEdit', 'Write', 'NotebookEdit'].includes(name) ? (input.file_path ?? input.notebook_path) : null;
    if (file) {
      const offset = Number(input.offset);
      const line = name === 'Read' && Number.isInteger(offset) && offset > 0 ? offset : undefined;
      const shown = `${homeRelative(relative(file, cwd))}${line ? `:${line}` : ''}`;
      // A link for a token that may open Files; the path as text for the others.
      body.append(el('div', { class: 'tool-path' },
        can('operate') ? el('button', { type: 'button', class: 'path-link', title: 'Open in Files', onclick: () => showing.view?.openFile(file, line) }, icon('file'), shown)
          : el('span', { class: 'path-text muted' }, icon('file'), shown),
        name === 'Read' ? '' : el('button', { type: 'button', class: 'ghost review-link', title: 'Open this file\'s change in Review', onclick: () => showing.view?.reviewAt(file) }, icon('diff'), 'Review')));
    }
    switch (name) {
      case 'Bash':
        body.append(codeBlock(`$ ${input.command ?? ''}`, 'bash'));
        break;
      case 'Edit':
        body.append(diffView(input.old_string, input.new_string, relative(input.file_path, cwd)));
        break;
      case 'MultiEdit':
        for (const edit of input.edits ?? []) body.append(diffView(edit.old_string, edit.new_string, relative(input.file_path, cwd)));
        break;
      case 'Write':
        body.append(codeBlock(input.content, languageOf(input.file_path)));
        break;
      case 'Read':
        break;
      case 'Task':
      case 'Agent':
        body.append(el('details', { class: 'agent-prompt' }, el('summary', {}, 'Prompt'), markdown(input.prompt ?? '')));
        body.append(el('div', { class: 'nest' }));
        break;
      case 'ExitPlanMode':
        body.append(input.plan
          ? el('div', { class: 'plan' }, markdown(input.plan))
          : el('p', { class: 'muted' }, 'No plan came with the request (Claude did not write its plan file).'));
        break;
      case 'AskUserQuestion':
        for (const question of input.questions ?? []) {
          body.append(el('div', { class: 'question' }, el('strong', {}, question.question),
            el('ul', {}, (question.options ?? []).map((option) => el('li', {}, option.label,
              option.description ? el('span', { class: 'muted' }, ` — ${option.description}`) : null)))));
        }
        break;
      default:
        body.append(codeBlock(JSON.stringify(input, null, 2), 'json'));
    }
    card.append(el('div', { class: 'tool-permission' }), el('div', { class: 'tool-result' }));
    if (known) {
      // The CLI's own input replaces a rebuilt one: its result, permission and state move along.
      for (const name of ['tool-permission', 'tool-result', 'nest']) {
        const moved = slot(known, name);
        if (moved && slot(card, name)) slot(card, name).replaceWith(moved);
      }
      for (const state of ['done', 'errored', 'denied', 'waiting']) card.classList.toggle(state, known.classList.contains(state));
      if (known.dataset.user) card.dataset.user = known.dataset.user;
      card.dataset.detail = known.dataset.detail ?? '';
    }
    this.tools.set(call.tool_use_id, card);
    // The newest card of its conversation: a replaced card keeps its place; a new one takes
    // it, unless it comes from an older page.
    const scope = parent ?? '';
    const latest = this.latest.get(scope);
    if (known) {
      if (latest === known) this.latest.set(scope, card);
    } else if (!this.older) {
      this.latest.set(scope, card);
      if (latest) this.settle(latest);
    }
    for (const waiting of this.orphans.get(call.tool_use_id) ?? []) waiting(card);
    this.orphans.delete(call.tool_use_id);
    this.settle(card);
    return card;
  }

  /// Opens or folds a card: a person's choice wins; otherwise a card waiting for an approval, a
  /// failed or unfinished one, and the newest of its conversation stay open.
  settle(card) {
    const has = (state) => card.classList.contains(state);
    const scope = [...this.latest.entries()].find(([, latest]) => latest === card);
    const open = card.dataset.user ? card.dataset.user === 'open'
      : has('waiting') || (has('errored') && !has('denied')) || !has('done') || Boolean(scope);
    card.classList.toggle('collapsed', !open);
    slot(card, 'tool-head')?.setAttribute('aria-expanded', String(open));
    const outcome = slot(card, 'tool-head')?.querySelector('.outcome');
    if (!outcome) return;
    if (has('waiting')) outcome.replaceChildren(icon('bell'), 'waiting for you');
    else if (has('denied')) outcome.replaceChildren(icon('x'), 'denied');
    else if (has('errored')) outcome.replaceChildren(icon('x'), 'failed');
    else if (has('done') && ['Edit', 'MultiEdit'].includes(card.dataset.tool)) {
      outcome.replaceChildren(icon('check'), el('span', { class: 'diffstat', title: 'Open in Review' }, card.dataset.detail || 'done'));
    } else if (has('done')) outcome.replaceChildren(icon('check'), card.dataset.detail || 'done');
    else outcome.replaceChildren('running…');
    outcome.className = `outcome ${has('waiting') ? 'waiting' : has('denied') || has('errored') ? 'bad' : has('done') ? 'ok' : ''}`;
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
      slot(card, 'tool-result').replaceChildren(resultView(result));
      card.classList.toggle('errored', Boolean(result.is_error));
      card.classList.add('done');
      card.dataset.detail = resultDetail(card, result);
      this.settle(card);
    });
  }

  turnEnded(turn, chunk) {
    const into = this.container(turn.parent_tool_use_id, chunk);
    if (!turn.parent_tool_use_id && !this.older) {
      if (turn.context_tokens != null) this.context = turn.context_tokens;
      if (turn.context_window != null) this.contextWindow = turn.context_window;
      this.onChange();
    }
    // A terminal's transcript tells a turn's duration (not an interrupted one's) but no tokens
    // or cost: no zeros are made up for them.
    const transcript = turn.subtype === 'turn_duration' || turn.subtype === 'interrupted';
    const duration = `${(turn.duration_ms / 1000).toFixed(1)} s`;
    const parts = transcript ? (turn.duration_ms ? [duration] : [])
      : [duration, `${tokens(turn.input_tokens)} in`, `${tokens(turn.output_tokens)} out`, money(turn.cost_usd)];
    const label = turn.interrupted ? 'Interrupted'
      : turn.failed ? `Turn ended: ${turn.subtype}${turn.result ? ` — ${turn.result}` : ''}`
        : 'Turn done';
    into.append(el('div', { class: `turn-end${turn.failed ? ' error' : ''}${turn.interrupted ? ' interrupted' : ''}` }, [label, ...parts].join(' · ')));
  }

  permissionRequested(request, chunk) {
    if (this.permissions.has(request.request_id) && this.permissions.get(request.request_id).request) return;
    const entry = this.permissions.get(request.request_id) ?? { request, decided: null, box: null };
    entry.request = request;
    this.permissions.set(request.request_id, entry);
    const cwd = this.cwd ?? sessions.get(this.session)?.cwd;
    const draw = (slot) => {
      entry.box = permissionBox(this.session, request, cwd);
      slot.replaceChildren(entry.box);
      if (entry.decided) showDecision(entry.box, entry.decided);
    };
    if (request.tool_use_id && this.tools.has(request.tool_use_id)) {
      const card = this.tools.get(request.tool_use_id);
      draw(slot(card, 'tool-permission'));
      card.classList.toggle('waiting', !entry.decided);
      this.settle(card);
    } else {
      // An MCP server's question has its form on the card: no input to show.
      const question = request.tool_name === 'McpElicitation';
      const slot = el('div', { class: 'block tool standalone' },
        el('div', { class: 'tool-head' }, toolIcon(request.tool_name), el('span', { class: 'tool-name' }, question ? `A question from ${request.input?.server ?? 'an MCP server'}` : request.tool_name)),
        question ? null : el('div', { class: 'tool-body' }, codeBlock(JSON.stringify(request.input, null, 2), 'json')));
      const inner = el('div', { class: 'tool-permission' });
      slot.append(inner);
      chunk.append(slot);
      draw(inner);
    }
    this.onChange();
  }

  permissionDecided(decision) {
    const entry = this.permissions.get(decision.request_id);
    const mark = (card) => {
      card.classList.remove('waiting');
      card.classList.toggle('denied', decision.behavior !== 'allow');
      this.settle(card);
    };
    if (!entry) {
      this.permissions.set(decision.request_id, { request: null, decided: decision, box: null });
      // Decided with no request for a person (a policy rule, the policy's hook, the CLI on its
      // own): shown on the tool's card, unless a request's box is there already.
      if (decision.tool_use_id) {
        this.withCard(decision.tool_use_id, (card) => {
          const place = slot(card, 'tool-permission');
          if (place && !place.firstChild) {
            const box = el('div', { class: 'permission' });
            place.append(box);
            showDecision(box, decision);
          }
          mark(card);
        });
      }
      return;
    }
    entry.decided = decision;
    if (entry.box) showDecision(entry.box, decision);
    const card = entry.request?.tool_use_id && this.tools.get(entry.request.tool_use_id);
    if (card) mark(card);
    this.onChange();
  }

  pending() {
    return [...this.permissions.values()].filter((entry) => entry.request && !entry.decided && entry.box?.isConnected);
  }
}

/// A card's own part (not one of a card nested in it): `tool-head`, `tool-body`,
/// `tool-permission`, `tool-result`, or the subagent's `nest`.
function slot(card, name) {
  return card.querySelector(name === 'nest' ? ':scope > .tool-body > .nest' : `:scope > .${name}`);
}

// The images the Messages API takes, and its limits (the daemon checks them again).
export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];
const MAX_IMAGE_BYTES = 5 * 1024 * 1024;
const MAX_IMAGES = 20;

export function bytes(count) {
  if (count < 1024) return `${count} B`;
  if (count < 1024 * 1024) return `${(count / 1024).toFixed(1)} KiB`;
  return `${(count / (1024 * 1024)).toFixed(1)} MiB`;
}

/// Why an image may not be sent, or null: its type is read from its first bytes, as the
/// daemon reads it (a file's name or the browser's guess may say otherwise).
export async function imageProblem(file, count) {
  const name = file.name || 'The pasted image';
  if (count >= MAX_IMAGES) return `A message may carry at most ${MAX_IMAGES} images.`;
  if (file.size > MAX_IMAGE_BYTES) return `${name} is ${bytes(file.size)}; an image may be at most 5 MiB.`;
  if (!file.size) return `${name} is empty.`;
  const head = new Uint8Array(await file.slice(0, 12).arrayBuffer());
  const found = sniffImage(head);
  if (!found) return `${name} is not a PNG, JPEG, GIF or WebP image.`;
  if (found !== file.type) return `${name} says it is ${file.type || 'of no type'} but is ${found}.`;
  return null;
}

function sniffImage(head) {
  const starts = (bytes) => bytes.every((byte, i) => head[i] === byte);
  if (starts([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return 'image/png';
  if (starts([0xff, 0xd8, 0xff])) return 'image/jpeg';
  if (starts([0x47, 0x49, 0x46, 0x38])) return 'image/gif';
  if (starts([0x52, 0x49, 0x46, 0x46]) && String.fromCharCode(...head.slice(8, 12)) === 'WEBP') return 'image/webp';
  return null;
}

export function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(',', 2)[1] ?? '');
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

/// A file's path in an answer's inline code (`src/lib.rs`, `src/lib.rs:12`, `a.py:3:5`,
/// `lib.rs:10-20`) becomes a link that opens Files there, for a token that may open Files (the
/// code stays as it is for the others). Its extension starts with a letter (`127.0.0.1:7777` is
/// no file); a name without a folder needs a source file's extension (`api.example.com:443` is
/// no file either); code inside a link stays the link's.
const PATH_IN_CODE = /^(?:\.{0,2}\/)?(?:[\w.@+-]+\/)*[\w@+-][\w.@+-]*\.([A-Za-z][A-Za-z0-9]{0,9})(?::(\d{1,7})(?:-\d{1,7})?)?(?::\d{1,5})?$/;
const SOURCE = new Set(['c', 'cc', 'cpp', 'cs', 'css', 'go', 'h', 'hpp', 'html', 'java', 'js', 'json', 'jsx', 'kt', 'lock', 'md', 'mjs',
  'php', 'proto', 'py', 'rb', 'rs', 'scss', 'sh', 'sql', 'swift', 'toml', 'ts', 'tsx', 'txt', 'vue', 'xml', 'yaml', 'yml']);
function linkPaths(box) {
  if (!can('operate')) return box;
  for (const code of box.querySelectorAll(':not(pre) > code')) {
    if (code.closest('a')) continue;
    const text = code.textContent.trim();
    const found = text.length <= 300 && text.match(PATH_IN_CODE);
    if (!found) continue;
    const [, extension, lineText] = found;
    if (!text.includes('/') && (!lineText || !SOURCE.has(extension.toLowerCase()))) continue;
    const path = lineText ? text.slice(0, text.indexOf(':')) : text;
    const line = lineText ? Number(lineText) : undefined;
    const link = el('button', { type: 'button', class: 'path-link inline', title: `Open ${path} in Files`,
      onclick: () => showing.view?.openFile(path, line) }, code.cloneNode(true));
    code.replaceWith(link);
  }
  return box;
}

function image(picture) {
  if (picture.source === 'base64') return el('img', { class: 'image', src: `data:${picture.media_type};base64,${picture.data}`, alt: 'image' });
  if (picture.source === 'url') return el('img', { class: 'image', src: picture.url, alt: 'image' });
  return el('span', { class: 'muted' }, '[image]');
}

function diffView(before, after, path) {
  const table = el('div', { class: 'diff', role: 'table', 'aria-label': `Changes to ${path || 'the file'}` });
  const changes = window.Diff ? window.Diff.diffLines(before ?? '', after ?? '') : [{ value: after ?? '' }];
  let added = 0;
  let removed = 0;
  for (const change of changes) {
    const kind = change.added ? 'add' : change.removed ? 'del' : 'ctx';
    const sign = change.added ? '+' : change.removed ? '-' : ' ';
    for (const text of change.value.replace(/\n$/, '').split('\n')) {
      if (change.added) added += 1;
      if (change.removed) removed += 1;
      table.append(el('div', { class: `diff-line ${kind}` }, el('span', { class: 'sign' }, sign), el('span', { class: 'diff-text' }, text)));
    }
  }
  table.dataset.added = added;
  table.dataset.removed = removed;
  return table;
}

/// A finished call's outcome, in a few words, for its one-line summary.
function resultDetail(card, result) {
  const lines = (result.text ?? '').split('\n').filter((line) => line.trim()).length;
  switch (card.dataset.tool) {
    case 'Bash': return lines ? plural(lines, 'line') + ' of output' : 'no output';
    case 'Read': return result.images?.length ? 'an image' : plural(lines, 'line');
    case 'Edit': case 'MultiEdit': {
      const diffs = [...slot(card, 'tool-body').querySelectorAll(':scope > .diff')];
      const sum = (key) => diffs.reduce((total, diff) => total + Number(diff.dataset[key] ?? 0), 0);
      return `+${sum('added')} −${sum('removed')}`;
    }
    case 'Write': {
      const written = slot(card, 'tool-body')?.querySelector('code')?.textContent.replace(/\n$/, '').split('\n').length ?? 0;
      return `${plural(written, 'line')} written`;
    }
    case 'Grep': case 'Glob': return plural(lines, 'match', 'matches');
    default: return 'done';
  }
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
