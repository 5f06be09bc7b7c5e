#!/usr/bin/python3
"""Golden renders of the chat templates kvfork supports, made by Python's jinja2
configured as transformers configures it (transformers/utils/chat_template_utils.py,
_compile_jinja_template): ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[loopcontrols]), tojson overridden to
json.dumps(ensure_ascii=False, indent=, separators=, sort_keys=), globals
raise_exception (TemplateError with the template's message) and strftime_now
(datetime.now() pinned to each case's "now" so renders are reproducible).

  /usr/bin/python3 tools/chat_template/make_goldens.py            # rewrite the goldens
  /usr/bin/python3 tools/chat_template/make_goldens.py --out F     # write them to F
  /usr/bin/python3 tools/chat_template/make_goldens.py --check     # compare with the goldens

Run with TZ=UTC semantics (set below) so strftime_now is the same everywhere.
"""
import argparse
import copy
import datetime
import json
import os
import sys
import time

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("KVFORK_CACHE_DIR", os.path.join(ROOT, ".cache"))
GOLDENS = os.path.join(ROOT, "tests", "data", "chat_template", "goldens.json")


def load_templates():
    def from_config(pkg):
        path = os.path.join(CACHE, "npm", pkg, "package", "models", "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        tokens = {k: cfg[k] for k in ("bos_token", "eos_token") if cfg.get(k) is not None}
        return cfg["chat_template"], tokens

    def from_file(name, tokens):
        with open(os.path.join(CACHE, "llama.cpp", "models", "templates", name), encoding="utf-8") as f:
            return f.read(), tokens

    llama_tokens = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    return {
        "qwen3": from_config("tokenizer-qwen3"),
        "llama3": from_config("tokenizer-llama3"),
        "llama3.1": from_file("meta-llama-Llama-3.1-8B-Instruct.jinja", llama_tokens),
        "llama3.2": from_file("meta-llama-Llama-3.2-3B-Instruct.jinja", llama_tokens),
    }


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(now).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Returns \"°C\" & <units>.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer", "default": 3}}},
    },
}

SYS = {"role": "system", "content": "You are a helpful assistant.\n"}
U1 = {"role": "user", "content": "Hello! How are you?"}
A1 = {"role": "assistant", "content": "I'm fine, thanks. How can I help?"}
U2 = {"role": "user", "content": "  Write a haiku about \"caches\" and 'blocks'.\n\n"}
A2 = {"role": "assistant", "content": "Blocks shared in the trie\nprefixes hit, tokens saved\nthe cache remembers"}
U_UNI = {"role": "user", "content": "Grüße aus Köln — 日本語も 🙂 and tabs\tand \\backslashes\\"}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
CALL_STR = {"role": "assistant", "content": "Let me check.", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Berlin\"}"}}]}
CALL_TWO = {"role": "assistant", "content": None, "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
    {"type": "function", "function": {"name": "search", "arguments": {"q": "Paris events", "n": 2.5}}}]}
TOOL_RES = {"role": "tool", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}
TOOL_RES2 = {"role": "tool", "content": "Louvre night opening"}
TOOL_DICT = {"role": "tool", "content": {"temperature": 21.5, "ok": True, "note": None}}
A_AFTER = {"role": "assistant", "content": "It is 21 °C and clear in Paris."}
U_WEATHER = {"role": "user", "content": "What's the weather in Paris?"}
A_THINK = {"role": "assistant", "content": "<think>\nThe user greets me.\nBe kind.\n</think>\n\nHi there!"}
A_THINK2 = {"role": "assistant", "content": "<think>short</think>Sure: 42."}
A_REASON = {"role": "assistant", "content": "The answer is 4.", "reasoning_content": "2+2=4"}
U_EMPTY = {"role": "user", "content": ""}

