// The Search page in a browser. Started by `cargo test` (crates/server/tests/it/search.rs,
// test `search_answers_the_questions_over_fifty_real_sessions_and_blame_finds_the_writer`),
// once its fifty real-CLI sessions are indexed; it passes SWITCHBOARD_URL, SWITCHBOARD_TOKEN,
// CHROMIUM, SCREENSHOTS, and REVIEW_SESSION: the last session that edited deploy.sh, whose
// Review shows the lines the five edits wrote.
import assert from 'node:assert/strict';
import path from 'node:path';
import { assertFits, launch, stepper } from './lib.mjs';

const { SWITCHBOARD_URL: base, SWITCHBOARD_TOKEN: token, CHROMIUM: executablePath, SCREENSHOTS: screenshots, REVIEW_SESSION: reviewed } = process.env;

const browser = await launch(executablePath);
const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
const page = await context.newPage();
page.setDefaultTimeout(60_000);
const problems = [];
page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
page.on('response', (response) => { if (response.status() >= 400) problems.push(`${response.status()} ${response.url()}`); });
page.on('console', (message) => { if (message.type() === 'error') problems.push(`console: ${message.text()}`); });
const { step, failed } = stepper({ page, screenshots, problems, prefix: 'search-' });
const search = async (query) => {
  const box = page.locator('.search-form .search-query');
  await box.fill(query);
  await box.press('Enter');
};
let ok = true;

try {
  await step('the sidebar leads to the Search page, with examples', async () => {
    await page.goto(`${base}/?token=${token}`);
    await page.locator('#search-link').click();
    await page.locator('.search-page h1', { hasText: 'Search' }).waitFor();
    assert.equal(new URL(page.url()).hash, '#/search');
    assert.equal(await page.locator('.search-page .examples li').count(), 4);
  });

  await step("the nightly schedule's denied calls: five, each saying what and who", async () => {
    await search('decision:deny schedule:nightly');
    await page.locator('.hits .hit.kind-decision').nth(4).waitFor();
    assert.equal(await page.locator('.hits .hit').count(), 5);
    const first = page.locator('.hits .hit').first();
    await first.locator('.decision-deny', { hasText: 'denied' }).waitFor();
    await first.locator('code', { hasText: 'rm -rf tmp-cache' }).waitFor();
    await first.locator('.hit-where', { hasText: 'schedule:nightly' }).waitFor();
    assert.match(decodeURIComponent(new URL(page.url()).hash), /^#\/search\?q=decision:deny schedule:nightly$/);
    await assertFits('the Search page', page);
    await page.screenshot({ path: path.join(screenshots, 'search.png') });
  });

  await step('a hit opens its session at its event', async () => {
    const first = page.locator('.hits .hit').first();
    const seq = await first.getAttribute('data-seq');
    const session = await first.getAttribute('data-session');
    await first.locator('a').click();
    await page.locator('.session-head').waitFor();
    assert.equal(new URL(page.url()).hash, `#/s/${session}?at=${seq}`);
    const found = page.locator('.transcript .found');
    await found.waitFor();
    assert.ok(Number(await found.getAttribute('data-seq')) <= Number(seq));
    assert.ok(await found.isVisible());
    await page.goBack();
    await page.locator('.hits .hit').first().waitFor();
  });

  await step('a file touched, and what a grouping adds up', async () => {
    await search('file:deploy.sh since:7d');
    // The previous query's hits stay on screen until this one's come: wait for the tenth.
    await page.locator('.hits .hit').nth(9).waitFor();
    assert.ok(await page.locator('.hits .hit').count() >= 10);
    await search('kind:turn since:30d group:project');
    await page.locator('table.groups tbody tr').nth(1).waitFor();
    assert.equal(await page.locator('table.groups tbody tr').count(), 2);
    await page.locator('.summary', { hasText: /2 groups, \$[\d.]+ in all/ }).waitFor();
    await page.screenshot({ path: path.join(screenshots, 'search-groups.png') });
  });

  await step("a line in Review says who wrote it, and opens that session at the call", async () => {
    await page.goto(`${base}/#/s/${reviewed}`);
    await page.locator('.session-head').waitFor();
    await page.locator('.session-tabs .review-open').click();
    const line = page.locator('.review-file', { hasText: 'deploy.sh' }).locator('.line.add', { hasText: 'echo deployed by edit 3' });
    await line.click();
    await page.getByRole('button', { name: 'Who wrote this?' }).click();
    const answer = page.locator('.line-comment .blame');
    await answer.locator('a', { hasText: 'DEPLOY-3 please' }).waitFor();
    await answer.getByText(/with Edit \(event \d+/).waitFor();
    await answer.getByText('in the turn of “DEPLOY-3 please”').waitFor();
    await page.screenshot({ path: path.join(screenshots, 'blame.png') });
    await answer.locator('a').click();
    await page.locator('.transcript .found').waitFor();
    assert.match(new URL(page.url()).hash, /\?at=\d+$/);
  });

  await step('a query that does not read says why', async () => {
    await page.goto(`${base}/#/search`);
    await page.locator('.search-page h1').waitFor();
    await search('colour:red');
    await page.locator('.results .form-error', { hasText: 'colour: is not a key' }).waitFor();
    problems.splice(0); // the 400 above is expected
  });

  assert.deepEqual(problems, [], 'the page reported no error');
} catch (error) {
  ok = false;
} finally {
  await browser.close();
}
if (!ok || failed()) process.exit(1);
