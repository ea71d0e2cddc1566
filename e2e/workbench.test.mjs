// The workbench on a session long enough to scroll, at a desk (1,400 × 900) and on a phone
// (390 × 844). Started by `cargo test` (crates/server/tests/it/workbench_ui.rs, test
// `the_workbench_on_a_session_long_enough_to_scroll`), which runs the daemon with the real CLI
// against the fake API and passes SWITCHBOARD_URL, SWITCHBOARD_TOKEN, API_TOKEN, CHROMIUM,
// SCREENSHOTS, REPO (a git repository with src/app.py committed) and FAKE_API_URL (its
// POST /_fake/release lets a held answer finish).
import assert from 'node:assert/strict';
import path from 'node:path';
import { assertFits, launch, stepper } from './lib.mjs';

const { SWITCHBOARD_URL: base, SWITCHBOARD_TOKEN: token, API_TOKEN: apiToken, REPO: repo, FAKE_API_URL: fake,
  CHROMIUM: executablePath, SCREENSHOTS: screenshots } = process.env;
const TIMEOUT = 60_000;
const DESK = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };
const headers = { authorization: `Bearer ${apiToken}`, 'content-type': 'application/json' };

const browser = await launch(executablePath);
const context = await browser.newContext({ viewport: DESK });
const page = await context.newPage();
page.setDefaultTimeout(TIMEOUT);
const problems = [];
page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
page.on('console', (message) => { if (message.type() === 'error') problems.push(`console: ${message.text()}`); });

const { step, failed: stepFailed } = stepper({ page, screenshots, problems, prefix: 'workbench-' });
let failed = false;
const shot = (name, target = page) => target.screenshot({ path: path.join(screenshots, name) });
const transcript = () => page.locator('.transcript');
const tabs = () => page.locator('.session-tabs');
const clearToasts = () => page.evaluate(() => document.querySelectorAll('.toast').forEach((toast) => toast.remove()));

/// Runs `check` at a desk and on a phone (in that order), leaving the page at a desk.
async function atBothSizes(check) {
  for (const [size, name] of [[DESK, 'desk'], [PHONE, 'phone']]) {
    await page.setViewportSize(size);
    await check(size, name);
  }
  await page.setViewportSize(DESK);
}

/// `panel` has the transcript's place: at least half the window high, the transcript hidden,
/// its tab marked, its Close within the window.
async function takesThePlace(panel, tab, size, name) {
  await panel.locator('.close').waitFor();
  const box = await panel.boundingBox();
  assert.ok(box && box.height >= size.height * 0.5, `${name} at ${size.width}: ${box?.height} px high`);
  assert.equal(await transcript().isVisible(), false, `${name} takes the transcript's place`);
  const close = await panel.locator('.close').first().boundingBox();
  assert.ok(close && close.y >= 0 && close.y + close.height <= size.height && close.x + close.width <= size.width, `${name}'s Close is in reach`);
  if (tab) assert.equal(await tabs().locator(tab).getAttribute('aria-selected'), 'true', `${name}'s tab is marked`);
}

/// Whether `locator`'s element is within the window now.
const inSight = (locator) => locator.evaluate((node) => {
  const box = node.getBoundingClientRect();
  return box.bottom > 0 && box.top < innerHeight && box.height > 0;
});