CONVERSATIONS = {
    "user": [U1],
    "system_user": [SYS, U1],
    "multi_turn": [U1, A1, U2],
    "system_multi_turn": [SYS, U1, A1, U2, A2],
    "unicode": [SYS, U_UNI],
    "empty_user": [U_EMPTY],
    "tool_call": [U_WEATHER, CALL, TOOL_RES, A_AFTER],
    "tool_call_pending": [SYS, U_WEATHER, CALL, TOOL_RES],
    "tool_call_string_args": [U_WEATHER, CALL_STR, TOOL_RES],
    "tool_call_dict_result": [U_WEATHER, CALL, TOOL_DICT],
    "two_tool_calls_empty_content": [U_WEATHER, dict(CALL_TWO, content=""), TOOL_RES, TOOL_RES2],
    "two_tool_calls": [U_WEATHER, CALL_TWO, TOOL_RES, TOOL_RES2, A_AFTER],
    "think_history": [U1, A_THINK, U2],
    "think_last": [U1, A1, U2, A_THINK],
    "think_inline": [U2, A_THINK2],
    "reasoning_content": [U1, A_REASON, U2, A_REASON],
    "tool_after_think": [U_WEATHER, dict(CALL, content="<think>\nneed weather\n</think>\n\n"), TOOL_RES],
}

TOOL_CONVERSATIONS = ["user", "system_user", "tool_call", "tool_call_pending",
                      "tool_call_string_args", "two_tool_calls", "multi_turn"]

NOW = 1721995200 + 12345  # 26 Jul 2024, so strftime_now and the 3.1 default agree in spirit


def cases_for(name, tokens):
    cases = []

    def add(case_name, messages, **extra):
        ctx = {"messages": copy.deepcopy(messages)}
        ctx.update(tokens)
        ctx.update(extra)
        cases.append({"name": case_name, "context": ctx, "now": NOW})

    for conv, msgs in CONVERSATIONS.items():
        if name != "qwen3" and conv.startswith(("think", "reasoning", "tool_after")):
            continue
        for agp in (True, False):
            base = f"{conv}/agp={int(agp)}"
            if name == "qwen3":
                add(base, msgs, add_generation_prompt=agp)
                add(base + "/think=0", msgs, add_generation_prompt=agp, enable_thinking=False)
                add(base + "/think=1", msgs, add_generation_prompt=agp, enable_thinking=True)
            elif name.startswith("llama3."):
                add(base + "/date", msgs, add_generation_prompt=agp, date_string="02 Dec 2026")
                add(base, msgs, add_generation_prompt=agp)
            else:
                add(base, msgs, add_generation_prompt=agp)
    if name in ("qwen3", "llama3.1", "llama3.2"):
        for conv in TOOL_CONVERSATIONS:
            msgs = CONVERSATIONS[conv]
            add(f"tools/{conv}", msgs, add_generation_prompt=True, tools=[WEATHER, SEARCH])
            add(f"tools/{conv}/agp=0", msgs, add_generation_prompt=False, tools=[WEATHER])
            if name != "qwen3":
                add(f"tools_in_system/{conv}", msgs, add_generation_prompt=True,
                    tools=[WEATHER, SEARCH], tools_in_user_message=False)
                add(f"custom_tools/{conv}", msgs, add_generation_prompt=True,
                    custom_tools=[SEARCH], date_string="01 Jan 2025")
        add("tools_none/user", [U1], add_generation_prompt=True, tools=None)
    if name == "llama3.1":
        add("builtin_tools/user", [SYS, U1], add_generation_prompt=True,
            builtin_tools=["brave_search", "wolfram_alpha", "code_interpreter"])
        add("builtin_tools/call", [U1, {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "brave_search", "arguments": {"query": "kv cache"}}}]},
            {"role": "ipython", "content": "results"}], add_generation_prompt=True,
            builtin_tools=["brave_search"])
        add("builtin_tools/custom_call", [U_WEATHER, CALL], add_generation_prompt=False,
            builtin_tools=["brave_search"], tools=[WEATHER])
    if name.startswith("llama3."):
        add("tools/no_user_message", [SYS], add_generation_prompt=True, tools=[WEATHER])
    return cases


