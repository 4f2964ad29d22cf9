// Drives the review page in headless Chromium (playwright-core). Usage:
//   node scripts/review-page.mjs BASE_URL PLAN_ID SCREENSHOT_DIR
// Env: PLANSMITH_TEST_PLAYWRIGHT (playwright-core dir), PLANSMITH_TEST_CHROMIUM (binary).
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLANSMITH_TEST_PLAYWRIGHT);
const [base, id, shots] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.PLANSMITH_TEST_CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const fail = async (msg) => { console.error(msg); await browser.close(); process.exit(1); };
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(10000);
  await page.goto(base + "/");
  await page.click(`button[data-id="${id}"]`);
  await page.waitForSelector("form.question input");
  await page.screenshot({ path: `${shots}/1-question.png`, fullPage: true });
  await page.fill("form.question input", "bob@example.com");
  await page.click("form.question button");
  await page.waitForFunction(() => document.querySelector("#state")?.textContent === "awaiting_review");
  await page.fill('input[aria-label="s1 unit"]', '"kelvin"');
  await page.click('button[aria-label="Save s1 unit"]');
  await page.waitForSelector("p.diag[data-code]");
  await page.screenshot({ path: `${shots}/2-diagnostic.png`, fullPage: true });
  await page.click("#accept");
  await page.waitForFunction(() => document.querySelector("#state")?.textContent === "accepted");
  const r = await fetch(`${base}/v1/plans/${id}/steps/s1`, { method: "PATCH",
    headers: { "content-type": "application/json" }, body: JSON.stringify({ status: "in_progress" }) });
  if (r.status !== 200) await fail(`PATCH answered ${r.status}`);
  await page.waitForFunction(() => document.querySelector("#step-s1 .status")?.textContent === "in_progress");
  await page.screenshot({ path: `${shots}/3-live-status.png`, fullPage: true });
  console.log("review page: OK");
} catch (e) { await fail(String(e)); }
await browser.close();
