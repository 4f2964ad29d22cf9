// Drives the review page in headless Chromium (playwright-core) through a run of an accepted
// plan (s1's tool reports its progress, shown in its status) whose step s2 needs approval (audited with axe-core while it waits; reopened then, the
// page knows the run waits and offers no "Run"). Usage:
//   node scripts/review-page-run.mjs BASE_URL PLAN_ID SCREENSHOT_DIR STOP_PLAN_ID
// (STOP_PLAN_ID: an accepted copy of the plan that never ran: run, then stopped while it waits.)
// Env: PLANSMITH_TEST_PLAYWRIGHT (playwright-core dir), PLANSMITH_TEST_CHROMIUM (binary).
import { audit, launch, text } from "./review-page-browser.mjs";
const [base, id, shots, stopId] = process.argv.slice(2);
const { browser, fail } = await launch();
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(15000);
  await page.goto(base + "/");
  await page.click(`button[data-id="${id}"]`);
  await page.waitForSelector("#main[data-live]");
  if ((await page.evaluate(text, "#state")) !== "accepted") await fail(`state ${await page.evaluate(text, "#state")}`);
  if ((await page.evaluate(text, "#run")) !== "Run") await fail(`the button before a run says ${await page.evaluate(text, "#run")}`);
  // What the run will cost, before it runs: two calls one after the other, never timed here.
  await page.waitForFunction(() => (document.querySelector("#estimate")?.textContent || "").includes("2 tool call(s) (get_weather ×1, send_email ×1;"));
  if (!(await page.evaluate(text, "#estimate")).includes("~2 s")) await fail(`estimate: ${await page.evaluate(text, "#estimate")}`);
  // Every text s1's status shows during the run (the tool reports its progress once).
  await page.evaluate(() => {
    window.s1Texts = [];
    new MutationObserver(() => {
      const t = document.querySelector("#step-s1 .status")?.textContent;
      if (t && window.s1Texts.at(-1) !== t) window.s1Texts.push(t);
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  await page.click("#run");
  // s1 runs and its result shows; s2 waits for approval, with the buttons to decide.
  await page.waitForFunction(() => document.querySelector("#step-s1 .status")?.textContent === "completed"
    && document.querySelector("#step-s1 .result")?.textContent.includes("Sunny, 21 °C"));
  const s1Texts = await page.evaluate(() => window.s1Texts);
  if (!s1Texts.includes("in progress · 1/2 · asking the weather service")) await fail(`s1's progress never showed: ${JSON.stringify(s1Texts)}`);
  await page.waitForSelector('#step-s2 button[data-verdict="approve"]');
  if ((await page.evaluate(text, "#step-s2 .status")) !== "blocked") await fail(`s2 is ${await page.evaluate(text, "#step-s2 .status")}`);
  if (!(await page.evaluate(text, "#step-s2 .note")).includes("waiting for approval")) await fail(`s2 note: ${await page.evaluate(text, "#step-s2 .note")}`);
  // How far an approval reaches is a choice beside the button (this run, the plan, the call).
  const reaches = await page.evaluate(() => [...document.querySelectorAll("#remember-s2 option")].map((o) => o.value).join(","));
  if (reaches !== "run,plan,call") await fail(`approval scopes: ${reaches}`);
  // With no wait for people (the executor's default), the run pauses until someone decides.
  await page.waitForFunction(() => document.querySelector("#run-state")?.textContent === "Run waiting: waiting for a decision on s2");
  // A run in progress is not offered again (the server would refuse it)…
  if (await page.isVisible("#run")) await fail(`a waiting run offers "${await page.evaluate(text, "#run")}"`);
  // …also to a reviewer who opens the plan only now: the stream's `exec_run` says it waits.
  await page.reload();
  await page.click(`button[data-id="${id}"]`);
  await page.waitForSelector("#main[data-live]");
  await page.waitForFunction(() => document.querySelector("#run-state")?.textContent === "Run waiting: waiting for a decision on s2");
  if (await page.isVisible("#run")) await fail(`the reopened plan offers "${await page.evaluate(text, "#run")}" during its run`);
  // Drawn again during the run (as each plan_updated does), it still offers none.
  await page.evaluate(async (id) => { const r = await api("GET", `/v1/plans/${id}`); render(r.body); }, id);
  if (await page.isVisible("#run")) await fail(`the plan drawn again offers "${await page.evaluate(text, "#run")}" during its run`);
  if ((await page.evaluate(text, "#step-s1 .status")) !== "completed") await fail(`reopened: s1 is ${await page.evaluate(text, "#step-s1 .status")}`);
  // s2's body is s1's output: said so, with a link to s1.
  const body = await page.evaluate(() => [...document.querySelectorAll("#step-s2 .arg")].map((p) => p.textContent).find((t) => t.startsWith("body = ")));
  if (body !== "body = s1.output.summary (from the output of s1)") await fail(`s2's body reads ${body}`);
  if ((await page.getAttribute("#step-s2 .arg a", "href")) !== "#step-s1") await fail("s2's reference does not link to s1");
  if ((await page.getAttribute('#dag g[data-step="s2"] rect', "class")) !== "blocked") await fail("DAG node s2 not blocked");
  await page.screenshot({ path: `${shots}/7-approval.png`, fullPage: true });
  const problems = await audit(page, "step waiting for approval");
  if (problems.length) await fail(`accessibility (axe-core):\n${problems.join("\n")}`);
  await page.click('#step-s2 button[data-verdict="approve"]');
  // The decision resumes the run: s2 sends the email with s1's summary, s3 replies, the run completes.
  await page.waitForFunction(() => document.querySelector("#step-s2 .status")?.textContent === "completed"
    && document.querySelector("#step-s3 .status")?.textContent === "completed");
  await page.waitForFunction(() => document.querySelector("#run-state")?.textContent === "Run completed");
  // The result comes with the plan the executor writes just after the events.
  await page.waitForFunction(() => document.querySelector("#step-s2 .result")?.textContent.includes('"sent":true'));
  if (await page.$('#step-s2 button[data-verdict]')) await fail("decision buttons left on a completed step");
  // The plan stays accepted (what the server's `actions` list says it allows: run it again).
  await page.waitForFunction(() => document.querySelector("#run")?.textContent === "Run again" && !document.querySelector("#run").hidden);
  if (await page.$("#accept, #reject, #changes")) await fail("an accepted plan offers review controls");
  await page.screenshot({ path: `${shots}/8-run-completed.png`, fullPage: true });
  if (await page.isVisible("#stop-run")) await fail("a finished run offers to be stopped");

  // The same plan under another id: run, stopped while it waits for the approval.
  await page.click(`button[data-id="${stopId}"]`);
  // Drawn (its button says "Run": it never ran; the first plan's says "Run again") and live.
  await page.waitForFunction(() => document.querySelector("#run")?.textContent === "Run" && document.querySelector("#main[data-live]"));
  if (await page.isVisible("#stop-run")) await fail("a plan that never ran offers to stop its run");
  await page.click("#run");
  await page.waitForFunction(() => document.querySelector("#run-state")?.textContent === "Run waiting: waiting for a decision on s2");
  if (!(await page.isVisible("#stop-run"))) await fail("a waiting run offers no way to stop it");
  await page.click("#stop-run");
  // Stopped: the run ends aborted, the waiting step and the rest are not run, and it may be run again.
  await page.waitForFunction(() => document.querySelector("#run-state")?.textContent === "Run aborted: stopped by api");
  await page.waitForFunction(() => document.querySelector("#step-s2 .status")?.dataset.status === "skipped"
    && document.querySelector("#step-s3 .status")?.dataset.status === "skipped");
  if (await page.isVisible("#stop-run")) await fail("a stopped run still offers to be stopped");
  await page.waitForFunction(() => !document.querySelector("#run").hidden);
  await page.screenshot({ path: `${shots}/9-run-stopped.png`, fullPage: true });
  console.log("review page run: OK");
} catch (e) { await fail(String(e)); }
await browser.close();