# Small templates that pin down one jinja2 behaviour each: whitespace control,
# scoping, Python semantics of values, filters and tests.
MICRO = [
    ("a\n  {% if x %}\n  b\n  {% endif %}\n  c\n", {"x": True}),
    ("  {%- if x %} b {% endif -%}  \n end", {"x": True}),
    ("{{ 'x' }}  {% if 1 %}b{% endif %}\n{# c #}\n  {#- d -#}  e\n", {}),
    ("{%+ if 1 %} keep {%+ endif %}\n x {% if 1 +%}\nno-trim{% endif %}", {}),
    ("{% for m in ms %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}"
     "/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }};"
     "{% endfor %}", {"ms": ["a", "b", "c"]}),
    ("{% for m in ms if m != 'b' %}{{ loop.index }}{{ m }}{% else %}none{% endfor %}"
     "{% for m in [] %}x{% else %}empty{% endfor %}", {"ms": ["a", "b", "c"]}),
    ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}"
     "{% endif %}{{ i }}{% endfor %}", {}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
     "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("{{ s[::-1] }}|{{ s[1:3] }}|{{ s[-2:] }}|{{ l[1:] }}|{{ l[::2] }}|{{ l[-1] }}|{{ s[0] }}|{{ l[5] }}",
     {"s": "héllo", "l": [1, 2, 3, 4, 5]}),
    ("{{ [1, 'a', None, True, 1.5, {'k': (1,)}] }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }}"
     " {{ 3 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 0.1 + 0.2 }}", {}),
    ("{{ d }} {{ d.a }} {{ d['b'] }} {{ d.items() | list }} {{ d.get('z', 'dflt') }} {{ d.keys() | list }}",
     {"d": {"b": 2, "a": "x'y", "c": [None]}}),
    ("{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(separators=(',', ':')) }}"
     "|{{ x | tojson(sort_keys=true) }}|{{ 'é\n\"' | tojson }}|{{ [] | tojson(indent=2) }}",
     {"x": {"z": [1, 2.0, {"q": None}], "a": "ü<>&'", "e": {}, "t": True}}),
    ("{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}"
     "|{{ 'a b c'.split(' ', 1) }}|{{ 'a-b-c'.rsplit('-', 1) }}|{{ 'Hello'.upper() }}{{ 'HeLLo'.lower() }}"
     "|{{ 'hello world'.title() }}|{{ 'hello'.capitalize() }}|{{ 'aaa'.replace('a', 'b', 2) }}"
     "|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ '\n\nx\n'.strip('\n') }}"
     "|{{ 'xay'.lstrip('x') }}{{ 'xay'.rstrip('y') }}|{{ 'abcabc'.find('c') }}{{ 'abc'.count('b') }}", {}),
    ("{{ l | join(', ') }}|{{ l | length }}|{{ l | first }}|{{ l | last }}|{{ l | reverse | list }}"
     "|{{ l | sort | list }}|{{ l | unique | list }}|{{ l | max }}|{{ l | min }}|{{ 'abc' | list }}"
     "|{{ l | map('upper') | join }}|{{ l | select('equalto', 'b') | list }}|{{ l | reject('in', ['a']) | list }}",
     {"l": ["b", "a", "c", "b"]}),
    ("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('+') }}"
     "|{{ ms | rejectattr('role', 'equalto', 'user') | list | length }}|{{ ms | map(attribute='x', default='-') | list }}"
     "|{{ ms | selectattr('x', 'defined') | list }}|{{ ms | sort(attribute='content') | map(attribute='role') | join }}",
     {"ms": [{"role": "user", "content": "b"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "c"}]}),
    ("{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ n is none }}{{ x is string }}{{ x is number }}"
     "{{ 1 is number }}{{ true is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ d is mapping }}{{ d is iterable }}"
     "{{ x is iterable }}{{ y is iterable }}{{ l is sequence }}{{ 3 is odd }}{{ 4 is even }}{{ 6 is divisibleby 3 }}"
     "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 'a' is in 'abc' }}{{ 2 is in l }}{{ x is not none }}"
     "{{ 'b' in d }}{{ 'z' not in d }}{{ 'a' in x }}{{ 3 in l }}{{ x is lower }}{{ 'AB' is upper }}",
     {"x": "abc", "n": None, "d": {"b": 1}, "l": [1, 2]}),
    ("{{ y }}|{{ y | default('dflt') }}|{{ '' | default('e', true) }}|{{ y | length }}|{{ y ~ 'x' }}"
     "|{% for i in y %}never{% endfor %}|{{ not y }}|{{ y or 'or' }}|{{ x and 'and' }}|{{ 'a' if y else 'b' }}"
     "|{{ 'c' if x }}|{{ d.missing }}|{{ d.missing is defined }}", {"x": "abc", "d": {}}),
    ("{{ 1 < 2 < 3 }}{{ 1 < 2 > 3 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ 1 == 1.0 }}{{ true == 1 }}"
     "{{ (1, 2) == [1, 2] }}{{ none == none }}{{ 1 != 2 }}{{ 2 >= 2 }}{{ 'abc' ~ 1 ~ none ~ true }}"
     "{{ 'ab' * 3 }}{{ [1] * 2 }}{{ [1] + [2] }}{{ -3 | abs }}{{ 3.7 | int }}{{ '42' | int + 1 }}{{ 2 | float }}"
     "{{ 2.5 | round }}{{ 3.5 | round }}{{ '5' | string }}", {}),
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} "
     "{{ greet('B', '?') }} {{ greet(name='C', punct='.') }}", {}),
    ("{% set block %}  inner {{ 1 + 1 }}\n{% endset %}[{{ block }}]{% filter upper %}up {{ 'x' }}{% endfilter %}"
     "{% with a = 5 %}{{ a }}{% endwith %}{{ a }}", {}),
    ("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}"
     "{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}{{ d | dictsort }}",
     {"d": {"y": 1, "x": 2}}),
    (r"""{{ 'it\'s' }} {{ "say \"hi\"" }} {{ ['it\'s', 'a"b', 'tab\there', '\u00e9\x41'] }}""", {}),
    ("{{ '%d %b %Y' | length }} {{ strftime_now('%Y-%m-%d %H:%M %A %d %b %Y') }}", {}),
    ("{{ text | indent(2) }}|{{ text | indent(2, true) }}|{{ 'a b  c' | wordcount }}|{{ '<a&b>' | e }}",
     {"text": "line1\nline2\n\nline4"}),
    ("{{ l[0].x }}{{ l | map(attribute='x') | sum }}{{ [3, 1, 2] | sort(reverse=true) | join }}"
     "{{ ['B', 'a', 'C'] | sort | join }}{{ ['B', 'a', 'C'] | sort(case_sensitive=true) | join }}",
     {"l": [{"x": 1}, {"x": 2}]}),
]


