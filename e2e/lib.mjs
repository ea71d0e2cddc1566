// What the browser tests share.
import assert from 'node:assert/strict';

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

