// `switchboard acp` driven by the Agent Client Protocol's reference client (npm
// @agentclientprotocol/sdk), as an editor drives it, against a daemon running the real Claude
// Code CLI on the project's fake API. Run through `cargo test` (crates/cli/tests/it/acp.rs),
// which starts the daemon and checks the files afterwards.
//
// Environment: SWITCHBOARD_BIN (the binary), DATA_DIR (the daemon's data directory),
// DAEMON_URL and DAEMON_TOKEN (the daemon, for the answer given elsewhere),
// WORKDIR (the sessions' directory).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';

const { SWITCHBOARD_BIN, DATA_DIR, DAEMON_URL, DAEMON_TOKEN, WORKDIR } = process.env;
const WAIT_MS = 90_000;

/// `promise`, or a failure naming `what` once WAIT_MS has passed.
function within(what, promise) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${WAIT_MS / 1000} s`)), WAIT_MS);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

async function step(name, body) {
  const started = Date.now();
  await body();
  console.log(`  ✓ ${name} (${Date.now() - started} ms)`);
}

const agent = spawn(SWITCHBOARD_BIN, ['acp', '--data-dir', DATA_DIR], { stdio: ['pipe', 'pipe', 'inherit'] });
const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));

const updates = [];
const waiters = [];
function told(update) {
  updates.push(update);
  for (const waiter of [...waiters]) {
    if (waiter.match(update)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(update);
    }
  }
}
/// The first update (already told, or to come) that `match` accepts.
function update(what, match) {
  const found = updates.find(match);
  if (found) return Promise.resolve(found);
  return within(what, new Promise((resolve) => waiters.push({ match, resolve })));
}

// How the editor answers permission requests, step by step.
let answering = 'allow';
const asked = [];
let onAsked = () => {};
/// Resolves once the editor has been asked `count` times in all.
function askedTimes(count) {
  if (asked.length >= count) return Promise.resolve();
  return within(`question ${count}`, new Promise((resolve) => {
    onAsked = () => { if (asked.length >= count) resolve(); };
  }));
}
const written = [];
let onWritten = () => {};
/// Resolves once the editor has been asked to write `count` files in all.
function writtenTimes(count) {
  if (written.length >= count) return Promise.resolve();
  return within(`write ${count}`, new Promise((resolve) => {
    onWritten = () => { if (written.length >= count) resolve(); };
  }));
}

await acp
  .client({ name: 'switchboard-e2e' })
  .onNotification(acp.methods.client.session.update, ({ params }) => told(params.update))
  .onRequest(acp.methods.client.session.requestPermission, async ({ params, signal }) => {
    asked.push(params);
    onAsked();
    if (answering === 'allow') {
      return { outcome: { outcome: 'selected', optionId: params.options.find((o) => o.kind === 'allow_once').optionId } };
    }
    // Leave it to someone else: the agent withdraws the question when they answer.
    await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    return { outcome: { outcome: 'cancelled' } };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, async ({ params }) => {
    await writeFile(params.path, params.content);
    written.push(params.path);
    onWritten();
    return {};
  })
  .onRequest(acp.methods.client.fs.readTextFile, async ({ params }) => ({ content: await readFile(params.path, 'utf8') }))
  .connectWith(stream, async (editor) => {
    const init = await within('initialize', editor.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
    }));
    assert.equal(init.protocolVersion, 1);
    assert.equal(init.agentCapabilities.loadSession, true);

    const session = await within('session/new', editor.request(acp.methods.agent.session.new, { cwd: WORKDIR, mcpServers: [] }));
    const sessionId = session.sessionId;
    assert.equal(session.modes.currentModeId, 'default');
    assert.ok(session.modes.availableModes.some((mode) => mode.id === 'plan'));
    const prompt = (text) => within(`prompt ${text}`, editor.request(acp.methods.agent.session.prompt, {
      sessionId, prompt: [{ type: 'text', text }],
    }));

    await step('a prompt streams its answer as agent message chunks', async () => {
      const { stopReason } = await prompt('STREAM something');
      assert.equal(stopReason, 'end_turn');
      const text = updates
        .filter((u) => u.sessionUpdate === 'agent_message_chunk')
        .map((u) => u.content.text)
        .join('');
      assert.equal(text, 'Streaming from Switchboard over ACP.');
      assert.ok(updates.filter((u) => u.sessionUpdate === 'agent_message_chunk').length > 1, 'in pieces');
      assert.ok(!updates.some((u) => u.sessionUpdate === 'user_message_chunk'), 'its own prompt is not echoed');
    });

    await step('an edit arrives as a diff, is asked about, allowed from the editor, and written through it', async () => {
      const { stopReason } = await prompt('EDIT the notes');
      assert.equal(stopReason, 'end_turn');
      const call = updates.find((u) => u.sessionUpdate === 'tool_call' && u.kind === 'edit');
      assert.ok(call, 'an edit tool call');
      const diff = call.content.find((c) => c.type === 'diff');
      assert.equal(diff.path, path.join(WORKDIR, 'notes.txt'));
      assert.equal(diff.oldText, 'color = 1');
      assert.equal(diff.newText, 'color = 2');
      assert.equal(asked.length, 1, 'asked once');
      assert.equal(asked[0].toolCall.toolCallId, call.toolCallId);
      await update('the edit completed', (u) => u.sessionUpdate === 'tool_call_update' && u.toolCallId === call.toolCallId && u.status === 'completed');
      assert.equal(await readFile(path.join(WORKDIR, 'notes.txt'), 'utf8'), 'color = 2\n');
      await writtenTimes(1);
      assert.deepEqual(written, [path.join(WORKDIR, 'notes.txt')], 'through the editor');
    });

    await step('a request answered elsewhere (the API) while the editor waits: withdrawn, and the editor told', async () => {
      answering = 'leave';
      const turn = prompt('TOUCH a file');
      const call = await update('the Bash call', (u) => u.sessionUpdate === 'tool_call' && u.kind === 'execute');
      await askedTimes(2);
      // Someone else answers, through the daemon's API.
      const pending = await (await fetch(`${DAEMON_URL}/api/sessions/${sessionId}/permissions`, {
        headers: { authorization: `Bearer ${DAEMON_TOKEN}` },
      })).json();
      assert.equal(pending.length, 1);
      const answered = await fetch(`${DAEMON_URL}/api/sessions/${sessionId}/permissions/${pending[0].request_id}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${DAEMON_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ behavior: 'allow', by: 'phone' }),
      });
      assert.equal(answered.status, 200);
      const note = await update('told who answered', (u) => u.sessionUpdate === 'tool_call_update' && u.toolCallId === call.toolCallId
        && (u.content ?? []).some((c) => c.content?.text?.includes('elsewhere')));
      assert.match(note.content[0].content.text, /^Allowed by phone, token admin \(api\), elsewhere/);
      const { stopReason } = await turn;
      assert.equal(stopReason, 'end_turn');
    });

    await step('a cancel interrupts the turn: it ends cancelled', async () => {
      const turn = prompt('SLOW answer');
      await update('the slow answer starts', (u) => u.sessionUpdate === 'agent_message_chunk' && u.content.text.startsWith('Slowly'));
      await editor.notify(acp.methods.agent.session.cancel, { sessionId });
      const { stopReason } = await turn;
      assert.equal(stopReason, 'cancelled');
    });

    await step('set a mode: the session says so', async () => {
      await within('set_mode', editor.request(acp.methods.agent.session.setMode, { sessionId, modeId: 'plan' }));
      await update('the mode update', (u) => u.sessionUpdate === 'current_mode_update' && u.currentModeId === 'plan');
    });

    await step('session/load replays the conversation', async () => {
      updates.length = 0;
      await within('session/load', editor.request(acp.methods.agent.session.load, { sessionId, cwd: WORKDIR, mcpServers: [] }));
      const prompts = updates.filter((u) => u.sessionUpdate === 'user_message_chunk').map((u) => u.content.text);
      assert.deepEqual(prompts, ['STREAM something', 'EDIT the notes', 'TOUCH a file', 'SLOW answer']);
      assert.ok(updates.some((u) => u.sessionUpdate === 'tool_call' && u.kind === 'edit'), 'with its calls');
    });
    console.log(`SESSION ${sessionId}`);
  });

agent.stdin.end();
agent.kill();
