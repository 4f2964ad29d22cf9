#!/usr/bin/env node
// Drives plansmith's AG-UI endpoint with the official AG-UI TypeScript client (`HttpAgent` of
// npm @ag-ui/client, installed by scripts/agui-client.sh into $PLANSMITH_TEST_AGUI), a client
// plansmith did not write: it parses the event stream, checks the event order and applies
// STATE_SNAPSHOT / STATE_DELTA to the agent's state.
//
//   node scripts/agui-client.mjs URL THREAD_ID   # URL: http://HOST/v1/plans/ID/events
//
// Runs the agent once; then, while the run ended in an interrupt, answers every interrupt
// (a review: accept and run; an approval: approve; a question: its recommended answer or
// "Paris") and runs again, at most three times. Prints one JSON object: each run's event
// types, its events, the interrupts it left and the agent's state after it.
import { createRequire } from "node:module";

const require = createRequire(`${process.env.PLANSMITH_TEST_AGUI}/`);
const { HttpAgent } = require("@ag-ui/client");

const [url, threadId] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId });
const runs = [];

async function run(params) {
  const events = [];
  let error = null;
  let result = null;
  try {
    const answer = await agent.runAgent(params, {
      onEvent({ event }) {
        events.push(event);
      },
    });
    result = answer.result ?? null;
  } catch (err) {
    error = String(err && err.message ? err.message : err);
  }
  runs.push({
    types: events.map((e) => e.type),
    events,
    result,
    error,
    interrupts: agent.pendingInterrupts ?? [],
    state: agent.state,
  });
}

function answer(interrupt) {
  switch (interrupt.reason) {
    case "plansmith/review":
      return { decision: "accept", run: true };
    case "tool_approval":
      return { approve: true };
    default:
      return { answer: interrupt.metadata?.default ?? "Paris" };
  }
}

await run({});
for (let i = 0; i < 3 && (agent.pendingInterrupts ?? []).length > 0; i++) {
  const resume = agent.pendingInterrupts.map((interrupt) => ({
    interruptId: interrupt.id,
    status: "resolved",
    payload: answer(interrupt),
  }));
  await run({ resume });
}
console.log(JSON.stringify({ runs }));
