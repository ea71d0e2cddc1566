// Permissions: approve, deny, edit, always allow, answer questions.
import { $$, el, icon } from './dom.js';
import { decisionText, wants, wantsLine } from './words.js';
import { api, isMe, toast } from './api.js';
import { sessions } from './list.js';

export function permissionBox(session, request, cwd) {
  const box = el('div', { class: 'permission', dataset: { requestId: request.request_id } });
  const answer = async (body) => {
    for (const button of $$('button', box)) button.disabled = true;
    try {
      await api('POST', `/api/sessions/${session}/permissions/${request.request_id}`, { by: 'browser', ...body });
    } catch (error) {
      toast(`Could not answer: ${error.message}`);
      for (const button of $$('button', box)) button.disabled = false;
    }
  };
  // Claude Code's hints (2.1.330 on): its own heading, an MCP tool's server, whether a person
  // must look (no one-tap approve elsewhere), no "allow always", nothing one key away.
  const hints = request.hints ?? {};
  if (hints.default_to_no) box.dataset.defaultToNo = 'true';
  if (request.tool_name === 'McpElicitation') return elicitationBox(box, request, hints, answer);
  if (hints.title) box.append(el('div', { class: 'permission-heading' }, hints.title));
  box.append(el('div', { class: 'permission-title' }, wantsLine(request.tool_name, request.input, cwd),
    hints.mcp_server ? el('span', { class: 'mcp-server muted', title: `Configured in: ${hints.mcp_server.source}` }, ` · MCP server ${hints.mcp_server.name} (${hints.mcp_server.source})`) : null));
  // Why a person is asked, when something says so: the policy rule that asks, or Claude Code
  // in its own words. The policy's default asking is not news.
  const why = request.rule ? ['Your policy\'s rule ', el('code', {}, request.rule), ' asks you.']
    : request.cli_reason ? [`Claude Code: ${request.cli_reason}`] : null;
  if (why) box.append(el('div', { class: 'permission-reason muted' }, ...why));
  if (hints.person_only) {
    const who = hints.matched_ask_rule
      ? `Your own ask rule ${hints.matched_ask_rule.tool_name}${hints.matched_ask_rule.rule_content ? `(${hints.matched_ask_rule.rule_content})` : ''} (${hints.matched_ask_rule.source}) asks you`
      : hints.classifier_approvable === false ? 'A safety check of Claude Code\'s asks a person' : 'Claude Code asks a person to look';
    box.append(el('div', { class: 'permission-person muted' }, icon('bell'), `${who}: no policy, grant or notification button answers this one.`));
  }
  if (request.started_by || request.origin) {
    box.append(el('div', { class: 'permission-started muted' },
      request.started_by ? startedBy(request.started_by) : 'Turn started',
      // The origin a policy's rules judged by, or why none could be.
      request.origin ? [' · origin ', el('code', { class: 'permission-origin' }, request.origin)]
        : ' · origin not known'));
  }

  if (request.tool_name === 'AskUserQuestion') {
    const answers = {};
    const questions = request.input?.questions ?? [];
    for (const question of questions) {
      const group = el('div', { class: 'choices', role: 'group', 'aria-label': question.question }, el('div', { class: 'choice-question' }, question.question));
      for (const option of question.options ?? []) {
        group.append(el('button', {
          type: 'button', class: 'choice', title: option.description ?? '',
          onclick: (event) => {
            answers[question.question] = option.label;
            for (const b of $$('.choice', group)) b.classList.toggle('chosen', b === event.currentTarget);
            if (questions.every((q) => answers[q.question])) answer({ behavior: 'allow', answers });
          },
        }, option.label));
      }
      box.append(group);
    }
    box.append(el('div', { class: 'actions' }, el('button', { type: 'button', class: 'deny', onclick: () => answer({ behavior: 'deny', message: 'The user declined to answer.' }) }, 'Decline')));
    return box;
  }

  // A plan from plan mode: approved (Claude leaves plan mode and carries it out), or sent back
  // with what to change (Claude reads it and keeps planning). The plan itself is on the card.
  if (request.tool_name === 'ExitPlanMode') {
    const comments = el('textarea', { class: 'plan-comments', rows: 3, placeholder: 'What should change in the plan? (Claude reads it and plans again)', 'aria-label': 'Comments on the plan' });
    box.append(el('div', { class: 'actions needs-approve' },
      el('button', { type: 'button', class: 'allow primary approve-plan', title: 'Approve the plan (a)', onclick: () => answer({ behavior: 'allow' }) }, icon('check'), 'Approve plan'),
      el('button', { type: 'button', class: 'deny send-back', title: 'Send the plan back with your comments (d)', onclick: () => {
        const text = comments.value.trim();
        answer({ behavior: 'deny', message: text ? `The user wants the plan changed before it is carried out: ${text}` : 'The user sent the plan back: keep planning.' });
      } }, icon('x'), 'Send back')),
    el('div', { class: 'secondary needs-approve' }, comments));
    return box;
  }

  const message = el('input', { class: 'deny-message', placeholder: 'Reason to deny (Claude reads it)', 'aria-label': 'Reason to deny' });
  const editor = el('textarea', { class: 'edit-input', rows: 4, hidden: true, 'aria-label': 'Edited input' }, JSON.stringify(request.input ?? {}, null, 2));
  // What "allow always" grants, as the daemon says (a Bash command exactly; any other tool
  // wholly): said before the click, never understated.
  const rule = request.always_allows || '';
  const grant = !rule ? 'the same call' : rule.includes('(') ? rule : `every ${rule} call`;
  const always = `Allow ${grant} for the rest of this session`;
  // Where Claude Code offers no standing rule, none is offered here (the daemon refuses one).
  const standing = !hints.no_standing_rule;
  box.append(editor,
    el('div', { class: 'actions needs-approve' },
      el('button', { type: 'button', class: 'allow primary', title: hints.default_to_no ? 'Allow (no key: Claude Code asks for a deliberate click)' : 'Allow (a)', onclick: () => {
        if (!editor.hidden) {
          try { answer({ behavior: 'allow', updated_input: JSON.parse(editor.value) }); } catch (error) { toast(`The edited input is not JSON: ${error.message}`); }
        } else answer({ behavior: 'allow' });
      } }, icon('check'), 'Allow'),
      standing ? el('button', { type: 'button', class: 'always', title: always, onclick: () => answer({ behavior: 'allow', remember: true }) }, 'Allow always') : null,
      el('button', { type: 'button', class: 'deny', title: 'Deny (d)', onclick: () => answer({ behavior: 'deny', message: message.value.trim() || undefined }) }, icon('x'), 'Deny')),
    el('div', { class: 'secondary needs-approve' }, message,
      el('button', { type: 'button', class: 'edit ghost needs-operate', onclick: (event) => { editor.hidden = !editor.hidden; event.currentTarget.textContent = editor.hidden ? 'Edit input' : 'Cancel edit'; } }, 'Edit input')),
    standing ? el('div', { class: 'always-rule muted needs-approve' }, `Allow always: ${grant}, for the rest of this session.`)
      : el('div', { class: 'always-rule muted needs-approve' }, 'Claude Code allows this one once at a time: no "allow always".'));
  return box;
}

