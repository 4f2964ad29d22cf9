#!/usr/bin/env python3
"""Drives plansmith's MCP server with the official Python MCP SDK (`mcp`, PyPI; installed by
scripts/mcp-servers.sh), a client plansmith did not write.

    mcp-client.py --plan QUERY stdio COMMAND [ARG…]  only `plan` QUERY; its answer
    mcp-client.py [--elicit] stdio COMMAND [ARG…]   spawn `plansmith mcp …`, talk over stdio
    mcp-client.py [--elicit] http URL [TOKEN]       streamable HTTP (http://127.0.0.1:8080/mcp)
    mcp-client.py --tasks [--run] stdio|http …      the same questions, each `plan` call a task
    mcp-client.py --rounds [--run] stdio|http …     the same questions, asked in rounds (no tasks)
    mcp-client.py --tasks --start-run http URL      plan, accept, start `run` as a task; its id
    mcp-client.py --tasks --await ID http URL       poll task ID to its end; its answer

Runs one scenario and prints one JSON object with what the server answered (the Rust test
asserts on it). Exit 0 when the session ran, 1 otherwise.

- default: list the tools, `plan` a request, read it back and mark a step with `planning`,
  `feedback accept`, and a few error cases;
- `--elicit`: the client declares the elicitation capability and plans three requests whose
  plans ask questions: it answers the first question with the form it was given, declines
  the second and cancels the third; every elicitation request it got is in the report.
- `--tasks`: the `--elicit` scenario through the SDK's high-level `Client` with the tasks
  extension (`io.modelcontextprotocol/tasks`), which the SDK leaves to an extension: a call the
  server makes a task is polled with `tasks/get` to its end, and a question the task asks
  (`input_required`) is answered through the same elicitation callback, then `tasks/update`.
  The report's `tasks` lists each task with the statuses it went through. With `--run`, the
  first plan is then accepted and run (`run` with `wait`, a task too) and its approvals are
  granted through the task.
- `--rounds`: the same through the high-level `Client` without the tasks extension: a
  2026-07-28 server answers a call that asks with `InputRequiredResult`, and the SDK answers
  through the elicitation callback and calls again (multi round-trip requests).
- `--start-run` plans the README request, accepts it and calls `run` (`wait`) as a task, and
  prints the task's id once the task is working, without waiting for it; `--await ID` polls
  that task to its end, possibly on another server process, as the extension does.
"""
import asyncio
import json
import sys

from typing import Any, Literal

import anyio
import httpx2
import mcp_types
from mcp import Client, ClientSession, types
from mcp.client.context import ClientRequestContext
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import TypeAdapter


async def call(session, name, arguments):
    result = await session.call_tool(name, arguments)
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    return {"is_error": result.is_error, "structured": result.structured_content, "text": text}


async def default_scenario(session):
    init = await session.initialize()
    out = {"server": init.server_info.name, "protocol": init.protocol_version}
    tools = await session.list_tools()
    out["tools"] = sorted(tool.name for tool in tools.tools)
    out["plan_required"] = next(t.input_schema for t in tools.tools if t.name == "plan").get("required")
    planned = await call(session, "plan", {"query": "What's the weather in Paris? Email it to bob@example.com"})
    out["plan"] = planned
    plan_id = (planned["structured"] or {}).get("plan_id")
    out["get"] = await call(session, "planning", {"command": "get", "plan_id": plan_id})
    out["mark"] = await call(session, "planning", {"command": "mark_step", "plan_id": plan_id,
                                                   "step_index": 0, "step_status": "completed"})
    out["accept"] = await call(session, "feedback", {"plan_id": plan_id, "action": "accept"})
    out["accept_again"] = await call(session, "feedback", {"plan_id": plan_id, "action": "accept"})
    out["unknown"] = await call(session, "planning", {"command": "get", "plan_id": "no-such-plan"})
    out["list"] = await call(session, "planning", {"command": "list"})
    return out