def micro_cases():
    return [{"template": "micro", "name": f"micro/{i}", "source": src, "now": NOW, "context": ctx}
            for i, (src, ctx) in enumerate(MICRO)]


def render_all():
    os.environ["TZ"] = "UTC"
    time.tzset()
    out = []
    env = make_env(NOW)
    for name, (source, tokens) in load_templates().items():
        tmpl = env.from_string(source)
        for case in cases_for(name, tokens):
            entry = {"template": name, "name": case["name"], "now": case["now"],
                     "context": case["context"]}
            try:
                entry["expected"] = tmpl.render(**case["context"])
            except jinja2.exceptions.UndefinedError as e:
                entry["error"] = str(e)
                entry["error_type"] = "UndefinedError"
            except jinja2.exceptions.TemplateError as e:
                # raise_exception(): the C++ renderer must surface this message.
                entry["error"] = str(e)
                entry["error_type"] = "TemplateError"
            except (TypeError, ValueError, AttributeError) as e:
                entry["error"] = str(e)
                entry["error_type"] = type(e).__name__
            out.append(entry)
    for case in micro_cases():
        entry = dict(case)
        try:
            entry["expected"] = env.from_string(case["source"]).render(**case["context"])
        except Exception as e:  # noqa: BLE001 - recorded, the C++ side must fail too
            entry["error"] = str(e)
            entry["error_type"] = type(e).__name__
        out.append(entry)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=GOLDENS)
    ap.add_argument("--check", action="store_true", help="compare with the checked-in goldens")
    args = ap.parse_args()
    goldens = render_all()
    text = json.dumps(goldens, ensure_ascii=False, indent=1) + "\n"
    if args.check:
        with open(GOLDENS, encoding="utf-8") as f:
            if f.read() != text:
                print("goldens differ from what jinja2 renders now; rerun make_goldens.py",
                      file=sys.stderr)
                return 1
        print(f"{len(goldens)} goldens match jinja2 {jinja2.__version__}")
        return 0
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {len(goldens)} goldens to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
