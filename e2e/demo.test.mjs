// Browser test of `switchboard demo`. Started by `cargo test` (crates/cli/tests/it/demo.rs,
// test `the_demo_tour_runs_in_a_browser_without_a_login`), which runs the demo with the real
// Claude Code CLI and passes: DEMO_URL (the printed URL, with its token), CHROMIUM,
// SCREENSHOTS. The tour is taken as a newcomer would: every step by clicking.
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch } from './lib.mjs';

const { DEMO_URL: url, CHROMIUM: executablePath, SCREENSHOTS: screenshots } = process.env;

const browser = await launch(executablePath);
const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
page.setDefaultTimeout(60_000);
const problems = [];
page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
page.on('console', (message) => { if (message.type() === 'error') problems.push(`console: ${message.text()}`); });

async function step(name, run) {
  const started = Date.now();
  try {
    await run();
    console.log(`ok   ${name} (${Date.now() - started} ms)`);
  } catch (error) {
    console.log(`FAIL ${name}: ${error.stack ?? error}`);
    await page.screenshot({ path: path.join(screenshots, `demo-failure-${name.replace(/\W+/g, '-')}.png`) }).catch(() => {});
    await browser.close();
    process.exit(1);
  }
}

const transcript = () => page.locator('.transcript');

await step('the printed URL opens the tour session', async () => {
  await page.goto(url);
  await page.locator('.session-item', { hasText: 'Warm up' }).click();
  await page.waitForURL(/#\/s\//);
});

await step('the first answer streamed in, as markdown with a table and code', async () => {
  await transcript().locator('.block.text .md table').waitFor();
  await transcript().locator('.block.text .md pre code').waitFor();
});

await step('a Bash call waits for approval, and runs once approved', async () => {
  const card = transcript().locator('.tool-Bash', { hasText: 'touch notes.txt' });
  await card.locator('.permission .allow').waitFor();
  await page.screenshot({ path: path.join(screenshots, 'demo-approval.png') });
  await card.locator('.permission .allow').click();
  // The next card may already have folded this one: its result is there, shown or not.
  await card.locator('.result', { hasText: 'notes.txt' }).waitFor({ state: 'attached' });
});

await step('an Edit shows as a diff, and is approved from its card', async () => {
  const card = transcript().locator('.tool-Edit');
  await card.locator('.diff-line.del', { hasText: 'print("hello", name)' }).waitFor();
  await card.locator('.diff-line.add', { hasText: 'from Switchboard' }).waitFor();
  await card.locator('.permission .allow').click();
});

await step('a subagent nests under the card that started it', async () => {
  const card = transcript().locator('.tool-Agent, .tool-Task');
  // Once the tour moves on, the finished card folds: its nest is there, shown or not.
  await card.locator('.nest .tool-Read').waitFor({ state: 'attached' });
});

await step('a question is answered from the page', async () => {
  const choice = transcript().locator('.permission .choice', { hasText: 'Clear' });
  await choice.waitFor();
  await choice.click();
  await transcript().locator('.block.text .md', { hasText: 'That was the tour' }).waitFor();
});

await step('each turn has its cost, in the chart', async () => {
  await page.locator('.session-head .badge.state-idle').waitFor();
  await page.locator('.stats .cost-chart canvas').waitFor();
  await page.screenshot({ path: path.join(screenshots, 'demo-tour.png') });
});

await step('no errors in the page', async () => {
  assert.deepEqual(problems, []);
});

await browser.close();
