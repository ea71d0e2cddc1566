// What the browser tests share: Chromium launched as they all launch it, steps that say how
// they went, and the check that nothing is wider than the screen.
import assert from 'node:assert/strict';
import path from 'node:path';
import { chromium } from 'playwright-core';

/// Debian's Chromium (`executablePath`), headless, asking nothing of the network.
export function launch(executablePath) {
  return chromium.launch({
    executablePath,
    // --disable-dev-shm-usage: shared memory in TMPDIR, not /dev/shm (64 MiB in many containers).
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-dev-shm-usage',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/// `step(name, run)`: runs a step and says `ok` or `FAIL` with its time; a failure screenshots
/// `page` into `screenshots` (named `<prefix>failure-<name>.png`), says what the page reported
/// (`problems`), and is thrown on. `failed()` tells whether any step failed.
export function stepper({ page, screenshots, problems = [], prefix = '' }) {
  let failed = false;
  const step = async (name, run) => {
    const started = Date.now();
    try {
      await run();
      console.log(`ok   ${name} (${Date.now() - started} ms)`);
    } catch (error) {
      failed = true;
      console.log(`FAIL ${name}: ${error.stack ?? error}`);
      if (problems.length) console.log(`the page said:\n  ${problems.join('\n  ')}`);
      await page.screenshot({ path: path.join(screenshots, `${prefix}failure-${name.replace(/\W+/g, '-')}.png`) }).catch(() => {});
      throw error;
    }
  };
  return { step, failed: () => failed };
}

/// Nothing on the page is wider than the viewport, nor scrolls sideways where it should not:
/// only code, diffs and tables may scroll within themselves. Returns the offenders.
export async function overflow(target) {
  return target.evaluate(() => {
    const width = document.documentElement.clientWidth;
    const bad = [];
    const scrollsOnPurpose = 'pre, .diff, .table-wrap, .code-block, .review-lines, .numbered, .session-tabs, datalist, template, option, script, style, head';
    for (const node of document.querySelectorAll('body *')) {
      // Inside a box that scrolls on purpose; the box itself is checked.
      if (node.parentElement?.closest(scrollsOnPurpose)) continue;
      const rect = node.getBoundingClientRect();
      if (!rect.width || !rect.height) continue;
      // Text cut with an ellipsis by a box that is itself in bounds is fine; anything else a box
      // cuts off (a column wider than the screen inside an overflow: hidden) is not.
      let ellipsis = false;
      for (let up = node.parentElement; up && up !== document.body; up = up.parentElement) {
        const style = getComputedStyle(up);
        if (style.textOverflow === 'ellipsis' && style.overflowX !== 'visible') { ellipsis = up.getBoundingClientRect().right <= width + 1; break; }
      }
      if (ellipsis) continue;
      if (rect.right > width + 1 || rect.left < -1) {
        bad.push(`${node.tagName.toLowerCase()}.${String(node.className?.baseVal ?? node.className).trim().replace(/\s+/g, '.')}: ${Math.round(rect.left)}..${Math.round(rect.right)}`);
      }
    }
    for (const box of document.querySelectorAll('.transcript, .sidebar, .main, .overview, .new-session')) {
      if (box.scrollWidth > box.clientWidth + 1) bad.push(`${box.className} scrolls sideways (${box.scrollWidth} > ${box.clientWidth})`);
    }
    return { width, page: document.documentElement.scrollWidth, bad: bad.slice(0, 12) };
  });
}

export async function assertFits(what, target) {
  const found = await overflow(target);
  assert.ok(found.page <= found.width, `${what}: the page is ${found.page} px wide in a ${found.width} px viewport`);
  assert.deepEqual(found.bad, [], `${what}: wider than the ${found.width} px viewport`);
}

