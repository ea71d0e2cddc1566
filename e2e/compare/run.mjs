// The side-by-side of docs/comparison.md: the same scenario (scenario.mjs: a failing test, a
// fix with Read and Edit, a long markdown answer) through Switchboard's web UI and, when it is
// installed, CloudCLI's, with screenshots of each point at a desk and on a phone.
//
//   node e2e/compare/run.mjs                  # screenshots into target/compare/
//
// Environment: SWITCHBOARD (the binary; default target/debug/switchboard), CLAUDE (the CLI
// Switchboard drives; default the newest scripts/install-clis.sh installed), CHROMIUM (default
// /usr/bin/chromium), CLOUDCLI (CloudCLI's install folder, `npm install
// @cloudcli-ai/cloudcli@1.37.3` made; without it only Switchboard's half runs).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { driveSwitchboard } from './switchboard.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const cache = path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'switchboard/claude-code');
const newest = fs.readFileSync(path.join(root, 'scripts/cli-versions'), 'utf8').split('\n').map((line) => line.trim()).filter((line) => line && !line.startsWith('#')).pop();
const switchboard = process.env.SWITCHBOARD ?? path.join(root, 'target/debug/switchboard');
const claude = process.env.CLAUDE ?? path.join(cache, newest, 'node_modules/.bin/claude');
const screenshots = path.join(root, 'target/compare');
fs.mkdirSync(screenshots, { recursive: true });
for (const [what, file] of [['switchboard (cargo build)', switchboard], ['claude (scripts/install-clis.sh)', claude]]) {
  if (!fs.existsSync(file)) { console.error(`missing ${what}: ${file}`); process.exit(2); }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
let failed = false;
try {
  const started = Date.now();
  await driveSwitchboard({ browser, workdir: fs.mkdtempSync(path.join(os.tmpdir(), 'compare-switchboard-')), screenshots, switchboard, claude });
  console.log(`ok   Switchboard (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  if (process.env.CLOUDCLI) {
    const { driveCloudCLI } = await import('./cloudcli.mjs');
    const again = Date.now();
    await driveCloudCLI({ browser, workdir: fs.mkdtempSync(path.join(os.tmpdir(), 'compare-cloudcli-')), screenshots, cloudcli: process.env.CLOUDCLI });
    console.log(`ok   CloudCLI (${((Date.now() - again) / 1000).toFixed(1)} s)`);
  }
} catch (error) {
  failed = true;
  console.error(`FAIL ${error.stack ?? error}`);
} finally {
  await browser.close();
}
console.log(`screenshots in ${screenshots}`);
process.exit(failed ? 1 : 0);
