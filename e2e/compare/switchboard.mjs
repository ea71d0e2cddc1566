// Switchboard's half of the side-by-side (docs/comparison.md): `switchboard serve` with the real
// CLI against `switchboard fake-api` on the scenario of scenario.mjs, driven through the three
// prompts in the web UI, with screenshots of each point of the comparison at 1,400 × 900 and
// 390 × 844 (`switchboard-<point>.png`, `switchboard-phone-<point>.png`).
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { freePort, start, stop } from './procs.mjs';
import { makeProject, PROMPTS } from './scenario.mjs';

const DESK = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };
const WAIT = 60_000;

export async function driveSwitchboard({ browser, workdir, screenshots, switchboard, claude }) {
  const project = path.join(workdir, 'shop');
  const script = path.join(workdir, 'replies.json');
  fs.writeFileSync(script, JSON.stringify(makeProject(project)));
  const home = path.join(workdir, 'home');
  fs.mkdirSync(home, { recursive: true });
  const started = [];
  const context = await browser.newContext({ viewport: DESK });
  try {
    const said = await start(started, switchboard, ['fake-api', '--script', script, '--json'], {}, (out) => out.includes('"url"'));
    const { url } = JSON.parse(said.split('\n').find((line) => line.includes('"url"')));
    const port = await freePort();
    const token = crypto.randomBytes(16).toString('hex');
    const env = {
      PATH: process.env.PATH, HOME: home, SWITCHBOARD_TOKEN: token,
      ANTHROPIC_BASE_URL: url, ANTHROPIC_API_KEY: 'comparison', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1',
    };
    await start(started, switchboard, ['serve', '--listen', `127.0.0.1:${port}`, '--data-dir', path.join(workdir, 'data'), '--claude', claude],
      { env }, (out) => out.includes('open:'));
    const base = `http://127.0.0.1:${port}`;
    const page = await context.newPage();
    page.setDefaultTimeout(WAIT);
    const shot = (name, options = {}) => page.screenshot({ path: path.join(screenshots, `switchboard-${name}.png`), ...options });
    const phoneShot = async (name) => {
      await page.setViewportSize(PHONE);
      await page.waitForTimeout(200); // the layout settles (a resize has no event to wait on)
      await shot(`phone-${name}`);
      await page.setViewportSize(DESK);
    };
    await page.goto(`${base}/?token=${token}`);

    // Starting a session: the form, filled as a new user would.
    await page.goto(`${base}/#/new`);
    await page.locator('input[name=cwd]').fill(project);
    await page.locator('textarea[name=prompt]').fill(PROMPTS.run);
    await shot('start');
    await page.locator('.new-session button[type=submit]').click();
    const transcript = page.locator('.transcript');

    // Run the tests: Bash waits for a person.
    const bash = transcript.locator('.tool-Bash').first();
    await bash.locator('.permission .allow').waitFor();
    await shot('approval');
    await phoneShot('approval');
    // The home page's triage while it waits.
    await page.goto(`${base}/#/`);
    await page.locator('.triage.waiting').waitFor();
    await shot('triage');
    await phoneShot('list');
    await page.goBack();
    await bash.locator('.permission .allow').click();
    await transcript.locator('.msg.assistant', { hasText: 'One test fails' }).waitFor();

    // Fix it: Read, Edit (asked), the tests again (asked).
    const send = async (text) => {
      await page.locator('.composer-input').fill(text);
      await page.locator('.composer-input').press('Control+Enter');
    };
    await send(PROMPTS.fix);
    const edit = transcript.locator('.tool-Edit').first();
    await edit.locator('.permission .allow').waitFor();
    await shot('edit-approval');
    await edit.locator('.permission .allow').click();
    const again = transcript.locator('.tool-Bash', { hasText: 'again' });
    await again.locator('.permission .allow').waitFor();
    await again.locator('.permission .allow').click();
    await transcript.locator('.msg.assistant', { hasText: 'the test passes' }).waitFor();
    await shot('tool-cards');

    // Explain: a long markdown answer.
    await send(PROMPTS.explain);
    await transcript.locator('.md h3', { hasText: 'What to check next' }).waitFor();
    await shot('markdown');
    await phoneShot('chat');

    // Review: the change against HEAD, read-only (a session without a worktree).
    await page.locator('.session-tabs .review-open').click();
    await page.locator('.review-file[data-path="cart.py"]').waitFor();
    await shot('review');
    await phoneShot('review');
    // Files at the line an answer names.
    await page.locator('.session-tabs .chat-open').click();
    await transcript.locator('.path-link.inline', { hasText: 'cart.py:8' }).last().click();
    await page.locator('.files-panel .line-no.marked').waitFor();
    await shot('files');
    await page.locator('.session-tabs .shell-open').click();
    await page.locator('.shell-panel .xterm-rows', { hasText: /\S/ }).waitFor();
    await shot('terminal');
    await page.locator('.session-tabs .chat-open').click();
  } finally {
    await context.close();
    for (const child of started.reverse()) await stop(child);
  }
}
