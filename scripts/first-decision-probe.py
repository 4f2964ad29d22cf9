#!/usr/bin/env python3
"""How sure is the model that a request needs a call? An OpenAI-compatible stand-in for
`plansmith eval plan --model openai-compatible:…`: for each planning request plansmith sends in
the tool-call format, it asks a llama-server (the same GGUF) for the first token's distribution
of the same messages, and of the same messages with the request replaced by a content-free one
("N/A", contextual calibration), writes the probability that the answer starts a call
(`<`, a fence, `{` or `[`) for both as a JSON line, and answers plansmith with plain text.

    llama-server -m MODEL.gguf --port 18091 --jinja &
    python3 scripts/first-decision-probe.py http://127.0.0.1:18091 probe.jsonl N/A 18090 &
    plansmith eval plan --plan-format calls --model openai-compatible:http://127.0.0.1:18090/v1#m \
        --cases ../shared/eval/data/bfcl_cases.jsonl --limit 30 --out /tmp/out.jsonl

Arguments: the llama-server URL, the output file, the content-free request, the port to serve on.
"""
import json, math, sys, urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

LLAMA = sys.argv[1]
OUT = open(sys.argv[2], "a")
NULL = sys.argv[3] if len(sys.argv) > 3 else "N/A"

def first_token(messages):
    body = {"messages": messages, "max_tokens": 1, "temperature": 0, "logprobs": True, "top_logprobs": 20}
    req = urllib.request.Request(LLAMA + "/v1/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"})
    out = json.load(urllib.request.urlopen(req, timeout=300))
    top = out["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    pairs = [(t["token"], math.exp(t["logprob"])) for t in top]
    p_call = sum(p for tok, p in pairs if tok[:1] in "<`{[")
    return p_call, pairs[:5]

def replaced(messages, text):
    out = []
    for m in messages:
        c = m.get("content") or ""
        if m["role"] == "user" and "## Request\n" in c:
            head, _, _ = c.partition("## Request\n")
            c = head + "## Request\n" + text
        out.append({**m, "content": c})
    return out

class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        messages = body["messages"]
        user = [m for m in messages if m["role"] == "user"]
        query = (user[0]["content"].partition("## Request\n")[2] if user else "").strip()
        if len(user) == 1:
            p, top = first_token(messages)
            pn, topn = first_token(replaced(messages, NULL))
            OUT.write(json.dumps({"query": query, "p_call": p, "p_null": pn, "top": top, "top_null": topn}) + "\n")
            OUT.flush()
        reply = {"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "I can't do that with the tools I have."}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(reply).encode()
        self.send_response(200); self.send_header("content-type", "application/json"); self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)

HTTPServer(("127.0.0.1", int(sys.argv[4]) if len(sys.argv) > 4 else 18090), H).serve_forever()
