"""The official `anthropic` Python SDK against the gateway, on one route.

Usage: anthropic_client.py BASE_URL KEY MODEL LIMITED_MODEL

MODEL is a route that answers (pass-through or translated); LIMITED_MODEL is one the
test scripted to answer 429 with a Retry-After. Prints one line per check, which the
Rust test compares exactly.
"""

import sys

import anthropic

base, key, model, limited = sys.argv[1:5]
client = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)
messages = [{"role": "user", "content": "Hello there, mock!"}]

m = client.messages.create(model=model, max_tokens=1024, messages=messages)
print(
    f"create: {m.content[0].text} | {m.stop_reason} | tokens "
    f"{m.usage.input_tokens}+{m.usage.output_tokens}"
)

with client.messages.stream(model=model, max_tokens=1024, messages=messages) as s:
    events = [e.type for e in s]
    final = s.get_final_message()
print(
    f"stream: {final.content[0].text} | {final.stop_reason} | "
    f"{events.count('text')} text events | last {events[-1]}"
)

tools = [
    {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
ask = [
    {
        "role": "user",
        "content": 'What is the weather? [[tool:get_weather {"city":"Paris"}]]',
    }
]
with client.messages.stream(
    model=model, max_tokens=1024, messages=ask, tools=tools
) as s:
    first = s.get_final_message()
call = next(b for b in first.content if b.type == "tool_use")
print(f"tool call: {call.name} {call.input} | {first.stop_reason}")
reply = client.messages.create(
    model=model,
    max_tokens=1024,
    tools=tools,
    messages=ask
    + [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}
            ],
        },
    ],
)
print(f"tool result: {reply.content[0].text} | {reply.stop_reason}")

count = client.messages.count_tokens(model=model, messages=messages)
print(f"count_tokens: {count.input_tokens}")

listed = [m.id for m in client.models.list()]
print(f"models: {len(listed)}, first {listed[0]}, last {listed[-1]}")

try:
    anthropic.Anthropic(base_url=base, api_key="sy-wrong", max_retries=0).messages.create(
        model=model, max_tokens=16, messages=messages
    )
except anthropic.AuthenticationError as e:
    print(f"bad key: {e.status_code} {type(e).__name__} {e.body['error']['type']}")

try:
    client.messages.create(model="nope/nothing", max_tokens=16, messages=messages)
except anthropic.NotFoundError as e:
    print(f"unknown model: {e.status_code} {type(e).__name__} {e.body['error']['type']}")

try:
    client.messages.create(model=limited, max_tokens=16, messages=messages)
except anthropic.RateLimitError as e:
    print(
        f"rate limited: {e.status_code} {type(e).__name__} retry-after "
        f"{e.response.headers['retry-after']}"
    )
