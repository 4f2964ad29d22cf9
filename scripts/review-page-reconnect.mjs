// Drives the review page in headless Chromium (playwright-core) on a server with API tokens
// (entered once, kept across a reload), across a restart of that server (audited with
// axe-core while it reconnects). Usage:
//   node scripts/review-page-reconnect.mjs BASE_URL PLAN_ID TOKEN SCREENSHOT_DIR
// Env: PLANSMITH_TEST_PLAYWRIGHT (playwright-core dir), PLANSMITH_TEST_CHROMIUM (binary).
// Talks to the test that runs it by lines: prints "restart" when the server should stop and
// come back, and waits for "restarted" on stdin.
import { audit, launch, text } from "./review-page-browser.mjs";
import { createInterface } from "node:readline";
const [base, id, token, shots] = process.argv.slice(2);
const stdin = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const { browser, fail } = await launch();
const api = (method, path, body) => fetch(base + path, { method,
  headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
  body: body === undefined ? undefined : JSON.stringify(body) });
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(10000);
  await page.goto(base + "/");
  // Without a token the list is refused; with one, it holds that owner's plans only.
  await page.waitForFunction(() => document.querySelector("#count")?.textContent.startsWith("unauthorized"));
  await page.fill("#token", token);
  await page.press("#token", "Enter");
  await page.waitForFunction(() => document.querySelector("#count")?.textContent === "1 of 1 plan");
  // The token is kept for the tab: after a reload the list is there at once.
  await page.reload();
  await page.waitForFunction(() => document.querySelector("#count")?.textContent === "1 of 1 plan");
  // A plan made elsewhere joins the list within 5 s (another owner's does not).
  let r = await api("POST", "/v1/plans", { query: "Email Bob the weather in Paris" });
  if (r.status !== 201) await fail(`POST /v1/plans answered ${r.status}`);
  await page.waitForFunction(() => document.querySelector("#count")?.textContent === "2 of 2 plans");
  await page.click(`button[data-id="${id}"]`);
  await page.waitForSelector("#main[data-live]");
  if ((await page.textContent("#live")) !== "Live") await fail(`live state: ${await page.textContent("#live")}`);
  // The page's event stream carries the token: a step status arrives live.
  r = await api("PATCH", `/v1/plans/${id}/steps/s1`, { status: "in_progress" });
  if (r.status !== 200) await fail(`PATCH s1 answered ${r.status}`);
  await page.waitForFunction(() => document.querySelector("#step-s1 .status")?.textContent === "in progress");
  if ((await page.textContent("#version")) !== "2") await fail(`version shown after the step update: ${await page.textContent("#version")}`);
  // The server stops; while it is away, s2 is completed in the store. The page says it is
  // reconnecting, and once the server is back it shows s2 completed from its new snapshot.
  console.log("restart");
  await page.waitForFunction(() => document.querySelector("#live")?.textContent.startsWith("Reconnecting in"));
  await page.screenshot({ path: `${shots}/5-reconnecting.png`, fullPage: true });
  const problems = await audit(page, "reconnecting, with a token");
  if (problems.length) await fail(`accessibility (axe-core):\n${problems.join("\n")}`);
  const answer = await stdin.next();
  if (answer.value !== "restarted") await fail(`the test said ${JSON.stringify(answer.value)}, not "restarted"`);
  await page.waitForFunction(() => document.querySelector("#step-s2 .status")?.textContent === "completed", null, { timeout: 20000 });
  await page.waitForFunction(() => document.querySelector("#live")?.textContent === "Live");
  if (!(await page.$("#main[data-live]"))) await fail("reconnected, but #main is not marked live");
  if ((await page.getAttribute('#dag g[data-step="s2"] rect', "class")) !== "completed") await fail("DAG node s2 not completed");
  if ((await page.evaluate(text, "#step-s1 .status")) !== "in progress") await fail("s1 lost its status");
  if ((await page.textContent("#version")) !== "3") await fail(`version shown after reconnecting: ${await page.textContent("#version")}`);
  await page.screenshot({ path: `${shots}/6-reconnected.png`, fullPage: true });
  // Live again: a change through the new server arrives as an event.
  r = await api("PATCH", `/v1/plans/${id}/steps/s3`, { status: "in_progress" });
  if (r.status !== 200) await fail(`PATCH s3 answered ${r.status}`);
  await page.waitForFunction(() => document.querySelector("#step-s3 .status")?.textContent === "in progress");
  // Deleted: the page says so and stops following.
  r = await api("DELETE", `/v1/plans/${id}`);
  if (r.status !== 204) await fail(`DELETE answered ${r.status}`);
  await page.waitForFunction(() => document.querySelector("#live")?.textContent === "This plan was deleted.");
  console.log("review page across a restart: OK");
} catch (e) { await fail(String(e)); }
await browser.close();
process.exit(0);
