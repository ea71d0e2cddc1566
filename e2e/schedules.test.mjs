// The Schedules page in a browser. Started by `cargo test` (crates/server/tests/it/schedules.rs,
// test `the_schedules_page_shows_next_runs_the_queue_and_each_runs_outcome`), which runs the
// daemon with the real CLI against the fake API, with a usage window used up (so every new run
// waits in the queue), a schedule whose run-now run ended, one held, one hourly, and a trigger;
// it passes SWITCHBOARD_URL, SWITCHBOARD_TOKEN, CHROMIUM, SCREENSHOTS.
import assert from 'node:assert/strict';
import path from 'node:path';
import { assertFits, launch, stepper } from './lib.mjs';

const { SWITCHBOARD_URL: base, SWITCHBOARD_TOKEN: token, CHROMIUM: executablePath, SCREENSHOTS: screenshots } = process.env;

const browser = await launch(executablePath);
const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
const page = await context.newPage();
page.setDefaultTimeout(60_000);
const problems = [];
page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
page.on('response', (response) => { if (response.status() >= 400) problems.push(`${response.status()} ${response.url()}`); });
page.on('console', (message) => { if (message.type() === 'error') problems.push(`console: ${message.text()}`); });
const { step, failed } = stepper({ page, screenshots, problems, prefix: 'schedules-' });
const card = (name) => page.locator('.schedule-card', { has: page.locator('h3', { hasText: new RegExp(`^${name}$`) }) });
let ok = true;

try {
  await step('the sidebar leads to the Schedules page', async () => {
    await page.goto(`${base}/?token=${token}`);
    await page.locator('#schedules-link').click();
    await page.locator('.schedules h1', { hasText: 'Schedules' }).waitFor();
    assert.equal(new URL(page.url()).hash, '#/schedules');
  });

  await step('each schedule shows when it runs and its next times', async () => {
    const nightly = card('nightly');
    await nightly.locator('.when', { hasText: '0 3 * * * · Europe/Paris' }).waitFor();
    assert.equal(await nightly.locator('.next time').count(), 3);
    await nightly.locator('.chip', { hasText: '≤ 50% of a window' }).waitFor();
  });

  await step('the queue shows the held run and when it will start', async () => {
    const waiting = page.locator('.queue .triage', { hasText: 'schedule watch' });
    await waiting.waitFor();
    await waiting.locator('.what', { hasText: 'five_hour is used up' }).waitFor();
    await waiting.locator('.badge', { hasText: /starts in \d+ min/ }).waitFor();
    await card('watch').locator('.waiting-run', { hasText: 'starts' }).waitFor();
  });

  await step("a run's outcome links to its session", async () => {
    const run = card('tidy').locator('a.run-chip.started');
    await run.locator('.badge', { hasText: 'exited' }).waitFor();
    await assertFits('the Schedules page', page);
    await page.screenshot({ path: path.join(screenshots, 'schedules.png') });
    await run.click();
    await page.locator('.session-head').waitFor();
    assert.match(new URL(page.url()).hash, /^#\/s\//);
    await page.locator('.session-item .origin', { hasText: 'schedule tidy' }).first().waitFor();
    await page.goBack();
    await page.locator('.schedules h1').waitFor();
  });

  await step('pause and resume: the page follows the dashboard', async () => {
    const nightly = card('nightly');
    await nightly.locator('button', { hasText: 'Pause' }).click();
    await nightly.locator('.badge.state-paused').waitFor();
    await nightly.locator('.next', { hasText: 'paused' }).waitFor();
    await card('nightly').locator('button', { hasText: 'Resume' }).click();
    await card('nightly').locator('.next time').first().waitFor();
  });

  await step('a schedule added from the form shows up, a bad one says why', async () => {
    await page.locator('details.add > summary').click();
    const form = page.locator('form.add-schedule');
    await form.locator('[name=name]').fill('weekly');
    await form.locator('[name=cron]').fill('0 9 * * MON');
    await form.locator('[name=time_zone]').fill('Mars/Olympus');
    await form.locator('[name=cwd]').fill('/tmp');
    await form.locator('[name=prompt]').fill('Weekly review');
    await form.locator('button[type=submit]').click();
    await form.locator('.form-error', { hasText: 'Mars/Olympus' }).waitFor();
    problems.splice(0); // the 400 above is expected
    await form.locator('[name=time_zone]').fill('UTC');
    await form.locator('button[type=submit]').click();
    await card('weekly').locator('.when', { hasText: '0 9 * * MON · UTC' }).waitFor();
  });

  await step('the trigger shows its webhook, and pauses', async () => {
    const ci = card('ci');
    await ci.locator('.when', { hasText: 'POST /hooks/ci' }).waitFor();
    await ci.locator('button', { hasText: 'Pause' }).click();
    await card('ci').locator('.badge.state-paused').waitFor();
    await card('ci').locator('button', { hasText: 'Resume' }).waitFor();
  });

  await step('no errors in the page', async () => {
    assert.deepEqual(problems, []);
  });
} catch (error) {
  ok = false;
} finally {
  await browser.close();
}
process.exit(ok && !failed() ? 0 : 1);
