// CloudCLI's half of the side-by-side (docs/comparison.md): CloudCLI 1.37.3 (the npm package
// @cloudcli-ai/cloudcli, a web UI that drives Claude Code through the Agent SDK) against
// `switchboard fake-api` on the scenario of scenario.mjs, driven through the three prompts in its
// web UI as a new user would, with screenshots of each point of the comparison at 1,400 × 900 and
// 390 × 844 (`cloudcli-<point>.png`, `cloudcli-phone-<point>.png`).
//
// What the setup has to know about CloudCLI (read from its dist-server/ and server/ sources):
// - It runs Claude through @anthropic-ai/claude-agent-sdk and hands the CLI its own environment,
//   so the fake API's ANTHROPIC_BASE_URL and the rest go into CloudCLI's process environment.
//   On Linux it passes `CLAUDE_CLI_PATH` (default a bare `claude`) to the SDK as the executable;
//   we point it at the CLI the SDK ships.
// - Its Shell tab runs `claude --resume <session> || claude` in a terminal. We keep any `claude`
//   off its PATH: the interactive CLI, first run in a fresh HOME, checks its connection to
//   api.anthropic.com itself (whatever ANTHROPIC_BASE_URL says), and nothing may leave loopback.
//   So the Shell tab shows `claude: command not found` here.
// - `SERVER_PORT` and `HOST` choose where it listens; its database goes to $HOME/.cloudcli.
// - A project must lie inside `WORKSPACES_ROOT` (default $HOME), and "Create New Project" refuses
//   any path spelled under /tmp, /root, /var (but /var/tmp), /opt, … ("Cannot create workspace in
//   system directory"). The check is on the path as typed, then it stores the real path; so when
//   the work folder is under such a root we type the project's path through a symlink under
//   /var/tmp (removed at the end), and CloudCLI records, and runs Claude in, the real folder.
// - New users get the "Default" permission mode: Claude asks before Bash and Edit, and the web UI
//   shows the request above the composer (Deny / Allow & remember / Allow once). An unanswered
//   request is denied after 55 s (CLAUDE_TOOL_APPROVAL_TIMEOUT_MS), so we answer at once.
//
// The browser never leaves loopback: every other request (Google Fonts, GitHub's API) is aborted,
// and service workers are blocked, so the page draws with the system's fallback fonts.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, start, stop } from './procs.mjs';
import { makeProject, PROMPTS } from './scenario.mjs';

const DESK = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };
const WAIT = 60_000; // the deadline of any one step
const TURN = 120_000; // the deadline of one prompt's whole turn, approvals included

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

// The roots "Create New Project" refuses (FORBIDDEN_WORKSPACE_PATHS in its server/shared/utils.ts).
const FORBIDDEN = ['/etc', '/bin', '/sbin', '/usr', '/dev', '/proc', '/sys', '/var', '/boot', '/root', '/lib', '/lib64', '/opt', '/tmp', '/run'];
const forbidden = (dir) => FORBIDDEN.some((top) => dir === top || dir.startsWith(`${top}/`))
  && !dir.startsWith('/var/tmp/') && !dir.startsWith('/var/folders/');

/// CloudCLI's package folder, from the folder `npm install @cloudcli-ai/cloudcli` ran in (or the
/// package folder itself).
function packageDir(cloudcli) {
  for (const dir of [path.join(cloudcli, 'node_modules/@cloudcli-ai/cloudcli'), cloudcli]) {
    if (fs.existsSync(path.join(dir, 'dist-server/server/index.js'))) return dir;
  }
  throw new Error(`no CloudCLI under ${cloudcli} (npm install @cloudcli-ai/cloudcli@1.37.3 there)`);
}

