"""Drives the gateway with the official openai package; prints what it parsed.

Usage: openai_client.py BASE_URL KEY [MODEL]   (MODEL: the chat route, default `fast`)
"""
import sys

from openai import NotFoundError, OpenAI

base_url, api_key = sys.argv[1], sys.argv[2]
route = sys.argv[3] if len(sys.argv) > 3 else "fast"
client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
messages = [{"role": "user", "content": "Hello there, mock!"}]

completion = client.chat.completions.create(model=route, messages=messages)
usage = completion.usage
print(
    f"non-streaming: {completion.choices[0].message.content} "
    f"| tokens {usage.prompt_tokens}+{usage.completion_tokens}"
)

text = []
chunks = 0
for chunk in client.chat.completions.create(model=route, messages=messages, stream=True):
    chunks += 1
    if chunk.choices and chunk.choices[0].delta.content:
        text.append(chunk.choices[0].delta.content)
print(f"streaming: {''.join(text)} | chunks {chunks}")

model = client.models.retrieve("alpha/mock-small")
print(f"retrieve: {model.id} owned by {model.owned_by}")
try:
    client.models.retrieve("alpha/no-such-model")
except NotFoundError as e:
    print(f"retrieve unknown: {e.status_code} {e.body['code']}")

