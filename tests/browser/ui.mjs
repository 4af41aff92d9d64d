// The gap page as a person uses it, in a real headless Chromium (Debian's `chromium`,
// driven by playwright-core; scripts/ui-browser.sh installs it and runs this file).
// JavaScript is OFF: the page must work without it, reading and acking alike.
//
//   node ui.mjs   with   UI_URL=http://127.0.0.1:PORT  UI_TOKEN=...  UI_GAP=<gap id>
//                        UI_OUT=<dir for the screenshots>  [CHROMIUM=/usr/bin/chromium]
//
// Prints one JSON line: what the page showed before the ack, the replay dry-run's plan
// (its button pressed with the token typed), and the page after the ack. Exits non-zero
// (with the reason on stderr) when a step fails; the Rust test (tests/it/ui_ack.rs)
// checks the JSON against the daemon's own answers.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const url = process.env.UI_URL;
const token = process.env.UI_TOKEN;
const gap = process.env.UI_GAP;
const out = process.env.UI_OUT;
if (!url || !token || !gap || !out) {
  console.error('UI_URL, UI_TOKEN, UI_GAP and UI_OUT are required');
  process.exit(2);
}
mkdirSync(out, { recursive: true });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  // Containers run as root without user namespaces: Chromium's sandbox cannot start there.
  args: ['--no-sandbox'],
});
try {
  const context = await browser.newContext({
    javaScriptEnabled: false,
    // The login dialog a person fills in: any user name, the token as password (Basic).
    httpCredentials: { username: 'oncall', password: token },
    viewport: { width: 1400, height: 900 },
  });
  const page = await context.newPage();

  // Without credentials first: the page must not show anything (a headless browser
  // cannot answer the login dialog, so this one asks with a plain request).
  const anonymousStatus = (await fetch(`${url}/ui`)).status;

  const first = await page.goto(`${url}/ui`);
  const before = {
    status: first.status(),
    text: await page.locator('body').innerText(),
  };
  await page.screenshot({ path: join(out, 'ui-seed-gap.png'), fullPage: true });

  // The row's replay dry-run: the token typed, the destination left empty (the sink),
  // then "replay dry-run"; the plan page it answers with.
  const replayForm = page.locator('tr', { hasText: gap }).locator('form.replay');
  if ((await replayForm.count()) !== 1) throw new Error(`no replay form in the row of ${gap}`);
  await replayForm.locator('input[name=token]').fill(token);
  const [planResponse] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith('/replay') && r.request().method() === 'POST'),
    replayForm.locator('button[type=submit]').click(),
  ]);
  await page.waitForLoadState();
  const plan = {
    status: planResponse.status(),
    url: page.url(),
    text: await page.locator('body').innerText(),
  };
  await page.screenshot({ path: join(out, 'ui-replay-dry-run.png'), fullPage: true });
  await page.goto(`${url}/ui`);

  // The row of the gap, its form: a reason and the token, then "acknowledge".
  const row = page.locator('tr', { hasText: gap });
  const form = row.locator('form.ack');
  if ((await form.count()) !== 1) throw new Error(`no ack form in the row of ${gap}`);
  await form.locator('input[name=reason]').fill('replayed by hand (browser test)');
  await form.locator('input[name=token]').fill(token);
  await Promise.all([
    page.waitForURL(/\/ui\?audit=.*state=all/),
    form.locator('button[type=submit]').click(),
  ]);
  const afterRow = page.locator('tr', { hasText: gap });
  const after = {
    url: page.url(),
    row: await afterRow.innerText(),
    forms: await page.locator('form.ack').count(),
  };
  await page.screenshot({ path: join(out, 'ui-acknowledged.png'), fullPage: true });
  console.log(JSON.stringify({ anonymousStatus, before, plan, after }));
} finally {
  await browser.close();
}
