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

// Presses Tab until the focused element matches `selector` (at most `max` times), as a keyboard
// user would reach it; false when it is never reached.
export async function tabTo(page, selector, max = 200) {
  for (let i = 0; i < max; i++) {
    await page.keyboard.press("Tab");
    if (await page.evaluate((sel) => document.activeElement?.matches(sel) ?? false, selector)) return true;
  }
  return false;
}

// An element's text, run in the page: `await page.evaluate(text, "#state")`.
export const text = (sel) => document.querySelector(sel)?.textContent ?? "";

// axe-core (npm, beside playwright-core), injected into the page to audit it.
const axePath = require("node:path").join(process.env.PLANSMITH_TEST_PLAYWRIGHT, "..", "axe-core", "axe.min.js");

// Audits the page as it is now with axe-core against WCAG 2.1 A and AA and axe's best
// practices; returns one line per rule broken ("state: rule (impact), N elements (the first
// ones' selectors): what is wrong"), empty when the page passes.
export async function audit(page, state) {
  if (!(await page.evaluate(() => typeof window.axe === "object"))) await page.addScriptTag({ path: axePath });
  const violations = await page.evaluate(async () => {
    const result = await window.axe.run(document, {
      runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"] },
    });
    return result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.map((n) => ({ target: n.target.join(" "), summary: n.failureSummary.replace(/\s+/g, " ") })) }));
  });
  return violations.map((v) => `${state}: ${v.id} (${v.impact}), ${v.nodes.length} element${v.nodes.length === 1 ? "" : "s"} (${v.nodes.slice(0, 3).map((n) => n.target).join(", ")}): ${v.help}. ${v.nodes[0].summary}`);
}
