// run.js SPEC.json — test_admin_ui.py's browser: Debian's chromium, headless,
// driven by playwright-core, on the daemon's GET /admin/ui.  It does what an
// operator does (gives the token, waits for the policies and the heavy
// callers and an RLS rule's, blocks one) and prints what it saw as one JSON object: the console
// errors, the dialogs any script opened (none may), the <img> elements the
// page holds (none: a caller's markup is text), the texts of the page.
// Every step waits for a state of the page, within spec.timeout_ms.
'use strict';
const fs = require('fs');
const { chromium } = require('playwright-core');

async function main() {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const out = { console_errors: [], page_errors: [], dialogs: [], steps: [] };
  const browser = await chromium.launch({
    executablePath: spec.executable,
    headless: true,
    // root in a container: no sandbox; no GPU on a server
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    page.setDefaultTimeout(spec.timeout_ms);
    page.on('console', (m) => { if (m.type() === 'error') out.console_errors.push(m.text()); });
    page.on('pageerror', (e) => out.page_errors.push(String(e)));
    page.on('dialog', async (d) => { out.dialogs.push(d.message()); await d.dismiss(); });

    const resp = await page.goto(spec.url);
    out.status = resp.status();
    out.csp = resp.headers()['content-security-policy'] || '';
    if (spec.token) {
      await page.locator('#auth').waitFor({ state: 'visible' });
      out.steps.push('asked for the token');
      await page.fill('#token', spec.token);
      await page.click('#token-save');
    }
    for (const p of spec.policies)
      await page.locator('#policy-' + p + ' h2').waitFor();
    out.steps.push('policies shown');
    out.policies = await page.locator('section.policy h2').allTextContents();
    const row = (id) => page.locator('tr.caller').filter({
      has: page.locator('td.identity').getByText(id, { exact: true }),
    });
    await row(spec.heavy).waitFor();
    await row(spec.xss).waitFor();
    out.steps.push('heavy callers shown');
    if (spec.rule) {
      const rule = page.locator('section.rule').filter({
        has: page.locator('h2 span.name').getByText(spec.rule.rule, { exact: true }),
      });
      await rule.locator('tr.caller td.identity').getByText(spec.rule.heavy, { exact: true })
        .waitFor();
      out.steps.push('rule shown');
      out.rules = [];
      for (const h of await page.locator('section.rule h2').all())
        out.rules.push([await h.locator('span.domain').textContent(),
                        await h.locator('span.name').textContent()]);
      out.rule_limits = await rule.locator('div.limits').textContent();
      out.rule_first_caller = await rule.locator('tr.caller td.identity').first().textContent();
      out.rule_buttons = await rule.locator('button').count();
      out.rule_note = await rule.locator('div.no-actions').textContent();
      const detailed = page.locator('section.rule').filter({
        has: page.locator('h2 span.name').getByText(spec.rule.detailed, { exact: true }),
      });
      await detailed.waitFor();
      out.detailed_limits = await detailed.locator('div.limits').textContent();
    }
    out.first_caller = await page.locator('section#policy-' + spec.policy +
                                          ' tr.caller td.identity').first().textContent();
    out.identities = await page.locator('td.identity').allTextContents();
    out.imgs = await page.locator('img').count();
    out.charts = await page.locator('svg.chart').count();
    out.header = {
      version: await page.textContent('#version'),
      config: await page.textContent('#config'),
      backend: await page.textContent('#backend'),
      reload: await page.textContent('#reload'),
    };
    out.token_in_session = await page.evaluate(
      () => sessionStorage.getItem('ratelimitd-admin-token'));
    out.local_storage = await page.evaluate(() => localStorage.length);
    // more refreshes (one unless spec.refreshes), so that the rates have
    // samples, then the picture
    for (let i = 0; i < (spec.refreshes || 1); i++) {
      const t0 = await page.getAttribute('body', 'data-refreshed');
      await page.waitForFunction((t) => document.body.getAttribute('data-refreshed') !== t, t0);
    }
    await page.screenshot({ path: spec.screenshot, fullPage: true });
    out.steps.push('screenshot');
    out.block_duration = await page.inputValue('#block-duration');
    await row(spec.heavy).locator('button.block').click();
    await page.waitForFunction(
      (id) => document.getElementById('msg').textContent.startsWith('block ' + id + ': done'),
      spec.heavy);
    out.msg = await page.textContent('#msg');
    out.answer = JSON.parse(await page.textContent('#out'));
    out.steps.push('blocked');
    out.imgs_after = await page.locator('img').count();
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
