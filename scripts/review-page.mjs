// Drives the review page in headless Chromium (playwright-core): the list, a question (reached
// and answered with the keyboard alone), an argument edit checked live, step removal, free-text
// changes, accept, live status, a new streamed plan; axe-core audits the page for
// accessibility (WCAG 2.1 A/AA and best practices) at five of these states. Usage:
//   node scripts/review-page.mjs BASE_URL PLAN_ID SCREENSHOT_DIR
// Env: PLANSMITH_TEST_PLAYWRIGHT (playwright-core dir), PLANSMITH_TEST_CHROMIUM (binary).
import { audit, launch, tabTo } from "./review-page-browser.mjs";
const [base, id, shots] = process.argv.slice(2);
const { browser, fail } = await launch();
try {
  const page = await browser.newPage();
  // Accessibility problems found by axe-core at each state of the page, reported together.
  const problems = [];
  page.setDefaultTimeout(10000);
  await page.goto(base + "/");
  // The list shows a page of plans; "More plans" appends the rest (the test made 56; the
  // server counts up to 55, so the page says "55+").
  await page.waitForFunction(() => document.querySelector("#count")?.textContent === "50 of 55+ plans");
  if (await page.isHidden("#more")) await fail("no 'More plans' button with 56 plans");
  await page.click("#more");
  await page.waitForFunction(() => document.querySelector("#count")?.textContent === "56 of 56+ plans");
  const listed = await page.$$eval("#plans button", (bs) => bs.map((b) => b.dataset.id));
  if (new Set(listed).size !== 56) await fail(`the list holds ${new Set(listed).size} distinct plans, not 56`);
  if (!(await page.isHidden("#more"))) await fail("'More plans' still shown after the last page");
  // Filtered by state: the one plan that needs input, then all again.
  await page.selectOption("#filter", "needs_input");
  await page.waitForFunction(() => document.querySelector("#count")?.textContent === "1 of 1 plan");
  const needing = await page.$$eval("#plans button", (bs) => bs.map((b) => b.dataset.id));
  if (needing.join() !== id) await fail(`plans needing input: ${needing}`);
  // An entry names the state in words and when the plan last changed (the time; a date before
  // it when that was not today).
  const needingEntry = await page.textContent(`#plans button[data-id="${id}"]`);
  if (!/ — needs input, ([^,]+, )?\d{1,2}:\d{2}( [AP]M)?$/.test(needingEntry)) await fail(`list entry: ${needingEntry}`);
  await page.selectOption("#filter", "");
  await page.waitForFunction(() => document.querySelector("#count")?.textContent === "50 of 55+ plans");
  problems.push(...(await audit(page, "plans list")));
  // With the keyboard alone: Tab to the plan and open it with Enter, Tab to the question's
  // field, type the answer and send it with Enter.
  if (!(await tabTo(page, `#plans button[data-id="${id}"]`))) await fail("Tab never reaches the plan in the list");
  await page.keyboard.press("Enter");
  await page.waitForSelector("form.question input");
  await page.waitForSelector("#main[data-live]");
  problems.push(...(await audit(page, "plan with a question")));
  await page.screenshot({ path: `${shots}/1-question.png`, fullPage: true });
  // The question asks for the `to` argument, an email address: its field is typed so.
  const fieldType = await page.getAttribute("form.question input", "type");
  if (fieldType !== "email") await fail(`the recipient's field is of type '${fieldType}', not 'email'`);
  if (!(await tabTo(page, "form.question input"))) await fail("Tab never reaches the question's field");
  await page.keyboard.type("bob@example.com");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelector("#state")?.textContent === "awaiting review");
  // The answered question's field is gone with the redraw: the focus is on the plan's heading,
  // not back at the start of the page.
  const focused = await page.evaluate(() => document.activeElement?.id);
  if (focused !== "plan-title") await fail(`after answering, the focus is on '${focused}', not the plan's heading`);
  // The answer's replanning streamed in on the plan's events, step by step.
  await page.waitForFunction(() => document.querySelector("#replan")?.textContent.startsWith("Replanned"));
  const replanned = await page.textContent("#replan");
  if (replanned !== "Replanned: 3 steps streamed (s1, s2, s3).") await fail(`replanning progress: ${replanned}`);
  // Each step says what it does: the tool it calls, the words of the reply.
  const does = await page.$$eval("#main section.step .does", (ps) => ps.map((p) => p.textContent));
  if (does.length !== 3 || does[0] !== "Calls get_weather" || does[1] !== "Calls send_email" || !/^Replies: \S/.test(does[2])) {
    await fail(`what the steps do: ${does.join(" | ")}`);
  }
  // The other kinds of step, as the page words them.
  const worded = await page.evaluate(() => [
    { action: { type: "agent", agent: "researcher", query: "Find flights" } },
    { action: { type: "task", kind: "research", need_web_search: true }, schedule: { type: "daily", time: "09:00" } },
    { action: { type: "task", kind: "processing" }, schedule: { type: "cron", expr: "0 9 * * 1-5" }, requires_approval: true },
    { action: { type: "reply", text: "Done." }, schedule: { type: "interval", minutes: 30 } },
  ].map((s) => { const p = document.createElement("p"); p.append(...does(s)); return p.textContent; }));
  const wording = ["Asks agent researcher: Find flights", "Task: research, with web search; runs daily at 09:00",
    "Task: processing; runs on cron 0 9 * * 1-5; waits for approval before it runs", "Replies: Done.; runs every 30 min"];
  if (JSON.stringify(worded) !== JSON.stringify(wording)) await fail(`steps worded: ${JSON.stringify(worded)}`);
  // Typing an argument checks it with the engine at once; nothing is stored until Save.
  // The stored version, asked of the API: the page does not re-render after a check or a
  // refused save, so its own text would not show a write.
  const storedVersion = async () => (await (await fetch(`${base}/v1/plans/${id}`)).json()).plan.version;
  const version = await storedVersion();
  await page.fill('input[aria-label="s1 unit"]', '"kelvin"');
  await page.waitForSelector('#live-s1 p.diag[data-code]');
  const live = await page.textContent("#live-s1");
  if (!live.includes("/steps/0/action/arguments/unit")) await fail(`live check: ${live}`);
  await page.screenshot({ path: `${shots}/2-diagnostic.png`, fullPage: true });
  problems.push(...(await audit(page, "argument with a diagnostic")));
  await page.fill('input[aria-label="s1 unit"]', '"fahrenheit"');
  await page.waitForSelector("#live-s1 p.ok");
  if (await page.$("#live-s1 p.diag")) await fail("a valid edit still shows an error");
  if ((await storedVersion()) !== version) await fail("checking a valid edit stored it");
  await page.fill('input[aria-label="s1 unit"]', '"kelvin"');
  await page.waitForSelector('#live-s1 p.diag[data-code]');
  // Saved anyway, the edit is refused with the same diagnostic and the plan is unchanged.
  await page.click('button[aria-label="Save s1 unit"]');
  await page.waitForSelector("#errors p.diag[data-code]");
  if ((await storedVersion()) !== version) await fail("a refused edit stored a new version");
  // Steps: removing one another depends on is refused with the engine's diagnostic; removing
  // one nothing depends on stores a new version without it.
  await page.click('button[aria-label="Remove step s1"]');
  await page.waitForSelector('#errors p.diag[data-code="unknown_dependency"]');
  if ((await storedVersion()) !== version) await fail("a refused removal stored a new version");
  await page.click('button[aria-label="Remove step s3"]');
  await page.waitForFunction((v) => document.querySelector("#version")?.textContent === String(v + 1) && !document.querySelector("#step-s3"), version);
  // Free-text feedback: the model replans (the scripted reply brings s3 back).
  await page.fill("#changes", "Also tell me when it is sent.");
  await page.click("#ask-changes button");
  await page.waitForFunction((v) => document.querySelector("#version")?.textContent === String(v + 2) && document.querySelector("#step-s3"), version);
  await page.screenshot({ path: `${shots}/2b-replanned.png`, fullPage: true });
  if ((await page.inputValue("#changes")) !== "") await fail("the sent changes are still in the box");
  // Another reviewer's edit redraws the plan while this one types: the text and the focus stay.
  await page.fill("#changes", "Send it to Ann too.");
  const before = Number(await page.textContent("#version"));
  const edited = await fetch(`${base}/v1/plans/${id}/feedback`, { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ action: "patch", patch: [{ op: "replace", path: "/steps/0/action/arguments/unit", value: "fahrenheit" }] }) });
  if (edited.status !== 200) await fail(`another reviewer's edit answered ${edited.status}`);
  await page.waitForFunction((v) => document.querySelector("#version")?.textContent === String(v + 1), before);
  if ((await page.inputValue("#changes")) !== "Send it to Ann too.") await fail(`typed text lost in a redraw: ${await page.inputValue("#changes")}`);
  if ((await page.evaluate(() => document.activeElement?.id)) !== "changes") await fail("the focus left the box in a redraw");
  await page.fill("#changes", "");
  if (await page.$("#run")) await fail("a plan awaiting review offers Run");
  await page.click("#accept");
  await page.waitForFunction(() => document.querySelector("#state")?.textContent === "accepted");
  // An accepted plan can be run, no longer accepted, rejected or edited: its arguments are shown
  // as they are.
  const offered = await page.$$eval("#actions button", (bs) => bs.filter((b) => !b.hidden).map((b) => b.id).join(","));
  if (offered !== "run") await fail(`an accepted plan offers ${offered}`);
  if (await page.$("#changes, button.remove, #step-s1 input")) await fail("an accepted plan offers edits the server would refuse");
  const shownArg = await page.textContent("#step-s1 p.arg");
  if (shownArg !== 'city = "Paris"') await fail(`an accepted plan's argument reads '${shownArg}'`);
  const r = await fetch(`${base}/v1/plans/${id}/steps/s1`, { method: "PATCH",
    headers: { "content-type": "application/json" }, body: JSON.stringify({ status: "in_progress" }) });
  if (r.status !== 200) await fail(`PATCH answered ${r.status}`);
  await page.waitForFunction(() => document.querySelector("#step-s1 .status")?.textContent === "in progress");
  // In words on the page (a screen reader says "in progress"), the API's name kept beside.
  if ((await page.getAttribute("#step-s1 .status", "data-status")) !== "in_progress") await fail("s1's badge lost its data-status");
  // Screen readers hear it too (the page is not a live region: a redraw would be read whole).
  await page.waitForFunction(() => document.querySelector("#announce")?.textContent === "Step s1: in progress");
  const dagLabel = await page.getAttribute("#dag", "aria-label");
  if (dagLabel !== "Step dependencies: s2 after s1; s3 after s2") await fail(`DAG text alternative: ${dagLabel}`);
  await page.screenshot({ path: `${shots}/3-live-status.png`, fullPage: true });
  problems.push(...(await audit(page, "accepted plan with its DAG")));
  // The DAG shows the dependency edge s1 -> s2 and the live status on the node.
  if (!(await page.$('#dag line[data-from="s1"][data-to="s2"]'))) await fail("no DAG edge s1 -> s2");
  // Node labels break between words over two lines; a label too long for them ends in "…".
  const label = await page.$$eval('#dag g[data-step="s1"] tspan', (ts) => ts.map((t) => t.textContent));
  if (JSON.stringify(label) !== JSON.stringify(["s1: Get the weather in", "Paris"])) await fail(`DAG label: ${JSON.stringify(label)}`);
  const wrapped = await page.evaluate(() => [wrap("s9: A title that is much too long for two short lines of a node", 25, 2), wrap("s1: Supercalifragilisticexpialidocious", 25, 2)]);
  if (JSON.stringify(wrapped) !== JSON.stringify([["s9: A title that is much", "too long for two short…"], ["s1:", "Supercalifragilisticexpi…"]])) await fail(`wrap: ${JSON.stringify(wrapped)}`);
  if ((await page.getAttribute('#dag g[data-step="s1"] rect', "class")) !== "in_progress") await fail("DAG node s1 not in_progress");
  // A new plan, streamed: validated steps arrive while planning, then the plan opens.
  await page.fill("#query", "Email Bob the weather in Paris");
  await page.click("#plan");
  await page.waitForSelector('#progress li[data-step="s3"]');
  await page.waitForFunction(() => document.querySelector("#planning")?.textContent.startsWith("Planned"));
  await page.waitForFunction((old) => { const m = document.querySelector("#main"); return m.dataset.plan && m.dataset.plan !== old && document.querySelector("#state")?.textContent === "awaiting review"; }, id);
  const streamed = await page.$$eval("#progress li", (items) => items.map((li) => li.dataset.step));
  if (streamed.join(",") !== "s1,s2,s3") await fail(`streamed steps ${streamed}`);
  // The model streamed its reply: the page shows what it wrote, the tools it called included.
  if (!(await page.isVisible("#tokens"))) await fail("the model's output is not shown");
  const written = await page.textContent("#tokens");
  if (!written.includes('"get_weather"') || !written.includes('"send_email"')) await fail(`model output: ${written.slice(0, 200)}`);
  if (!(await page.$('#dag line[data-from="s2"][data-to="s3"]'))) await fail("no DAG edge s2 -> s3 on the new plan");
  await page.screenshot({ path: `${shots}/4-streamed-plan-dag.png`, fullPage: true });
  problems.push(...(await audit(page, "streamed plan")));
  if (problems.length) await fail(`accessibility (axe-core):\n${problems.join("\n")}`);
  console.log("review page: OK");
} catch (e) { await fail(String(e)); }
await browser.close();
