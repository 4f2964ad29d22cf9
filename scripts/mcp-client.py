#!/usr/bin/env python3
"""Drives plansmith's MCP server with the official Python MCP SDK (`mcp`, PyPI; installed by
scripts/mcp-servers.sh), a client plansmith did not write.

    mcp-client.py --plan QUERY stdio COMMAND [ARG…]  only `plan` QUERY; its answer
    mcp-client.py [--elicit] stdio COMMAND [ARG…]   spawn `plansmith mcp …`, talk over stdio
    mcp-client.py [--elicit] http URL [TOKEN]       streamable HTTP (http://127.0.0.1:8080/mcp)

Runs one scenario and prints one JSON object with what the server answered (the Rust test
asserts on it). Exit 0 when the session ran, 1 otherwise.

- default: list the tools, `plan` a request, read it back and mark a step with `planning`,
  `feedback accept`, and a few error cases;
- `--elicit`: the client declares the elicitation capability and plans three requests whose
  plans ask questions: it answers the first question with the form it was given, declines
  the second and cancels the third; every elicitation request it got is in the report.
"""
import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


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
            # Fill the form: an email field with Bob's address, any other field with "Paris".
            content = {}
            for name, field in schema.get("properties", {}).items():
                content[name] = "bob@example.com" if field.get("format") == "email" else "Paris"
            return types.ElicitResult(action="accept", content=content)
        return types.ElicitResult(action=self.reply)


async def elicit_scenario(session, elicitor):
    init = await session.initialize()
    out = {"server": init.server_info.name, "protocol": init.protocol_version}
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
    out["asked"] = elicitor.asked
    return out


async def main():
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


if __name__ == "__main__":
    asyncio.run(main())