class Elicitor:
    """Answers plansmith's questions: `reply` says how the next one is answered."""

    def __init__(self):
        self.reply = "accept"
        self.asked = []

    async def __call__(self, context, params):
        from mcp import types

        schema = params.requested_schema
        self.asked.append({"message": params.message, "schema": schema, "reply": self.reply})
        if self.reply == "accept":
            # Fill the form: an email field with Bob's address, a yes/no field with yes, a
            # choice with its first option, any other field with "Paris".
            content = {}
            for name, field in schema.get("properties", {}).items():
                if field.get("format") == "email":
                    content[name] = "bob@example.com"
                elif field.get("type") == "boolean":
                    content[name] = True
                elif field.get("enum"):
                    content[name] = field["enum"][0]
                else:
                    content[name] = "Paris"
            return types.ElicitResult(action="accept", content=content)
        return types.ElicitResult(action=self.reply)


async def elicit_scenario(session, elicitor):
    init = await session.initialize()
    out = {"server": init.server_info.name, "protocol": init.protocol_version}
    return await ask_three(session, elicitor, out)


async def ask_three(session, elicitor, out):
    """Plans three requests whose plans ask: answered, declined, cancelled."""
    # No repairs: a plan that lacks an argument asks for it at once.
    options = {"max_repairs": 0}
    elicitor.reply = "accept"
    out["answered"] = await call(session, "plan", {"query": "What's the weather in Paris? Email it to my friend",
                                                   "options": options})
    elicitor.reply = "decline"
    out["declined"] = await call(session, "plan", {"query": "Send me the Paris weather every morning at 9",
                                                   "options": options})
    elicitor.reply = "cancel"
    out["cancelled"] = await call(session, "plan", {"query": "Email the Paris weather to my friend",
                                                    "options": options})
    out["asked"] = list(elicitor.asked)
    return out


class TaskHandle(mcp_types.Result):
    """The answer of a call the server made a task (`resultType: "task"`)."""

    result_type: Literal["task"]
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class TaskRequest(types.Request[dict[str, Any], str]):
    """`tasks/get` and `tasks/update`, which the SDK does not define."""

    name_param = "taskId"


ANY = TypeAdapter(dict[str, Any])


