// What the review-page scripts share: headless Chromium through playwright-core.
// Env: PLANSMITH_TEST_PLAYWRIGHT (playwright-core dir), PLANSMITH_TEST_CHROMIUM (binary).
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLANSMITH_TEST_PLAYWRIGHT);

// Launches the browser; `fail(message)` prints the message, closes it and exits with 1.
export async function launch() {
  const browser = await chromium.launch({
    executablePath: process.env.PLANSMITH_TEST_CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const fail = async (msg) => { console.error(msg); await browser.close(); process.exit(1); };
  return { browser, fail };
}

// An element's text, run in the page: `await page.evaluate(text, "#state")`.
export const text = (sel) => document.querySelector(sel)?.textContent ?? "";