/// An MCP server asks the person (an elicitation): its message, and a form built from its flat
/// schema (text, number, yes/no, a choice), or a link to open (URL mode). Send accepts with what
/// was filled in; Decline declines. The daemon checks the answer against the schema again.
function elicitationBox(box, request, hints, answer) {
  const input = request.input ?? {};
  box.classList.add('elicitation');
  if (hints.title) box.append(el('div', { class: 'permission-heading' }, hints.title));
  box.append(el('div', { class: 'permission-title' }, 'The MCP server ', el('code', {}, input.server ?? '?'), ' asks you'),
    el('div', { class: 'elicitation-message' }, input.message ?? ''));
  if (input.description) box.append(el('div', { class: 'muted' }, input.description));
  const schema = input.requested_schema ?? {};
  const properties = schema.properties ?? {};
  const required = new Set(schema.required ?? []);
  const order = (input.property_order ?? Object.keys(properties)).filter((name) => properties[name]);
  const fields = order.map((name) => {
    const field = properties[name] ?? {};
    const label = field.title || name;
    let control;
    if (Array.isArray(field.enum)) {
      control = el('select', { name, 'aria-label': label },
        el('option', { value: '' }, required.has(name) ? 'Choose…' : '(none)'),
        ...field.enum.map((value, index) => el('option', { value: String(index) }, field.enumNames?.[index] ?? String(value))));
    } else if (field.type === 'boolean') {
      control = el('input', { type: 'checkbox', name, 'aria-label': label });
    } else if (field.type === 'number' || field.type === 'integer') {
      control = el('input', { type: 'number', name, step: field.type === 'integer' ? '1' : 'any', 'aria-label': label });
    } else {
      control = el('input', { type: 'text', name, 'aria-label': label });
    }
    const value = () => {
      if (Array.isArray(field.enum)) return control.value === '' ? undefined : field.enum[Number(control.value)];
      if (field.type === 'boolean') return control.checked;
      if (control.value.trim() === '') return undefined;
      if (field.type === 'number' || field.type === 'integer') return Number(control.value);
      return control.value;
    };
    return { name, value, row: el('label', { class: 'elicitation-field' },
      el('span', { class: 'field-name' }, label, required.has(name) ? ' *' : ''), control,
      field.description ? el('span', { class: 'muted field-hint' }, field.description) : null) };
  });
  if (fields.length) box.append(el('div', { class: 'elicitation-form' }, ...fields.map((field) => field.row)));
  // The server's URL is its own words: a link only when it is http(s), else shown as text.
  if (input.mode === 'url' && input.url) {
    const web = /^https?:\/\//i.test(input.url);
    box.append(el('div', {}, web
      ? el('a', { href: input.url, target: '_blank', rel: 'noopener noreferrer' }, `Open ${input.url}`)
      : el('code', {}, input.url), web ? null : el('span', { class: 'muted' }, ' (not a web address: not linked)')));
  }
  const send = () => {
    const content = {};
    for (const field of fields) {
      const value = field.value();
      if (value !== undefined) content[field.name] = value;
    }
    const missing = [...required].filter((name) => content[name] === undefined);
    if (missing.length) { toast(`Fill in ${missing.join(', ')} first.`); return; }
    answer(fields.length ? { behavior: 'allow', updated_input: content } : { behavior: 'allow' });
  };
  box.append(el('div', { class: 'actions needs-operate' },
    el('button', { type: 'button', class: 'allow primary send-answer', onclick: send }, icon('check'), input.mode === 'url' ? 'Done' : 'Send'),
    el('button', { type: 'button', class: 'deny', onclick: () => answer({ behavior: 'deny', message: 'The user declined.' }) }, icon('x'), 'Decline')));
  return box;
}

export function showDecision(box, decision) {
  box.classList.add('decided', decision.behavior === 'allow' ? 'allowed' : 'denied');
  box.replaceChildren(el('div', { class: 'decision' }, icon(decision.behavior === 'allow' ? 'check' : 'x'), decisionText(decision)));
}

/// Who started the turn that asks, as the daemon records it (`token NAME (CHANNEL)`,
/// `relay frontend (relay)`), in a few words: "Turn started by you in the web UI".
function startedBy(text) {
  const token = text.match(/^token (.+) \(([^()]+)\)$/);
  if (token) {
    const where = { 'web UI': 'in the web UI', api: 'through the API', grpc: 'through gRPC', websocket: 'through a WebSocket' }[token[2]] ?? `through ${token[2]}`;
    return `Turn started by ${isMe(token[1]) ? 'you' : token[1]} ${where}`;
  }
  const other = text.match(/^(.+) \(([^()]+)\)$/);
  return other ? `Turn started by ${other[1]} (${other[2]})` : `Turn started by ${text}`;
}