class Tasks(ClientExtension):
    """The tasks extension: polls a task to its end and answers the questions it asks."""

    identifier = "io.modelcontextprotocol/tasks"

    def __init__(self):
        self.log = []

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self.resolve)]

    async def resolve(self, handle, context):
        session = context.session
        entry = {"tool": context.tool_name, "task_id": handle.task_id, "statuses": [handle.status],
                 "answered": []}
        self.log.append(entry)
        params = {"taskId": handle.task_id}
        for _ in range(2400):
            await anyio.sleep(min(handle.poll_interval_ms or 200, 500) / 1000)
            task = await session.send_request(TaskRequest(method="tasks/get", params=params), ANY)
            status = task.get("status")
            if entry["statuses"][-1] != status:
                entry["statuses"].append(status)
            if status == "completed":
                return types.CallToolResult.model_validate(task["result"])
            if status in ("failed", "cancelled"):
                raise RuntimeError(f"task {handle.task_id} {status}: {task.get('error')}")
            if status == "input_required":
                asked = types.InputRequiredResult.model_validate(
                    {"resultType": "input_required", "inputRequests": task["inputRequests"]})
                responses = {}
                for key, request in asked.input_requests.items():
                    if key in entry["answered"]:
                        continue
                    answer = await session.dispatch_input_request(
                        ClientRequestContext(session=session, request_id=key, meta=None), request)
                    responses[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
                    entry["answered"].append(key)
                if responses:
                    update = {**params, "inputResponses": responses}
                    await session.send_request(TaskRequest(method="tasks/update", params=update), ANY)
        raise RuntimeError(f"task {handle.task_id} did not end")


async def tasks_scenario(client, elicitor, tasks, run):
    out = {"server": client.server_info.name, "protocol": client.protocol_version}
    out = await ask_three(client, elicitor, out)
    # A made-up state of a round of questions is refused, not taken for anybody's.
    try:
        await client.call_tool("plan", {"query": "Weather in Paris"}, request_state="ask.made-up")
        out["made_up_state"] = "taken"
    except Exception as err:  # what the server answered, for the test to read
        out["made_up_state"] = str(err)
    if run:
        plan_id = (out["answered"]["structured"] or {}).get("plan_id")
        out["accept"] = await call(client, "feedback", {"plan_id": plan_id, "action": "accept"})
        elicitor.reply = "accept"
        out["run"] = await call(client, "run", {"plan_id": plan_id, "wait": True})
        out["run_asked"] = elicitor.asked[len(out["asked"]):]
    out["tasks"] = tasks.log
    return out


async def start_run_scenario(client):
    planned = await call(client, "plan", {"query": "What's the weather in Paris? Email it to bob@example.com"})
    plan_id = (planned["structured"] or {}).get("plan_id")
    accepted = await call(client, "feedback", {"plan_id": plan_id, "action": "accept"})
    handle = await client.session.call_tool("run", {"plan_id": plan_id, "wait": True}, allow_claimed=True)
    return {"plan": planned, "accept": accepted, "task_id": handle.task_id, "status": handle.status}


async def await_scenario(client, tasks, task_id):
    handle = TaskHandle(result_type="task", task_id=task_id, status="working")
    context = ClaimContext(session=client.session, tool_name="run", read_timeout_seconds=None)
    try:
        result = await tasks.resolve(handle, context)
        answer = {"is_error": result.is_error, "structured": result.structured_content}
    except Exception as err:  # what the server answered, for the test to read
        answer = {"error": str(err)}
    return {"answer": answer, "tasks": tasks.log}


async def main():
    client_mode = sys.argv.pop(1)[2:] if len(sys.argv) > 1 and sys.argv[1] in ("--tasks", "--rounds") else None
    flow = "questions"
    if len(sys.argv) > 1 and sys.argv[1] in ("--run", "--start-run"):
        flow = sys.argv.pop(1)[2:]
    elif len(sys.argv) > 2 and sys.argv[1] == "--await":
        flow = sys.argv[2]
        del sys.argv[1:3]
    if client_mode:
        print(json.dumps(await high_level_main(flow, client_mode == "tasks")))
        return
    elicit = len(sys.argv) > 1 and sys.argv[1] == "--elicit"
    if elicit:
        del sys.argv[1]
    query = None
    if len(sys.argv) > 2 and sys.argv[1] == "--plan":
        query = sys.argv[2]
        del sys.argv[1:3]
    elicitor = Elicitor()
    options = {"elicitation_callback": elicitor} if elicit else {}

    async def scenario(session):
        if elicit:
            return await elicit_scenario(session, elicitor)
        if query is not None:
            await session.initialize()
            return {"plan": await call(session, "plan", {"query": query})}
        return await default_scenario(session)

    mode = sys.argv[1]
    if mode == "stdio":
        params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, **options) as session:
                result = await scenario(session)
    elif mode == "http":
        headers = {"Authorization": f"Bearer {sys.argv[3]}"} if len(sys.argv) > 3 else {}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as client:
            async with streamable_http_client(sys.argv[2], http_client=client) as (read, write):
                async with ClientSession(read, write, **options) as session:
                    result = await scenario(session)
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(result))


async def high_level_main(flow, with_tasks):
    """The high-level `Client`, with the tasks extension or without. `flow`: "questions", "run"
    (questions, then a run), "start-run", or a task id to await."""
    elicitor = Elicitor()
    tasks = Tasks()
    options = {"extensions": [tasks] if with_tasks else [], "elicitation_callback": elicitor,
               "read_timeout_seconds": 60}

    async def scenario(client):
        if flow in ("questions", "run"):
            return await tasks_scenario(client, elicitor, tasks, flow == "run")
        if flow == "start-run":
            return await start_run_scenario(client)
        return await await_scenario(client, tasks, flow)

    mode = sys.argv[1]
    if mode == "stdio":
        params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:])
        async with Client(params, **options) as client:
            return await scenario(client)
    if mode == "http":
        headers = {"Authorization": f"Bearer {sys.argv[3]}"} if len(sys.argv) > 3 else {}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            async with Client(streamable_http_client(sys.argv[2], http_client=http), **options) as client:
                return await scenario(client)
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    asyncio.run(main())
