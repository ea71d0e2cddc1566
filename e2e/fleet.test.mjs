// The web UI of one node approving a session another node runs (several daemons on one
// PostgreSQL and one NATS). Started by `cargo test` (crates/server/tests/it/bus.rs, test
// `a_nodes_web_ui_approves_a_session_another_node_runs`), which runs two daemons, starts a
// session on node a whose Bash call waits for a person, and passes: SWITCHBOARD_URL and
// SWITCHBOARD_TOKEN (node b's), SESSION (the session's id), CWD (a directory both run in),
// CHROMIUM, SCREENSHOTS.
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, stepper } from './lib.mjs';

const { SWITCHBOARD_URL: base, SWITCHBOARD_TOKEN: token, SESSION: id, CWD: cwd,
  CHROMIUM: executablePath, SCREENSHOTS: screenshots } = process.env;
const TIMEOUT = 60_000;

const browser = await launch(executablePath);
const page = await (await browser.newContext({ viewport: { width: 1400, height: 900 } })).newPage();
page.setDefaultTimeout(TIMEOUT);
const { step, failed } = stepper({ page, screenshots });

try {
await step("node b's list shows node a's session, waiting, with its node", async () => {
  await page.goto(`${base}/?token=${token}`);
  const item = page.locator('.session-item', { hasText: 'FLEET' });
  await item.waitFor();
  assert.equal(await item.locator('.node').textContent(), 'on a');
  await page.locator('.session-item.state-waiting', { hasText: 'FLEET' }).waitFor();
});

await step("approve node a's Bash call from node b's page", async () => {
  await page.goto(`${base}/#/s/${id}`);
  await page.locator('.session-head .session-title', { hasText: 'on a ·' }).waitFor();
  // Its diff, files and terminal are on node a's machine: not offered here (the tabs are there,
  // those three hidden).
  await page.locator('.session-tabs .chat-open').waitFor();
  for (const tab of ['.review-open', '.files-open', '.shell-open']) {
    assert.equal(await page.locator(`.session-tabs ${tab}`).count(), 1, tab);
    assert.equal(await page.locator(`.session-tabs ${tab}`).isHidden(), true, tab);
  }
  const card = page.locator('.transcript .tool-Bash', { hasText: 'touch fleet.txt' });
  await card.locator('.permission .allow').waitFor();
  await page.screenshot({ path: path.join(screenshots, 'fleet-approve-on-another-node.png') });
  await card.locator('.permission .allow').click();
  await card.locator('.decision', { hasText: 'Allowed by' }).waitFor();
  // Live from node a, over the bus: the call's output, then the answer.
  await card.locator('.result', { hasText: 'FLEET_MARK' }).waitFor();
  await page.locator('.transcript').getByText('Done on node a.').waitFor();
  await page.locator('.session-head .badge.state-idle').waitFor();
});

await step("node b's new-session form starts a session on node a", async () => {
  await page.goto(`${base}/#/new`);
  const choice = page.locator('.new-session .node-choice');
  await choice.waitFor();
  const options = await choice.locator('option').allTextContents();
  assert.equal(options.length, 3, options.join(' | '));
  // Its capacity is its --max-running (32 by default) when that is lower than --capacity.
  assert.match(options[1], /^a · Claude Code 2\.1\.330 · 1\/32 running$/);
  assert.match(options[2], /^b · Claude Code 2\.1\.330 · 0\/32 running · this node$/);
  await page.fill('.new-session [name=cwd]', cwd);
  await page.fill('.new-session [name=prompt]', 'PLACED by the form');
  await choice.locator('select').selectOption('a');
  await page.screenshot({ path: path.join(screenshots, 'fleet-new-session-on-a-node.png') });
  await page.locator('.new-session button[type=submit]').click();
  await page.locator('.session-head .session-title', { hasText: 'on a ·' }).waitFor();
  await page.locator('.transcript').getByText('Placed on node a.').waitFor();
});

} catch {
  // The step said what failed.
} finally {
  await browser.close();
}
process.exit(failed() ? 1 : 0);