export async function driveCloudCLI({ browser, workdir, screenshots, cloudcli = process.env.CLOUDCLI ?? '/tmp/cloudcli',
  switchboard = process.env.SWITCHBOARD ?? path.join(root, 'target/debug/switchboard'), log = () => {} }) {
  const app = packageDir(cloudcli);
  const sdkClaude = path.join(app, '../../@anthropic-ai/claude-agent-sdk-linux-x64/claude');
  if (!fs.existsSync(sdkClaude)) throw new Error(`the Agent SDK's CLI is missing: ${sdkClaude}`);
  workdir = fs.realpathSync(workdir);

  // The project and the fake API's script for it; a scratch HOME; a PATH without `claude`.
  const project = path.join(workdir, 'shop');
  const script = path.join(workdir, 'replies.json');
  fs.writeFileSync(script, JSON.stringify(makeProject(project)));
  const home = path.join(workdir, 'home');
  fs.mkdirSync(home, { recursive: true });
  const PATH = (process.env.PATH ?? '').split(':').filter((dir) => dir && !fs.existsSync(path.join(dir, 'claude'))).join(':');
  // The path to type into "Create New Project": the real one, or one through /var/tmp.
  let typed = project;
  let link = null;
  if (forbidden(workdir)) {
    link = fs.mkdtempSync('/var/tmp/compare-cloudcli-');
    fs.symlinkSync(workdir, path.join(link, 'work'));
    typed = path.join(link, 'work', 'shop');
  }

  const started = [];
  const context = await browser.newContext({ viewport: DESK, serviceWorkers: 'block' });
  let page = null;
  try {
    // Loopback only.
    await context.route('**/*', (route) => {
      const { hostname } = new URL(route.request().url());
      return hostname === '127.0.0.1' || hostname === 'localhost' ? route.continue() : route.abort();
    });

    // The fake API, then CloudCLI with Claude's environment pointing at it.
    const printed = await start(started, switchboard, ['fake-api', '--script', script, '--json'], {}, (out) => out.includes('"url"'));
    const { url } = JSON.parse(printed.split('\n').find((line) => line.includes('"url"')));
    const port = await freePort();
    const env = { ...process.env };
    for (const key of ['ANTHROPIC_AUTH_TOKEN', 'CLAUDE_CODE_OAUTH_TOKEN', 'CLAUDE_CONFIG_DIR', 'DATABASE_PATH', 'JWT_SECRET', 'API_KEY', 'PORT', 'VITE_PORT']) delete env[key];
    Object.assign(env, {
      HOME: home, PATH, SERVER_PORT: String(port), HOST: '127.0.0.1', WORKSPACES_ROOT: workdir,
      CLAUDE_CLI_PATH: sdkClaude, ANTHROPIC_BASE_URL: url, ANTHROPIC_API_KEY: 'comparison',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1', NODE_ENV: 'production',
    });
    await start(started, process.execPath, [path.join(app, 'dist-server/server/index.js')], { cwd: app, env },
      (out) => out.includes('Server URL'));
    const base = `http://127.0.0.1:${port}`;

    page = await context.newPage();
    page.setDefaultTimeout(WAIT);
    const shot = (name) => page.screenshot({ path: path.join(screenshots, `cloudcli-${name}.png`) });
    const phoneShot = async (name, before) => {
      await page.setViewportSize(PHONE);
      await page.waitForTimeout(300); // the layout settles (a resize has no event to wait on)
      if (before) await before();
      await shot(`phone-${name}`);
      await page.setViewportSize(DESK);
      await page.waitForTimeout(300);
    };
    const visible = (locator) => locator.filter({ visible: true }).first();
    const tab = (name) => visible(page.getByRole('tab', { name, exact: true })); // Chat, Shell, Files, Source Control
    const composer = () => visible(page.locator('textarea'));
    const allow = () => visible(page.getByRole('button', { name: 'Allow once', exact: true }));

    // The account: CloudCLI is single-user; the first visit registers it.
    await page.goto(base);
    await page.getByLabel('Username').fill('demo');
    await page.getByLabel('Password', { exact: true }).fill('comparison');
    await page.getByLabel('Confirm Password').fill('comparison');
    await page.getByRole('button', { name: 'Create Account' }).click();
    // Onboarding: the git identity (required; it runs `git config --global` in the scratch
    // HOME), then "Connect Your AI Agents" (Claude shows as connected by its API key).
    await page.getByLabel('Git Name').fill('Demo');
    await page.getByLabel('Git Email').fill('demo@example.com');
    await page.getByRole('button', { name: 'Next' }).click();
    await page.getByRole('button', { name: 'Complete Setup' }).click();
    await visible(page.locator('button[title="Create new project"]')).waitFor();
    await shot('home-empty');
    log('registered');

    // The project: "Create new project" (the + in the sidebar), its path, Next, Create Project.
    await visible(page.locator('button[title="Create new project"]')).click();
    await page.getByPlaceholder('/path/to/project/workspace').fill(typed);
    await page.getByRole('button', { name: 'Next' }).click();
    await page.getByRole('button', { name: 'Create Project' }).click();
    // CloudCLI opens the new project on a new session; else pick it and "New Session".
    await page.getByText('Create New Project').waitFor({ state: 'hidden' });
    await visible(page.getByText('shop', { exact: true })).waitFor();
    if (!(await composer().isVisible())) {
      await visible(page.getByText('shop', { exact: true })).click();
      await visible(page.getByRole('button', { name: 'New Session' })).click();
    }
    await composer().waitFor();
    log('project created');

    // Starting a session: the first prompt typed on the new session's page.
    await composer().fill(PROMPTS.run);
    await shot('start');

    /// Sends `text` (Enter sends) and waits for `done` in the chat and the turn's end, answering
    /// each permission request with "Allow once" after `onApproval(toolName, n)` (screenshots).
    const turn = async (text, done, onApproval = async () => {}, onSent = async () => {}) => {
      await composer().fill(text);
      await composer().press('Enter');
      await onSent();
      const deadline = Date.now() + TURN;
      let asked = 0;
      for (;;) {
        if (Date.now() > deadline) throw new Error(`CloudCLI: no end of the turn for "${text}" in ${TURN / 1000} s`);
        if (await allow().isVisible()) {
          const tool = (await visible(page.getByText('Permission required')).locator('xpath=..').innerText()).match(/Tool:\s*(\w+)/)?.[1] ?? 'tool';
          asked += 1;
          log(`asked: ${tool}`);
          await onApproval(tool, asked);
          // Answer, and wait for this request's card to go (the next one may follow at once).
          const card = await allow().elementHandle();
          await allow().click();
          await page.waitForFunction((element) => !element.isConnected, card, { timeout: 10_000 });
          continue;
        }
        const answered = await visible(page.getByText(done)).isVisible();
        // While a turn runs a status line with a Stop button shows over the composer.
        const running = await visible(page.getByRole('button', { name: 'Stop', exact: true })).isVisible();
        if (answered && !running) return asked;
        await page.waitForTimeout(250);
      }
    };

    // 1. Run the tests: Bash asks. The request as it is asked, at a desk and on a phone; the
    // session list meanwhile (the sidebar's "Running sessions" filter, and on a phone the sidebar
    // behind the menu button).
    await turn(PROMPTS.run, 'One test fails', async (tool, n) => {
      if (n !== 1) return;
      await shot('approval');
      await phoneShot('approval');
      const running = visible(page.getByRole('button', { name: 'Running sessions' }));
      await running.click();
      await page.waitForTimeout(300);
      await shot('triage');
      await running.click();
      await phoneShot('list', async () => {
        await visible(page.getByRole('button', { name: 'Open menu' })).click();
        await page.waitForTimeout(500); // the drawer slides in
      });
      await page.reload(); // closes the phone's drawer; the request is still there after it
      await allow().waitFor();
    });
    // The Bash card, opened on its output (the failing test).
    const bash = visible(page.getByText('python3 test_cart.py', { exact: true }));
    if (!(await visible(page.getByText('AssertionError: 30 != 33.0')).isVisible())) await bash.click();
    await visible(page.getByText('AssertionError: 30 != 33.0')).waitFor();
    await bash.evaluate((element) => element.scrollIntoView({ block: 'start' }));
    await shot('bash');
    log('ran the tests');

    // 2. Fix it: Read (not asked), Edit (asked: the request as asked, then its input opened),
    // the tests again (asked).
    await turn(PROMPTS.fix, 'Fixed: the test passes', async (tool) => {
      if (tool !== 'Edit') return;
      await shot('edit-approval');
      // What the request asks, opened: the tool's input as JSON.
      await visible(page.getByText('View tool input')).click();
      await page.waitForTimeout(300);
      await shot('edit-approval-input');
    });
    // The tool cards: Read, the Edit opened on its diff, the second Bash.
    const edit = visible(page.locator('div.group\\/section').filter({ has: page.getByText('+1', { exact: true }) }));
    const toggle = edit.locator('button[aria-expanded]').first();
    if ((await toggle.getAttribute('aria-expanded')) !== 'true') await toggle.click();
    await visible(page.getByText('return round(subtotal(items) * (1 + TAX), 2)', { exact: true })).waitFor();
    await visible(page.getByText('Reading the cart first.')).evaluate((element) => element.scrollIntoView({ block: 'start' }));
    await page.waitForTimeout(300);
    await shot('tool-cards');
    log('fixed');

    // 3. Explain: a long markdown answer. The chat while the answer comes (CloudCLI shows a
    // status line over the composer; the text itself arrives in one piece), then the answer.
    await turn(PROMPTS.explain, 'What to check next', undefined, async () => {
      await visible(page.getByRole('button', { name: 'Stop', exact: true })).waitFor({ timeout: 10_000 }).catch(() => {});
      await shot('streaming');
    });
    await visible(page.getByText('How the cart computes its total')).evaluate((element) => element.scrollIntoView({ block: 'start' }));
    await page.waitForTimeout(300);
    await shot('markdown');
    await phoneShot('chat');
    log('explained');

    // The session list across projects (the sidebar's "Conversations").
    await visible(page.getByRole('button', { name: 'Conversations', exact: true })).click();
    await page.waitForTimeout(500);
    await shot('list');
    await visible(page.getByRole('button', { name: 'Projects', exact: true })).click();

    // Source Control after the fix: the panel (branch, tabs, commit box, the changed file), the
    // file opened on its diff in the list (which scrolls the tabs and commit box away), then the
    // file in the diff editor.
    await tab('Source Control').click();
    const changed = visible(page.getByText('cart.py', { exact: true }));
    await changed.waitFor();
    await page.waitForTimeout(500);
    await shot('review');
    await changed.locator('xpath=preceding-sibling::*[1]').click();
    await visible(page.getByText('@@ -6,5 +6,4 @@', { exact: false })).waitFor();
    await page.waitForTimeout(500);
    await shot('review-diff');
    await phoneShot('review');
    await changed.click();
    await visible(page.getByText('Showing changes')).waitFor();
    await page.waitForTimeout(500);
    await shot('review-file');
    await visible(page.locator('button[title="Close"]')).click();

    // Files: the tree, and a file in its editor.
    await tab('Files').click();
    await visible(page.getByText('test_cart.py', { exact: true })).click();
    await visible(page.getByText('Lines: 13')).waitFor();
    await page.waitForTimeout(300);
    await shot('files');
    await visible(page.locator('button[title="Close"]')).click();

    // Shell: a terminal in the project that runs `claude --resume <session> || claude` (here
    // "command not found": see the top of this file).
    await tab('Shell').click();
    await visible(page.locator('.xterm')).waitFor();
    await page.waitForTimeout(3000); // it draws on a canvas: no text to wait for
    await shot('terminal');
    await tab('Chat').click();
    log('done');
  } catch (error) {
    // Where it stopped, for whoever reads the error.
    await page?.screenshot({ path: path.join(screenshots, 'cloudcli-failed.png') }).catch(() => {});
    throw error;
  } finally {
    await context.close();
    for (const child of started.reverse()) await stop(child);
    if (link) fs.rmSync(link, { recursive: true, force: true });
  }
}
