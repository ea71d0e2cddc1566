// The dry-run page in a browser. Started by `cargo test` (crates/server/tests/it/trial.rs,
// test `a_dry_run_agrees_call_by_call_with_the_replay_done_by_hand`), once its 50 sessions are
// recorded with the real CLI; it passes SWITCHBOARD_URL, SWITCHBOARD_TOKEN, CHROMIUM,
// SCREENSHOTS and CANDIDATE (the policy to try, whose report the Rust test checked).
import assert from 'node:assert/strict';
import path from 'node:path';
import { assertFits, launch, stepper } from './lib.mjs';

const { SWITCHBOARD_URL: base, SWITCHBOARD_TOKEN: token, CHROMIUM: executablePath, SCREENSHOTS: screenshots, CANDIDATE: candidate } = process.env;

const browser = await launch(executablePath);
const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
const page = await context.newPage();
page.setDefaultTimeout(60_000);
const problems = [];
page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
page.on('response', (response) => { if (response.status() >= 400) problems.push(`${response.status()} ${response.url()}`); });
page.on('console', (message) => { if (message.type() === 'error') problems.push(`console: ${message.text()}`); });
const { step, failed } = stepper({ page, screenshots, problems, prefix: 'policy-' });
const rule = (name) => page.locator('.trial-rule', { has: page.locator('.trial-rule-name', { hasText: new RegExp(`^${name.replace(/[()*]/g, '\\$&')}$`) }) });
let ok = true;

try {
  await step('the header leads to the dry-run page', async () => {
    await page.goto(`${base}/?token=${token}`);
    await page.locator('#policy-link').click();
    await page.locator('.policy-trial h1', { hasText: 'Try a policy' }).waitFor();
    assert.equal(new URL(page.url()).hash, '#/policy');
  });

  await step('a policy tried: the change at a glance, then each rule beside what happened', async () => {
    await page.locator('.trial-form textarea').fill(candidate);
    await page.locator('.trial-form button[type=submit]').click();
    const headline = page.locator('.trial-headline');
    await headline.waitFor();
    assert.equal(await headline.textContent(),
      'Over 50 calls in 50 sessions, this policy would have 4 allowed unasked that were not, 10 denied that ran, and 5 asked that ran unasked; 31 as they were.');
    const secret = rule('Read(secret.txt)');
    await secret.locator('.badge.behavior', { hasText: 'deny' }).waitFor();
    const ran = secret.locator('.trial-outcome.ran_unasked');
    assert.equal(await ran.locator('.trial-n').textContent(), '10');
    await ran.locator('summary').click();
    assert.equal(await ran.locator('.trial-calls li').count(), 10);
    await ran.locator('.trial-calls li', { hasText: 'cat secret.txt' }).first().waitFor();
    assert.match(await ran.locator('.trial-calls li').first().textContent(), /Claude Code ran it on its own/);
    const touch = rule('Bash(touch:*)');
    await touch.locator('.trial-outcome.person_allowed summary').click();
    await touch.locator('.trial-calls li', { hasText: 'allowed by token admin (api)' }).first().waitFor();
    await assertFits('the dry-run page', page);
    await page.locator('.trial-headline').evaluate((node) => node.scrollIntoView({ block: 'start' }));
    await page.screenshot({ path: path.join(screenshots, 'policy.png'), fullPage: false });
  });

  await step('a call opens its session', async () => {
    await rule('Read(secret.txt)').locator('.trial-calls a').first().click();
    await page.locator('.session-head').waitFor();
    assert.match(new URL(page.url()).hash, /^#\/s\//);
    await page.goBack();
    await page.locator('.policy-trial h1').waitFor();
  });

  await step('a policy that does not parse says why', async () => {
    await page.locator('.trial-form textarea').fill('[permissions]\nallow = ["Bash("]');
    await page.locator('.trial-form button[type=submit]').click();
    await page.locator('.trial-form .form-error', { hasText: 'policy:' }).waitFor();
    problems.splice(0); // the 400 above is expected
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
