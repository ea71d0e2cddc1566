// The bench that opens long sessions in the web UI (`cargo bench -p switchboard-server --bench
// open`, which starts the daemon with the sessions stored and reads what this prints). For each
// round and each session of SESSIONS (`id:turns,…`): from the home page to the session's last
// answer on screen, printed as `open ID ROUND MS`. Then it pages the last session back to its
// first event (or MAX_PAGES pages), as a person scrolling up would, printing `page N FIRST_SEQ` every PAGE_MARK pages
// (the bench reads the daemon's memory at each) and `pages end N MS`.
import { launch } from './lib.mjs';

const { SWITCHBOARD_URL: base, SWITCHBOARD_TOKEN: token, CHROMIUM: chromium } = process.env;
const rounds = Number(process.env.ROUNDS ?? 5);
const mark = Number(process.env.PAGE_MARK ?? 10);
const maxPages = Number(process.env.MAX_PAGES ?? Infinity);
const sessions = (process.env.SESSIONS ?? '').split(',').filter(Boolean).map((entry) => {
  const [id, turns] = entry.split(':');
  return { id, turns: Number(turns) };
});
const deadline = { timeout: 5 * 60 * 1000 };

const browser = await launch(chromium);
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('pageerror', (error) => console.log(`the page said: ${error}`));
  await page.goto(`${base}/?token=${token}`);
  const transcript = () => page.locator('.transcript');
  for (let round = 1; round <= rounds; round += 1) {
    for (const { id, turns } of sessions) {
      await page.goto(`${base}/#/`);
      await page.locator('.session-item').first().waitFor(deadline);
      const started = performance.now();
      await page.goto(`${base}/#/s/${id}`);
      await transcript().locator('.md strong', { hasText: new RegExp(`^${turns}$`) }).waitFor(deadline);
      console.log(`open ${id} ${round} ${(performance.now() - started).toFixed(1)}`);
    }
  }
  const started = performance.now();
  const start = transcript().locator('.start');
  let pages = 0;
  while (pages < maxPages && !(await start.count())) {
    const before = await page.evaluate(() => window.__switchboard.view.firstSeq);
    await transcript().evaluate((node) => { node.scrollTop = 0; node.dispatchEvent(new Event('scroll')); });
    await page.waitForFunction((seq) => window.__switchboard.view.firstSeq < seq
      || document.querySelector('.transcript .start'), before, deadline);
    pages += 1;
    if (pages % mark === 0) {
      console.log(`page ${pages} ${await page.evaluate(() => window.__switchboard.view.firstSeq)}`);
    }
  }
  console.log(`pages end ${pages} ${(performance.now() - started).toFixed(0)}`);
} finally {
  await browser.close();
}