let session;
try {
  await step('a long session in a repository: the answer scrolls, an edit and its read are on the page', async () => {
    await page.goto(`${base}/?token=${token}`);
    session = await (await fetch(`${base}/api/sessions`, {
      method: 'POST', headers,
      body: JSON.stringify({ cwd: repo, prompt: 'LONG please', policy: '[permissions]\nallow = ["Read", "Edit"]\nask = ["Bash(touch:*)"]\n' }),
    })).json();
    assert.ok(session.id, JSON.stringify(session));
    await page.goto(`${base}/#/s/${session.id}`);
    await transcript().locator('.md h2', { hasText: 'Part 30' }).waitFor();
    const input = page.locator('.composer-input');
    await input.fill('FIX the value');
    await input.press('Control+Enter');
    await transcript().locator('.md h2', { hasText: 'Fixed' }).waitFor();
    const tall = await transcript().evaluate((node) => node.scrollHeight / node.clientHeight);
    assert.ok(tall > 2, `the transcript is ${tall.toFixed(1)} windows high`);
    // No blank gap after a tool card: whatever follows it (a card, a paragraph, a heading, the
    // turn's end) is close below.
    const spaceAfterCards = () => page.evaluate(() => {
      const shown = [...document.querySelectorAll('.transcript .block, .transcript .turn-end, .transcript .msg.user')]
        .filter((node) => node.getBoundingClientRect().height > 0);
      return shown.filter((node) => node.matches('.tool')).map((card) => {
        const bottom = card.getBoundingClientRect().bottom;
        const next = shown.find((node) => !card.contains(node) && !node.contains(card) && node.getBoundingClientRect().top >= bottom - 1);
        return next ? Math.round(next.getBoundingClientRect().top - bottom) : 0;
      });
    });
    await atBothSizes(async (size, name) => {
      const gaps = await spaceAfterCards();
      assert.ok(gaps.length >= 3 && gaps.every((gap) => gap < 30), `the space after each card (${name}): ${JSON.stringify(gaps)}`);
    });
    // Beside the transcript at a desk, the cost chart's axes fit their labels.
    await page.locator('.stats .cost-chart canvas').waitFor();
    const axes = await page.evaluate(() => {
      const { chart } = window.__switchboard.view;
      const ruler = document.createElement('canvas').getContext('2d');
      ruler.font = '11px system-ui, sans-serif';
      return chart.axes.slice(1).map((axis) => ({ size: axis._size, labels: (axis._values ?? []).length, widest: Math.max(0, ...(axis._values ?? []).map((v) => ruler.measureText(String(v)).width)) }));
    });
    assert.ok(axes.length === 2 && axes.every(({ size, labels, widest }) => labels > 0 && widest > 0 && size >= widest + 15), `axes at a desk: ${JSON.stringify(axes)}`);
    await shot('session-long.png');
  });

  await step('tabs: Review, Files and Terminal take the transcript\'s place at both sizes; Chat brings it back', async () => {
    await atBothSizes(async (size, name) => {
      for (const [tab, panel] of [['.review-open', '.review'], ['.files-open', '.files-panel'], ['.shell-open', '.shell-panel']]) {
        await tabs().locator(tab).click();
        await takesThePlace(page.locator(panel), tab, size, `${panel} (${name})`);
        // The shell draws its prompt in the panel.
        if (panel === '.shell-panel') await page.locator('.shell-panel .xterm-rows', { hasText: /\S/ }).waitFor();
        // Icons on every tab.
        assert.equal(await tabs().locator(`${tab} svg.icon`).count(), 1);
      }
      await tabs().locator('.chat-open').click();
      await transcript().waitFor();
      assert.equal(await page.locator('.review, .files-panel, .shell-panel').count(), 0, 'Chat closes every panel');
      assert.equal(await tabs().locator('.chat-open').getAttribute('aria-selected'), 'true');
    });
  });

  await step('a session without a worktree: its repository\'s diff, read-only; the edit\'s counts open it at the file', async () => {
    const card = transcript().locator('.tool-Edit').last();
    await card.locator('.tool-head').scrollIntoViewIfNeeded();
    const counts = card.locator('.tool-head .diffstat');
    assert.equal(await counts.textContent(), '+1 −1');
    await atBothSizes(async (size, name) => {
      await tabs().locator('.chat-open').click();
      await counts.scrollIntoViewIfNeeded();
      await counts.click();
      const review = page.locator('.review');
      const file = review.locator('.review-file[data-path="src/app.py"]');
      await file.waitFor();
      await takesThePlace(review, '.review-open', size, `Review from an edit (${name})`);
      assert.ok(await inSight(file.locator('summary')), 'Review opened at the file');
      assert.match(await review.locator('.review-head').textContent(), /5 files changed in .*shop on main, since [0-9a-f]{8}/);
      await review.locator('.read-only', { hasText: 'Read-only' }).waitFor();
      assert.equal(await review.locator('.commit, .merge, .discard, .push').count(), 0, 'no commit or merge without a worktree');
      await file.locator('.line.add', { hasText: 'value = 2' }).waitFor();
      await file.locator('.line.del', { hasText: 'value = 1' }).waitFor();
      assert.equal(await file.locator('.line.add .no').textContent(), '250', 'the new file\'s line number');
      assert.ok(await review.locator('.review-file').count() >= 5, 'other files come first');
      await assertFits(`Review (${name})`, page);
      if (name === 'desk') await shot('review-directory.png');
    });
    await tabs().locator('.chat-open').click();
  });

  await step('paths open Files at their line, with line numbers: a Read card\'s and `path:line` in an answer', async () => {
    await atBothSizes(async (size, name) => {
      await tabs().locator('.chat-open').click();
      // The partial Read (lines 248 to 252): its path opens Files at line 248.
      const read = transcript().locator('.tool-Read', { hasText: 'lines 248–252' });
      // Folded (it is not the newest card): opened.
      if (await read.evaluate((node) => node.classList.contains('collapsed'))) await read.locator('.tool-head').click();
      const link = read.locator('.tool-path .path-link');
      assert.equal(await link.textContent(), 'src/app.py:248');
      await link.click();
      const panel = page.locator('.files-panel');
      await takesThePlace(panel, '.files-open', size, `Files from a card (${name})`);
      const marked = panel.locator('.line-no.marked');
      await marked.waitFor();
      assert.equal(await marked.textContent(), '248');
      assert.ok(await inSight(marked), 'the line is in sight');
      assert.equal(await panel.locator('.gutter .line-no').count(), 300, 'a number for every line');
      assert.equal(await inSight(panel.locator('.line-no').first()), false, 'scrolled to it: the first line is out of sight');
      assert.equal(await panel.locator('.file-view-head code').textContent(), 'src/app.py');
      // The answer's `src/app.py:250`: Files at line 250.
      await tabs().locator('.chat-open').click();
      const inAnswer = transcript().locator('.msg.assistant', { hasText: 'is 2 now' }).locator('.path-link.inline');
      await inAnswer.scrollIntoViewIfNeeded();
      assert.equal(await inAnswer.textContent(), 'src/app.py:250');
      // An address is no file.
      const first = transcript().locator('.msg.assistant', { hasText: 'It is served on' });
      assert.deepEqual(await first.locator('.path-link').allTextContents(), ['src/app.py:250', 'src/app.py']);
      await inAnswer.click();
      await panel.locator('.line-no.marked', { hasText: /^250$/ }).waitFor();
      assert.ok(await inSight(panel.locator('.line-no.marked')), 'line 250 is in sight');
      const band = await panel.locator('.line-band').boundingBox();
      const mark = await panel.locator('.line-no.marked').boundingBox();
      assert.ok(Math.abs(band.y - mark.y) < 4, `the band is across line 250 (${band.y} vs ${mark.y})`);
      await assertFits(`Files at a line (${name})`, page);
      if (name === 'desk') await shot('files-at-line.png', page.locator('.session'));
      if (name === 'phone') await shot('phone-files.png');
    });
    await tabs().locator('.chat-open').click();
  });

  await step('on a phone: a wide table scrolls sideways in its own box, its words whole', async () => {
    await page.setViewportSize(PHONE);
    const wrap = transcript().locator('.table-wrap').first();
    await wrap.scrollIntoViewIfNeeded();
    const { scrolls, broken } = await wrap.evaluate((box) => {
      const broken = [];
      // Each word of each cell on one line (a cell may wrap between words).
      for (const cell of box.querySelectorAll('td, th')) {
        const text = cell.firstChild;
        if (!text || text.nodeType !== Node.TEXT_NODE) continue;
        for (const word of text.data.matchAll(/\S+/g)) {
          const range = document.createRange();
          range.setStart(text, word.index);
          range.setEnd(text, word.index + word[0].length);
          const lines = new Set([...range.getClientRects()].map((rect) => Math.round(rect.top)));
          if (lines.size > 1) broken.push(word[0]);
        }
      }
      return { scrolls: box.scrollWidth > box.clientWidth, broken };
    });
    assert.ok(scrolls, 'the table is wider than the phone, and scrolls in its box');
    assert.deepEqual(broken, [], 'no word broken mid-cell');
    await assertFits('a wide table on a phone', page);
    await shot('phone-table.png');
    await page.setViewportSize(DESK);
  });

  await step('the phone\'s header: one row; model and mode in a settings sheet; the cost opens the chart, gauge and models', async () => {
    await page.setViewportSize(PHONE);
    await transcript().waitFor();
    const parts = await Promise.all(['.back', 'h1', '.badge', '.cost', '.menu summary'].map((part) => page.locator(`.session-head ${part}`).boundingBox()));
    const middle = (box) => box.y + box.height / 2;
    assert.ok(parts.every((box) => box && Math.abs(middle(box) - middle(parts[0])) < 8 && box.x + box.width <= PHONE.width), `one row: ${JSON.stringify(parts)}`);
    const head = await page.locator('.session-head').boundingBox();
    assert.ok(head.height < 60, `the header is ${head.height} px high`);
    assert.equal(await page.locator('.session-head select.model').isVisible(), false, 'the model is in the sheet');
    assert.equal(await page.locator('.session-head .interrupt').isVisible(), false, 'no Stop while no turn runs');
    await page.screenshot({ path: path.join(screenshots, 'phone-header.png'), clip: { x: 0, y: 0, width: PHONE.width, height: 120 } });
    await page.locator('.session-head .menu summary').click();
    await page.locator('.menu-items .settings-open').click();
    const sheet = page.locator('dialog.sheet');
    await sheet.locator('select.model').waitFor();
    await sheet.locator('select.mode').waitFor();
    await assertFits('the settings sheet', page);
    await shot('phone-settings.png');
    await sheet.locator('select.mode').selectOption('acceptEdits');
    await page.locator('.toast', { hasText: 'Permission mode set to acceptEdits' }).waitFor();
    await sheet.getByRole('button', { name: 'Done' }).click();
    await sheet.waitFor({ state: 'detached' });
    const stored = await (await fetch(`${base}/api/sessions/${session.id}`, { headers })).json();
    assert.equal(stored.permission_mode, 'acceptEdits');
    await page.locator('.session-head .cost').click();
    const stats = page.locator('.stats-panel');
    await takesThePlace(stats, null, PHONE, 'the cost panel');
    await stats.locator('.cost-chart canvas').waitFor();
    await stats.locator('.gauge').waitFor();
    await stats.locator('.models td', { hasText: 'claude' }).first().waitFor();
    // The account's usage windows, as Claude Code reported them on the long answer.
    const five = stats.locator('.usage-window[data-window="five_hour"]');
    await five.waitFor();
    // (A reset after midnight names its day: "resets on Mon, Nov 30 at 12:22 AM".)
    assert.match(await five.textContent(), /^5-hour82% · near its limit.*resets (on .+ )?at \d\d?:\d\d/);
    assert.ok((await five.getAttribute('class')).includes('allowed_warning'));
    assert.match(await stats.locator('.usage-window[data-window="seven_day"]').textContent(), /^7-day40%/);
    // Each side axis is wide enough for its widest label (with its ticks and their gap).
    const axes = await page.evaluate(() => {
      const { chart } = window.__switchboard.view;
      const ruler = document.createElement('canvas').getContext('2d');
      ruler.font = '11px system-ui, sans-serif';
      return chart.axes.slice(1).map((axis) => ({ size: axis._size, labels: (axis._values ?? []).length, widest: Math.max(0, ...(axis._values ?? []).map((v) => ruler.measureText(String(v)).width)) }));
    });
    assert.ok(axes.length === 2 && axes.every(({ size, labels, widest }) => labels > 0 && widest > 0 && size >= widest + 15), `axes wide enough for their labels: ${JSON.stringify(axes)}`);
    await assertFits('the cost panel', page);
    await shot('phone-cost.png');
    await stats.locator('.close').click();
    await transcript().waitFor();
    // Back to asking: the next step's rule asks, and the mode must not allow it on its own.
    await page.locator('.session-head .menu summary').click();
    await page.locator('.menu-items .settings-open').click();
    await sheet.locator('select.mode').selectOption('default');
    await page.locator('.toast', { hasText: 'Permission mode set to default' }).waitFor();
    await sheet.getByRole('button', { name: 'Done' }).click();
    await page.setViewportSize(DESK);
  });

  await step('an approval in a person\'s words: the rule that asks, who started the turn and its origin; Deny from the waiting bar', async () => {
    await clearToasts();
    const input = page.locator('.composer-input');
    await input.fill('ASKBASH now');
    await input.press('Control+Enter');
    const card = transcript().locator('.tool-Bash', { hasText: 'touch asked.txt' });
    await card.locator('.permission .allow').waitFor();
    await atBothSizes(async (size, name) => {
      await card.locator('.permission .allow').scrollIntoViewIfNeeded();
      const words = await card.locator('.permission').textContent();
      assert.doesNotMatch(words, /no policy rule|asking a person/);
      assert.equal(await card.locator('.permission-reason').textContent(), 'Your policy\'s rule Bash(touch:*) asks you.');
      assert.equal(await card.locator('.permission-started').textContent(), 'Turn started by you in the web UI · origin person');
      // The small print is small.
      const [reason, started] = await Promise.all(['.permission-reason', '.permission-started'].map((part) => card.locator(part).evaluate((node) => parseFloat(getComputedStyle(node).fontSize))));
      assert.ok(started < reason, `who started the turn in smaller print (${started} px) than why (${reason} px)`);
      await assertFits(`an approval (${name})`, page);
      // While a turn runs, Stop is there, and the header is still one row with room for the title.
      const parts = await Promise.all(['.session-title', '.badge', '.cost', '.interrupt', '.menu summary'].map((part) => page.locator(`.session-head ${part}`).boundingBox()));
      const middle = (box) => box.y + box.height / 2;
      assert.ok(parts.every((box) => box && Math.abs(middle(box) - middle(parts[0])) < 8 && box.x + box.width <= size.width), `one row during a turn (${name}): ${JSON.stringify(parts)}`);
      assert.ok(parts[0].width >= 90, `room for the title (${name}): ${parts[0].width} px`);
      assert.equal(await page.locator('.session-head .interrupt').textContent(), 'Stop');
      await shot(name === 'desk' ? 'approval-words.png' : 'phone-approval-words.png', name === 'desk' ? card : page);
    });
    // Review open: the bar says what waits, and answers it.
    await tabs().locator('.review-open').click();
    const bar = page.locator('.waiting-bar');
    await bar.waitFor();
    assert.match(await bar.textContent(), /Claude wants to run touch asked\.txt/);
    await bar.locator('.deny').click();
    await bar.waitFor({ state: 'hidden' });
    await tabs().locator('.chat-open').click();
    await card.locator('.decision', { hasText: 'Denied by you' }).waitFor();
    await transcript().locator('.msg.assistant', { hasText: 'Not made, as you said.' }).waitFor();
    // On a phone, with Files open: Allow from the bar, its buttons on one row on the screen.
    await page.setViewportSize(PHONE);
    await input.fill('ASKPHONE now');
    await input.press('Control+Enter');
    const asked = transcript().locator('.tool-Bash', { hasText: 'phone-asked.txt' });
    await asked.locator('.permission .allow').waitFor({ state: 'attached' });
    await tabs().locator('.files-open').click();
    await bar.waitFor();
    assert.match(await bar.textContent(), /Claude wants to run touch phone-asked\.txt/);
    const row = await Promise.all(['.allow', '.deny', '.show'].map((button) => bar.locator(button).boundingBox()));
    assert.ok(row.every((box) => Math.abs(box.y - row[0].y) < 2 && box.x + box.width <= PHONE.width), `the bar's buttons: ${JSON.stringify(row)}`);
    await assertFits('the waiting bar over Files on a phone', page);
    await bar.locator('.allow').click();
    await bar.waitFor({ state: 'hidden' });
    await tabs().locator('.chat-open').click();
    await asked.locator('.decision', { hasText: 'Allowed by you' }).waitFor();
    await transcript().locator('.msg.assistant', { hasText: 'Made it from the bar.' }).waitFor();
    await page.setViewportSize(DESK);
  });

  await step('a request Claude Code says only a person may approve: its words, no Allow always, no Allow on the bar', async () => {
    const input = page.locator('.composer-input');
    await input.fill('ASKRM now');
    await input.press('Control+Enter');
    const card = transcript().locator('.tool-Bash', { hasText: 'nonexistent-switchboard' });
    await card.locator('.permission .allow').waitFor();
    await atBothSizes(async (size, name) => {
      await card.locator('.permission .allow').scrollIntoViewIfNeeded();
      assert.match(await card.locator('.permission-reason').textContent(), /^Claude Code: Dangerous rm operation/);
      assert.match(await card.locator('.permission-person').textContent(), /safety check of Claude Code's asks a person: no policy, grant or notification button answers this one/);
      assert.equal(await card.locator('.permission .always').count(), 0, 'no Allow always');
      assert.match(await card.locator('.always-rule').textContent(), /once at a time/);
      await assertFits(`a person-only approval (${name})`, page);
      await shot(name === 'desk' ? 'approval-person-only.png' : 'phone-approval-person-only.png', name === 'desk' ? card : page);
    });
    // Out of sight, the bar offers Deny and Show, not Allow.
    await tabs().locator('.review-open').click();
    const bar = page.locator('.waiting-bar');
    await bar.waitFor();
    assert.ok(await bar.locator('.allow').isHidden(), 'no Allow on the bar');
    assert.ok(await bar.locator('.deny').isVisible() && await bar.locator('.show').isVisible());
    await bar.locator('.show').click();
    await card.locator('.permission .deny').click();
    await card.locator('.decision', { hasText: 'Denied by you' }).waitFor();
    await transcript().locator('.msg.assistant', { hasText: 'Left it alone.' }).waitFor();
  });

  await step('an answer streams at both sizes: Copy only once its text is whole', async () => {
    await atBothSizes(async (size, name) => {
      const input = page.locator('.composer-input');
      await input.fill(`HOLD at the ${name}`);
      await input.press('Control+Enter');
      const streaming = transcript().locator('.block.text.streaming', { hasText: 'This answer' }).last();
      await streaming.waitFor();
      const message = streaming.locator('xpath=ancestor::div[contains(@class,"msg")][1]');
      assert.equal(await message.locator('.msg-actions .copy').count(), 0, `no Copy while it streams (${name})`);
      assert.equal(await page.locator('.session-head .interrupt').isVisible(), true, `Stop while it streams (${name})`);
      await fetch(`${fake}/_fake/release`, { method: 'POST' });
      const done = transcript().locator('.block.text:not(.streaming)', { hasText: 'lets it finish' }).last();
      await done.waitFor();
      await done.locator('xpath=ancestor::div[contains(@class,"msg")][1]').locator('.msg-actions .copy').waitFor({ state: 'attached' });
      await page.locator('.session-head .interrupt').waitFor({ state: 'hidden' });
    });
  });

  await step('the list: a worktree session under its repository with its branch; the tiles say what they count', async () => {
    const made = await (await fetch(`${base}/api/sessions`, { method: 'POST', headers, body: JSON.stringify({ cwd: repo, worktree: true }) })).json();
    assert.ok(made.id, JSON.stringify(made));
    await page.goto(`${base}/#/`);
    const group = page.locator('.group-head', { hasText: 'shop' });
    await group.waitFor();
    assert.equal(await page.locator('.group-head', { hasText: 'shop' }).count(), 1, 'one group for the repository');
    assert.equal(await group.locator('.count').textContent(), '2');
    const branch = page.locator('.session-item.in-worktree .branch');
    await branch.waitFor();
    assert.equal(await branch.textContent(), `switchboard/${made.id.slice(0, 8)}`);
    // The worktree session is listed right after the repository's own.
    const order = await page.locator('.session-list li').evaluateAll((rows) => rows.map((row) => row.className));
    const at = order.findIndex((name) => name.includes('group-head') === false && name.includes('in-worktree'));
    assert.ok(order[at - 2]?.includes('group-head') && !order[at - 1].includes('in-worktree'), JSON.stringify(order));
    const tiles = await page.locator('.overview .tile .label').allTextContents();
    assert.deepEqual(tiles, ['waiting for you', 'working now', 'open and idle, ready for a message', 'spent in all']);
    await shot('session-list-grouped.png');
    // On a phone, the list is the page: the same groups, within the screen.
    await page.setViewportSize(PHONE);
    await branch.waitFor();
    assert.equal(await page.locator('.group-head', { hasText: 'shop' }).count(), 1);
    const row = await page.locator('.session-item.in-worktree').boundingBox();
    assert.ok(row.x + row.width <= PHONE.width, `the worktree session fits: ${JSON.stringify(row)}`);
    await assertFits('the list on a phone', page);
    await shot('phone-list-grouped.png');
    await page.setViewportSize(DESK);
    // Its Review: the worktree's actions, Discard set apart as the danger it is, at both sizes.
    await page.goto(`${base}/#/s/${made.id}`);
    await atBothSizes(async (size, name) => {
      await tabs().locator('.review-open').click();
      const discard = page.locator('.review .discard');
      await discard.waitFor();
      assert.match(await discard.getAttribute('class'), /\bdanger\b/, `Discard is marked as a danger (${name})`);
      const [commit, fastForward, box] = await Promise.all([page.locator('.review .commit').boundingBox(), page.locator('.review .fast-forward').boundingBox(), discard.boundingBox()]);
      assert.ok(commit && fastForward && box.x + box.width <= size.width, `the actions are on the screen (${name})`);
      const colour = await discard.evaluate((node) => getComputedStyle(node).color);
      const plain = await page.locator('.review .merge').evaluate((node) => getComputedStyle(node).color);
      assert.notEqual(colour, plain, `Discard is drawn apart from Merge (${name})`);
      await tabs().locator('.chat-open').click();
    });
  });

  await step('a token that may only watch: the answer\'s code and the cards\' paths stay, as text', async () => {
    const made = await (await fetch(`${base}/api/tokens`, { method: 'POST', headers, body: JSON.stringify({ name: 'watcher', scope: 'read' }) })).json();
    const watcher = await browser.newContext({ viewport: PHONE });
    const tab = await watcher.newPage();
    tab.setDefaultTimeout(TIMEOUT);
    tab.on('pageerror', (error) => problems.push(`watcher page: ${error.message}`));
    await tab.goto(`${base}/?token=${made.token}`);
    await tab.goto(`${base}/#/s/${session.id}`);
    const answer = tab.locator('.msg.assistant', { hasText: 'is 2 now' });
    await answer.locator('code', { hasText: 'src/app.py:250' }).waitFor();
    assert.equal(await answer.locator('.path-link').count(), 0, 'no link it could not follow');
    assert.match(await answer.textContent(), /The value in src\/app\.py:250 is 2 now\./);
    const read = tab.locator('.tool-Read', { hasText: 'lines 248–252' });
    await read.locator('.tool-head').click();
    await read.locator('.tool-path .path-text', { hasText: 'src/app.py:248' }).waitFor();
    await watcher.close();
  });

  await step('the bell: its state is visible, and a browser that refuses gets words a person can act on', async () => {
    const phone = await browser.newContext({ viewport: PHONE });
    const tab = await phone.newPage();
    tab.setDefaultTimeout(TIMEOUT);
    tab.on('pageerror', (error) => problems.push(`bell page: ${error.message}`));
    // This browser refuses: as a person's would after "Block".
    await tab.addInitScript(() => {
      Object.defineProperty(Notification, 'permission', { get: () => 'denied' });
      Notification.requestPermission = async () => 'denied';
    });
    await tab.goto(`${base}/?token=${token}`);
    await tab.goto(`${base}/#/`);
    const bell = tab.locator('#push-toggle');
    for (const size of [PHONE, DESK]) {
      await tab.setViewportSize(size);
      await bell.waitFor();
      assert.match(await bell.getAttribute('class'), /blocked/);
      assert.match(await bell.getAttribute('aria-label'), /blocked by this browser/);
      const list = await tab.locator('#sidebar').boundingBox();
      const box = await bell.boundingBox();
      assert.ok(box.x + box.width <= list.x + list.width && box.y < 60, `the bell is at the top of the list: ${JSON.stringify(box)}`);
      const newButton = await tab.locator('#new-session').boundingBox();
      assert.ok(newButton.x + newButton.width <= list.x + list.width, `New is within the list: ${JSON.stringify(newButton)} in ${JSON.stringify(list)}`);
      await bell.click();
      const toast = tab.locator('.toast');
      await toast.waitFor();
      assert.match(await toast.textContent(), /blocks notifications from this site.*set Notifications to Allow/);
      assert.doesNotMatch(await toast.textContent(), /Registration failed/);
      if (size === PHONE) await shot('phone-bell-blocked.png', tab);
      await tab.evaluate(() => document.querySelectorAll('.toast').forEach((toast) => toast.remove()));
    }
    await phone.close();
  });

  await step('no errors in the page', async () => {
    assert.deepEqual(problems, []);
  });
} catch (error) {
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed || stepFailed() ? 1 : 0);
