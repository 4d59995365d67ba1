"""The official `openai` Python SDK's Responses API against the gateway, on one route.

Usage: openai_responses.py BASE_URL KEY MODEL

Prints one line per check, which the Rust test compares exactly.
"""

import json
import sys

import openai

base, key, model = sys.argv[1:4]
client = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
ask = [{"role": "user", "content": "Hello there, mock!"}]

r = client.responses.create(model=model, input=ask)
print(
    f"create: {r.output_text} | {r.status} | tokens "
    f"{r.usage.input_tokens}+{r.usage.output_tokens}"
)

events = []
with client.responses.stream(model=model, input=ask) as s:
    for e in s:
        events.append(e.type)
    final = s.get_final_response()
print(
    f"stream: {final.output_text} | {final.status} | "
    f"{events.count('response.output_text.delta')} deltas | last {events[-1]}"
)

tools = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
turn = [
    {
        "role": "user",
        "content": 'What is the weather? [[tool:get_weather {"city":"Paris"}]]',
    }
]
with client.responses.stream(model=model, input=turn, tools=tools) as s:
    first = s.get_final_response()
call = next(i for i in first.output if i.type == "function_call")
print(f"function call: {call.name} {json.loads(call.arguments)} | {first.status}")
history = turn + [
    {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
    {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
]
reply = client.responses.create(model=model, input=history, tools=tools)
print(f"function result: {reply.output_text} | {reply.status}")

try:
    client.responses.create(model="nope/nothing", input=ask)
except openai.NotFoundError as e:
    print(f"unknown model: {e.status_code} {type(e).__name__} {e.code}")
